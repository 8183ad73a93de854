"""Evaluation runs: a replay or benchmark opens one, tags its requests with the id, closes it.

A run's window (start to finish) bounds the node samples its report uses; its requests are the
ones whose gateway span carried its id, wherever they fall in time.
"""

from __future__ import annotations

import json
import time

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from strata.core.records import RunRecord
from strata.store.models import Run

RUN_KINDS = ("replay", "benchmark", "manual")
MAX_NAME_CHARS = 256


def _record(row: Run) -> RunRecord:
    return RunRecord(
        run_id=row.id,
        name=row.name,
        kind=row.kind,
        started_unix_ms=row.started_unix_ms,
        finished_unix_ms=row.finished_unix_ms,
        params_json=row.params_json,
        client_summary_json=row.client_summary_json,
        tenant=row.tenant,
    )


def _json_object(what: str, text: str) -> str:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(
            f"{what} must be a JSON object, got invalid JSON ({err.msg} at character {err.pos})"
        ) from None
    if not isinstance(value, dict):
        raise ValueError(f"{what} must be a JSON object, got a {type(value).__name__}")
    return text


def check_new_run(name: str, kind: str, params_json: str) -> tuple[str, str, str]:
    """The run's (name, kind, params) as given, kind defaulting to manual and params to {}
    (an empty name is filled in by create_run). Raises ValueError naming what is wrong."""
    if len(name) > MAX_NAME_CHARS:
        raise ValueError(f"a run name must be at most {MAX_NAME_CHARS} characters, got {len(name)}")
    kind = kind or "manual"
    if kind not in RUN_KINDS:
        raise ValueError(f"kind must be one of {', '.join(RUN_KINDS)}, got {kind!r}")
    return name, kind, _json_object("params_json", params_json or "{}")


async def create_run(
    session: AsyncSession,
    name: str,
    kind: str,
    params_json: str,
    now_ms: int,
    tenant: str | None = None,
) -> RunRecord:
    name, kind, params_json = check_new_run(name, kind, params_json)
    if not name.strip():
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(now_ms / 1000))
        name = f"{kind} {started} UTC"
    row = Run(
        name=name,
        kind=kind,
        started_unix_ms=now_ms,
        finished_unix_ms=None,
        params_json=params_json,
        client_summary_json=None,
        tenant=tenant,
    )
    session.add(row)
    await session.commit()
    return _record(row)


async def get_run(session: AsyncSession, run_id: int) -> RunRecord | None:
    row = await session.get(Run, run_id)
    return None if row is None else _record(row)


async def finish_run(
    session: AsyncSession, run_id: int, client_summary_json: str, now_ms: int
) -> RunRecord | None:
    """Close run_id at now_ms; None if no such run.

    Finishing a finished run keeps its first finish time (a retry after a lost reply must not
    move the window) and only stores a client summary if none was stored yet.
    """
    if client_summary_json:
        _json_object("client_summary_json", client_summary_json)
    row = await session.get(Run, run_id)
    if row is None:
        return None
    if row.finished_unix_ms is None:
        row.finished_unix_ms = max(now_ms, row.started_unix_ms)
    if client_summary_json and row.client_summary_json is None:
        row.client_summary_json = client_summary_json
    await session.commit()
    return _record(row)


async def list_runs(session: AsyncSession, tenant: str | None = None) -> list[RunRecord]:
    """Every run, oldest first; with `tenant`, only the runs that tenant opened."""
    query = select(Run).order_by(Run.id)
    if tenant is not None:
        query = query.where(Run.tenant == tenant)
    rows = (await session.execute(query)).scalars().all()
    return [_record(r) for r in rows]
