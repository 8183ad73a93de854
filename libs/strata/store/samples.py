"""Node samples: what each node manager measured at one instant, and queries by time window.

Counters marked cumulative only grow while a node manager runs (a restart starts them again at
zero); the other figures describe the instant, or the interval since the node's previous sample.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, fields

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from strata.core.records import NodeSampleRecord
from strata.store.models import NodeSample
from strata.store.spans import insert_ignoring_duplicates

_FIELDS = {f.name for f in fields(NodeSampleRecord)} - {"node_id", "unix_ms"}


def _fields_json(s: NodeSampleRecord) -> str:
    values = asdict(s)
    return json.dumps({k: values[k] for k in sorted(_FIELDS)}, separators=(",", ":"))


def _record(node_id: str, ts: int, fields_json: str) -> NodeSampleRecord:
    # Fields a newer sampler added and this version does not know are ignored.
    stored = json.loads(fields_json)
    return NodeSampleRecord(
        node_id=node_id, unix_ms=ts, **{k: v for k, v in stored.items() if k in _FIELDS}
    )


async def insert_samples(session: AsyncSession, samples: Sequence[NodeSampleRecord]) -> int:
    """Store samples (each must have passed problem()); one already stored for the same node
    and millisecond is kept as it was. Returns how many distinct samples the batch held."""
    rows = {
        (s.node_id, s.unix_ms): {
            "node_id": s.node_id,
            "ts_unix_ms": s.unix_ms,
            "fields_json": _fields_json(s),
        }
        for s in samples
    }
    if rows:
        await session.execute(
            insert_ignoring_duplicates(session, NodeSample, ["node_id", "ts_unix_ms"]),
            list(rows.values()),
        )
        await session.commit()
    return len(rows)


async def samples_between(
    session: AsyncSession, start_ms: int, end_ms: int
) -> list[NodeSampleRecord]:
    """Samples with start_ms <= unix_ms <= end_ms, by node then time."""
    stmt = (
        select(NodeSample.node_id, NodeSample.ts_unix_ms, NodeSample.fields_json)
        .where(NodeSample.ts_unix_ms >= start_ms, NodeSample.ts_unix_ms <= end_ms)
        .order_by(NodeSample.node_id, NodeSample.ts_unix_ms)
    )
    return [_record(*row) for row in (await session.execute(stmt)).all()]


async def sample_time_range(session: AsyncSession) -> tuple[int, int] | None:
    """The first and last sample times stored, or None without samples."""
    first, last = (
        await session.execute(
            select(func.min(NodeSample.ts_unix_ms), func.max(NodeSample.ts_unix_ms))
        )
    ).one()
    return None if first is None else (first, last)
