"""Arrivals per model and time window, aggregated in SQL from the request rows: the input of the
placement planner's arrival curves (strata.policy.placement.curves).

A day of traffic is a few hundred thousand rows, so counting and summing happen in the database,
grouped by model and window; only one row per (model, window) comes back. Windows are whole
milliseconds counted from the span's start (recent grids) or from the Unix epoch (daily grids,
then folded by time of day, which works because a daily window divides the day). The integer
division is the same on SQLite and PostgreSQL since times are never before the origin.

With `burst_s` > 0 a second query counts arrivals per (model, slice of burst_s), one row per
slice that saw any, and each window keeps its busiest slice's count (the curves module's
BurstSlices maps slices to windows).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from sqlalchemy import and_, case, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from strata.core.records import STATUS_ERROR
from strata.policy.placement.curves import DAY_S, BurstSlices, WindowGrid
from strata.store.models import Request


@dataclass(slots=True, frozen=True)
class ModelArrivals:
    model: str
    requests: tuple[int, ...]  # per window, every arrival
    prompt_mean: tuple[float, ...]  # per window, over succeeded requests (0: none)
    output_mean: tuple[float, ...]
    tenants: tuple[str, ...]  # who sent them, sorted
    burst_requests: tuple[int, ...] = ()  # per window, its busiest burst_s slice (): not asked


async def arrivals(
    session: AsyncSession, grid: WindowGrid, burst_s: float = 0.0
) -> list[ModelArrivals]:
    """Per model (sorted), the grid's windows filled from requests that started in its span;
    with `burst_s` > 0 also each window's busiest slice (ValueError: it does not divide the
    window)."""
    slices = BurstSlices(grid, burst_s) if burst_s else None
    window_ms = round(grid.window_s * 1000)
    start_ms, end_ms = round(grid.start_s * 1000), round(grid.end_s * 1000)
    origin = 0 if grid.daily else start_ms
    bucket = ((Request.start_unix_ms - origin) // window_ms).label("bucket")
    ok = and_(Request.error_code == "", Request.status_code != STATUS_ERROR)
    in_span = and_(Request.start_unix_ms >= start_ms, Request.start_unix_ms < end_ms)
    stmt = (
        select(
            Request.model,
            bucket,
            func.count().label("n"),
            func.sum(case((ok, 1), else_=0)).label("ok"),
            func.sum(case((ok, Request.prompt_tokens), else_=0)).label("prompt"),
            func.sum(case((ok, Request.completion_tokens), else_=0)).label("output"),
        )
        .where(in_span)
        .group_by(Request.model, bucket)
    )
    n = grid.windows
    per_day = round(DAY_S / grid.window_s) if grid.daily else 0
    count: dict[str, list[int]] = defaultdict(lambda: [0] * n)
    good: dict[str, list[int]] = defaultdict(lambda: [0] * n)
    prompt: dict[str, list[int]] = defaultdict(lambda: [0] * n)
    output: dict[str, list[int]] = defaultdict(lambda: [0] * n)
    for row in (await session.execute(stmt)).all():
        k = int(row.bucket) % per_day if grid.daily else min(int(row.bucket), n - 1)
        count[row.model][k] += int(row.n)
        good[row.model][k] += int(row.ok or 0)
        prompt[row.model][k] += int(row.prompt or 0)
        output[row.model][k] += int(row.output or 0)
    tenants: dict[str, set[str]] = defaultdict(set)
    if count:
        pairs = (
            select(Request.model, Request.tenant)
            .where(in_span, Request.model.in_(sorted(count)))
            .distinct()
        )
        for model, tenant in (await session.execute(pairs)).all():
            tenants[model].add(tenant)
    busiest = await _busiest(session, slices, in_span) if slices is not None else {}
    return [
        ModelArrivals(
            m,
            tuple(count[m]),
            tuple(p / c if c else 0.0 for p, c in zip(prompt[m], good[m])),
            tuple(o / c if c else 0.0 for o, c in zip(output[m], good[m])),
            tuple(sorted(tenants[m])),
            tuple(busiest.get(m, [0] * n)) if slices is not None else (),
        )
        for m in sorted(count)
    ]


async def _busiest(session: AsyncSession, slices: BurstSlices, in_span) -> dict[str, list[int]]:
    burst_ms = round(slices.burst_s * 1000)
    origin_ms = round(slices.origin * 1000)
    piece = ((Request.start_unix_ms - origin_ms) // burst_ms).label("piece")
    stmt = (
        select(Request.model, piece, func.count().label("n"))
        .where(in_span)
        .group_by(Request.model, piece)
    )
    per_model: dict[str, dict[int, int]] = defaultdict(dict)
    for row in (await session.execute(stmt)).all():
        per_model[row.model][int(row.piece)] = int(row.n)
    return {m: slices.busiest(counts) for m, counts in per_model.items()}
