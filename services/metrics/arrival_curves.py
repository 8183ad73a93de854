"""GetArrivalCurves: request checks, the window grid, and the reply built from the store's
per-window aggregates (strata.store.arrivals)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from strata.core.sla import SlaClass, SlaTable
from strata.policy.placement.curves import DAY_S, BurstSlices, WindowGrid
from strata.store.arrivals import ModelArrivals
from strata.v1 import metrics_pb2

MAX_WINDOWS = 10_080  # a week of one-minute windows
MAX_DAYS = 366


def grid_for(request: metrics_pb2.ArrivalCurvesRequest, now_ms: int) -> WindowGrid:
    """The grid a request asks for; ValueError with a sentence the caller can act on."""
    w = request.window_s
    if not (math.isfinite(w) and 0 < w <= DAY_S):
        raise ValueError(f"window_s must be between 0 and {DAY_S:.0f} seconds, got {w}")
    if request.end_unix_ms < 0:
        raise ValueError(
            f"end_unix_ms must be 0 (now) or a Unix time in milliseconds, got {request.end_unix_ms}"
        )
    end_s = (request.end_unix_ms or now_ms) / 1000
    if request.days < 0 or request.days > MAX_DAYS:
        raise ValueError(
            f"days must be 0 (the last `windows` windows) or 1 to {MAX_DAYS}, got {request.days}"
        )
    if request.days:
        slots = DAY_S / w
        if abs(slots - round(slots)) > 1e-9:
            raise ValueError(
                f"with days > 0 the day is cut into windows of window_s, so it "
                f"must divide {DAY_S:.0f} s; {w:g} s does not (try 300, 900, "
                f"3600)"
            )
        return WindowGrid(w, end_s - request.days * DAY_S, end_s, daily=True)
    if not 1 <= request.windows <= MAX_WINDOWS:
        raise ValueError(f"windows must be between 1 and {MAX_WINDOWS}, got {request.windows}")
    return WindowGrid.recent(w, request.windows, end_s)


def burst_for(request: metrics_pb2.ArrivalCurvesRequest, grid: WindowGrid) -> float:
    """The burst slice a request asks for (0: none); ValueError with a sentence to act on."""
    b = request.burst_s
    if b == 0:
        return 0.0
    if not (math.isfinite(b) and b > 0):
        raise ValueError(
            f"burst_s must be 0 (window means only) or a positive number of "
            f"seconds that divides window_s, got {b}"
        )
    BurstSlices(grid, b)
    return b


def tightest(classes: Iterable[SlaClass]) -> SlaClass:
    """One class holding each target's smallest value over `classes`, named after them all."""
    classes = sorted(set(classes), key=lambda c: c.name)
    ttft = [c.ttft_ms for c in classes if c.ttft_ms is not None]
    tpot = [c.tpot_ms for c in classes if c.tpot_ms is not None]
    return SlaClass(
        "+".join(c.name for c in classes), min(ttft, default=None), min(tpot, default=None)
    )


def curves_reply(
    grid: WindowGrid,
    found: list[ModelArrivals],
    tenant_classes: Mapping[str, str],
    table: SlaTable,
    burst_s: float = 0.0,
) -> metrics_pb2.ArrivalCurvesResponse:
    reply = metrics_pb2.ArrivalCurvesResponse(
        window_s=grid.window_s,
        start_unix_ms=round(grid.start_s * 1000),
        end_unix_ms=round(grid.end_s * 1000),
        observed_s=grid.observed_s(),
        burst_s=burst_s,
    )
    for m in found:
        sla = tightest(table.lookup(tenant_classes.get(t, table.default)) for t in m.tenants)
        target = metrics_pb2.SlaTarget(sla_class=sla.name)
        if sla.ttft_ms is not None:
            target.ttft_ms = sla.ttft_ms
        if sla.tpot_ms is not None:
            target.tpot_ms = sla.tpot_ms
        reply.curves.append(
            metrics_pb2.ArrivalCurve(
                model=m.model,
                requests=m.requests,
                prompt_tokens_mean=m.prompt_mean,
                output_tokens_mean=m.output_mean,
                sla=target,
                burst_requests=m.burst_requests,
            )
        )
    return reply
