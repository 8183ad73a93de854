"""Node samples: what each node manager measured at one instant, and queries by time window.

Counters marked cumulative only grow while a node manager runs (a restart starts them again at
zero); the other figures describe the instant, or the interval since the node's previous sample.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from strata.store.models import NodeSample
from strata.store.spans import insert_ignoring_duplicates

ENERGY_SOURCES = ("nvml", "rapl", "model")


@dataclass(slots=True)
class NodeSampleRecord:
    node_id: str
    unix_ms: int
    utilization: float = 0.0        # fraction of the interval the engines were stepping
    batch_tokens: int = 0           # tokens computed in the interval's steps
    batch_budget: int = 0           # steps x max tokens per step in the interval
    kv_blocks_device_used: int = 0
    kv_blocks_device_total: int = 0
    kv_blocks_host: int = 0
    kv_blocks_disk: int = 0
    running: int = 0
    waiting: int = 0
    preemptions: int = 0            # cumulative
    power_watts: float = 0.0
    energy_joules: float = 0.0      # cumulative
    energy_source: str = "model"
    prefix_hit_tokens: int = 0      # cumulative
    tier_hit_tokens: int = 0        # cumulative
    prompt_tokens: int = 0          # cumulative
    kv_blocks_evicted: int = 0      # cumulative, device prefix-cache evictions
    block_lifetime_sum_s: float = 0.0   # cumulative, commit-to-eviction seconds of those
    block_lifetime_p50_s: float = 0.0   # recent evictions (0 without any)
    block_lifetime_p99_s: float = 0.0
    sparse_layer_steps: int = 0     # cumulative, layer computations on the sparse decode path
    sparse_fallbacks: int = 0       # cumulative, those sent back to full attention

    def problem(self) -> str | None:
        """A sentence saying what is wrong with this sample, or None when it can be stored."""
        if not self.node_id:
            return "a node sample needs a node_id"
        where = f"sample of node {self.node_id!r} at {self.unix_ms}"
        if self.unix_ms <= 0:
            return f"{where}: unix_ms must be a positive Unix time in milliseconds"
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                return f"{where}: {f.name} must be a finite number, got {value}"
            if isinstance(value, int | float) and value < 0:
                return f"{where}: {f.name} must not be negative, got {value}"
        if self.utilization > 1.0:
            return f"{where}: utilization is a fraction of time, at most 1, got {self.utilization}"
        if self.batch_tokens > self.batch_budget:
            return (f"{where}: batch_tokens ({self.batch_tokens}) cannot exceed batch_budget "
                    f"({self.batch_budget})")
        if self.kv_blocks_device_used > self.kv_blocks_device_total:
            return (f"{where}: kv_blocks_device_used ({self.kv_blocks_device_used}) cannot "
                    f"exceed kv_blocks_device_total ({self.kv_blocks_device_total})")
        if self.sparse_fallbacks > self.sparse_layer_steps:
            return (f"{where}: sparse_fallbacks ({self.sparse_fallbacks}) cannot exceed "
                    f"sparse_layer_steps ({self.sparse_layer_steps})")
        if self.energy_source not in ENERGY_SOURCES:
            return (f"{where}: energy_source must be one of {', '.join(ENERGY_SOURCES)}, "
                    f"got {self.energy_source!r}")
        return None


_FIELDS = {f.name for f in fields(NodeSampleRecord)} - {"node_id", "unix_ms"}


def _fields_json(s: NodeSampleRecord) -> str:
    values = asdict(s)
    return json.dumps({k: values[k] for k in sorted(_FIELDS)}, separators=(",", ":"))


def _record(node_id: str, ts: int, fields_json: str) -> NodeSampleRecord:
    # Fields a newer sampler added and this version does not know are ignored.
    stored = json.loads(fields_json)
    return NodeSampleRecord(node_id=node_id, unix_ms=ts,
                            **{k: v for k, v in stored.items() if k in _FIELDS})


async def insert_samples(session: AsyncSession, samples: Sequence[NodeSampleRecord]) -> int:
    """Store samples (each must have passed problem()); one already stored for the same node
    and millisecond is kept as it was. Returns how many distinct samples the batch held."""
    rows = {(s.node_id, s.unix_ms): {"node_id": s.node_id, "ts_unix_ms": s.unix_ms,
                                      "fields_json": _fields_json(s)} for s in samples}
    if rows:
        await session.execute(
            insert_ignoring_duplicates(session, NodeSample, ["node_id", "ts_unix_ms"]),
            list(rows.values()))
        await session.commit()
    return len(rows)


async def samples_between(session: AsyncSession, start_ms: int, end_ms: int
                          ) -> list[NodeSampleRecord]:
    """Samples with start_ms <= unix_ms <= end_ms, by node then time."""
    stmt = (select(NodeSample.node_id, NodeSample.ts_unix_ms, NodeSample.fields_json)
            .where(NodeSample.ts_unix_ms >= start_ms, NodeSample.ts_unix_ms <= end_ms)
            .order_by(NodeSample.node_id, NodeSample.ts_unix_ms))
    return [_record(*row) for row in (await session.execute(stmt)).all()]


async def sample_time_range(session: AsyncSession) -> tuple[int, int] | None:
    """The first and last sample times stored, or None without samples."""
    first, last = (await session.execute(
        select(func.min(NodeSample.ts_unix_ms), func.max(NodeSample.ts_unix_ms)))).one()
    return None if first is None else (first, last)
