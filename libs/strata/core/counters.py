"""An engine's cumulative counters: the one type the engine keeps, its worker reports
(WorkerStats), the node manager sums and the simulator counts.

Counters only grow while their engine runs; a reader takes differences between two reads. When
an engine restarts they all start again at zero together, which is how `CounterSum` tells a
restart from growth.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from strata.v1 import worker_pb2


@dataclass(slots=True)
class EngineCounters:
    steps: int = 0
    step_tokens: int = 0  # tokens computed by the steps
    step_token_budget: int = 0  # steps x the most tokens a step may compute
    preemptions: int = 0  # sequences preempted (blocks ran out, or a higher class)
    priority_preemptions: int = 0  # of them, running ones displaced for a higher class
    busy_seconds: float = 0.0  # wall time inside steps
    prompt_tokens: int = 0  # of finished requests
    prefix_hit_tokens: int = 0  # of them, served from the device prefix cache
    tier_hit_tokens: int = 0  # of them, loaded back from the KV tier store
    kv_blocks_evicted: int = 0  # device prefix-cache evictions
    block_lifetime_sum_s: float = 0.0  # seconds from commit to eviction, summed
    sparse_layer_steps: int = 0  # layer computations on the sparse decode path
    sparse_fallbacks: int = 0  # of them, sent back to full attention by the trust check
    step_seconds_observed: float = 0.0  # steps priced by the solo profile, as measured ...
    step_seconds_solo: float = 0.0  # ... and as the profile predicts (interference)

    @classmethod
    def from_pb(cls, s: worker_pb2.WorkerStats) -> EngineCounters:
        return cls(**{f.name: getattr(s, f.name) for f in fields(cls)})

    def to_pb_fields(self) -> dict[str, int | float]:
        """WorkerStats' counter fields, for `worker_pb2.WorkerStats(**...)`."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def grew_from(self, before: EngineCounters) -> bool:
        """False when any counter is below `before`'s: the engine restarted in between."""
        return all(getattr(self, f.name) >= getattr(before, f.name) for f in fields(self))

    def minus(self, before: EngineCounters) -> EngineCounters:
        return EngineCounters(
            **{f.name: getattr(self, f.name) - getattr(before, f.name) for f in fields(self)}
        )

    def plus(self, other: EngineCounters) -> EngineCounters:
        return EngineCounters(
            **{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)}
        )

    def at_least(self, other: EngineCounters) -> EngineCounters:
        """Field by field, the larger of the two."""
        return EngineCounters(
            **{f.name: max(getattr(self, f.name), getattr(other, f.name)) for f in fields(self)}
        )


class CounterSum:
    """The sum over engines of each counter's growth between reads. A read whose counters are
    below the engine's last one means it restarted: its current values are then all growth."""

    def __init__(self) -> None:
        self.total = EngineCounters()
        self._last: dict[str, EngineCounters] = {}

    def add(self, engine: str, now: EngineCounters) -> EngineCounters:
        """Fold in one engine's current counters; returns their growth since its last read (an
        engine seen for the first time grew from zero)."""
        before = self._last.get(engine, EngineCounters())
        growth = now.minus(before) if now.grew_from(before) else now
        self.total = self.total.plus(growth)
        self._last[engine] = now
        return growth
