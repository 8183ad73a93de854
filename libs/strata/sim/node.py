"""One simulated node (one GPU): its replicas and their phases, what it reports in a heartbeat,
and the node samples its node manager would send.

Invariant: `phases` has an entry for exactly the replicas in `replicas`; a DRAINING one also
has its drain's start in `draining_since`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from strata.core.counters import EngineCounters
from strata.core.records import NodeSampleRecord
from strata.node.energy import PowerModel
from strata.policy.registry import ModelInfo, NodeState, ReplicaPhase, ReplicaState
from strata.policy.scheduling.prefill_ahead import class_tokens
from strata.policy.scheduling.slo import DecodeLoad, decode_allowance_ms, line_prefill_rate
from strata.sim.kv_tiers import NodeKV
from strata.sim.replica import SimReplica
from strata.sim.spec import ModelSpec
from strata.sim.tenancy import NodeFront
from strata.sim.workload import SimRequest

_SUMMED = ("steps", "step_tokens", "step_token_budget", "busy_seconds", "prompt_tokens",
           "prefix_hit_tokens", "tier_hit_tokens")  # fmt: skip


class NodeMode(enum.Enum):
    """What the node's pending StepEnd applies."""

    STEP = "step"  # one replica's exact step
    STRETCH = "stretch"  # a fast-forwarded stretch of its busy replicas
    FREE = "free"  # nothing: the GPU frees (a wait, or after a cut stretch)


@dataclass(slots=True)
class SimNode:
    node_id: str
    memory_bytes: int
    replicas: list[SimReplica] = field(default_factory=list)
    phases: dict[str, ReplicaPhase] = field(default_factory=dict)
    draining_since: dict[str, float] = field(default_factory=dict)
    current: SimReplica | None = None
    mode: NodeMode = NodeMode.STEP
    gen: int = 0
    run_pending: bool = False
    next_rr: int = 0
    last: EngineCounters = field(default_factory=EngineCounters)
    last_sample_s: float = 0.0
    energy_j: float = 0.0
    preemptions: int = 0
    stretching: list[SimReplica] = field(default_factory=list)  # in the node's stretch
    last_state: NodeState | None = None  # the last heartbeat's report, and its figures
    last_figures: tuple = ()
    # With a Tenancy: the node's queue for engine slots, each request queued with its first
    # attempt's arrival at the gateway.
    front: NodeFront[tuple[SimRequest, float]] | None = None
    kv: NodeKV | None = None  # with tiers or prefix routing: the node's blocks

    def report(self, models: Mapping[str, ModelSpec], now: float) -> NodeState:
        """What the node's heartbeat carries at `now`. An unchanged report is the same
        NodeState object again (the registry then only stamps it)."""
        tenancy = self.front is not None
        figures = tuple(
            (
                r.replica_id,
                self.phases[r.replica_id],
                len(r.scheduler.running),
                len(r.scheduler.waiting),
                r.queued_tokens(),
                class_tokens(r.scheduler.queued_by_class()) if tenancy else (),
                r.free_blocks(now),
                r.scheduler.waiting_for_memory,
                prefill_rate(r) if tenancy else 0.0,
                self.front.slots.load(r.replica_id) if self.front is not None else DecodeLoad(),
                self.front.slots.turnover_s(r.replica_id) if self.front is not None else 0.0,
                self.front.class_delays(r.replica_id) if self.front is not None else (),
                (decode_allowance_ms(r.scheduler.running, now) or 0.0) if tenancy else 0.0,
            )
            for r in self.replicas
        )
        loads = self.front.loads() if self.front is not None else ()
        arrived = self.front.arrivals.recent(now) if self.front is not None else ()
        if self.last_state is not None and (figures, loads, arrived) == self.last_figures:
            return self.last_state
        states = tuple(
            ReplicaState(
                model=r.model,
                replica_id=rid,
                phase=phase,
                running_requests=running,
                waiting_requests=waiting,
                queued_tokens=queued,
                queued_by_class=by_class,
                kv_blocks_total=r.limits.num_blocks,
                kv_blocks_free=free,
                waiting_for_memory=memory,
                tokens_per_s=rate,
                max_seqs=r.limits.max_seqs,
                block_size=r.limits.block_size,
                step_line=r.line,
                slots=slots,
                slot_turnover_s=turnover_s,
                max_batched_tokens=r.limits.max_batched_tokens,
                class_delays=delays,
                step_allowance_ms=allowance,
            )
            for r, (
                rid,
                phase,
                running,
                waiting,
                queued,
                by_class,
                free,
                memory,
                rate,
                slots,
                turnover_s,
                delays,
                allowance,
            ) in zip(self.replicas, figures)
        )
        served = tuple(
            ModelInfo(r.model, r.limits.max_context, models[r.model].memory_bytes)
            for r in self.replicas
            if self.phases[r.replica_id] is ReplicaPhase.READY
        )
        self.last_state = NodeState(
            self.node_id,
            self.node_id,
            self.memory_bytes,
            "sim",
            states,
            served,
            tenants=loads,
            arrived_routes=frozenset(arrived),
        )
        self.last_figures = (figures, loads, arrived)
        return self.last_state

    def announced(self, replica_id: str) -> ReplicaPhase | None:
        """The replica's phase in the node's last heartbeat (None: not in it)."""
        if self.last_state is None:
            return None
        for s in self.last_state.replicas:
            if s.replica_id == replica_id:
                return s.phase
        return None

    def sample(self, now: float, power: PowerModel, epoch_unix_ms: int) -> NodeSampleRecord:
        """The node sample at `now`, covering the interval since the previous one."""
        host = disk = 0
        if self.kv is not None:
            for r in self.stretching:
                r.sync(now)
            host, disk = self.kv.tier_blocks()
        total = EngineCounters()
        used = blocks = running = waiting = evicted = 0
        lifetime_sum = 0.0
        for r in self.replicas:
            c = r.counters_at(now)
            for name in _SUMMED:
                setattr(total, name, getattr(total, name) + getattr(c, name))
            used += r.used_blocks(now)
            blocks += r.limits.num_blocks
            running += len(r.scheduler.running)
            waiting += len(r.scheduler.waiting)
            evicted += r.pool.evictions
            lifetime_sum += r.pool.evicted_lifetime_sum_s
        last = self.last
        interval = now - self.last_sample_s
        busy = total.busy_seconds - last.busy_seconds
        utilization = min(1.0, max(0.0, busy / interval)) if interval > 0 else 0.0
        watts = power.watts(utilization)
        self.energy_j += watts * interval
        record = NodeSampleRecord(
            node_id=self.node_id,
            unix_ms=epoch_unix_ms + round(now * 1000),
            utilization=utilization,
            batch_tokens=max(0, total.step_tokens - last.step_tokens),
            batch_budget=max(0, total.step_token_budget - last.step_token_budget),
            kv_blocks_device_used=used,
            kv_blocks_device_total=blocks,
            kv_blocks_host=host,
            kv_blocks_disk=disk,
            tier_hit_tokens=total.tier_hit_tokens,
            running=running,
            waiting=waiting,
            preemptions=self.preemptions,
            power_watts=watts,
            energy_joules=self.energy_j,
            energy_source="model",
            prefix_hit_tokens=total.prefix_hit_tokens,
            prompt_tokens=total.prompt_tokens,
            kv_blocks_evicted=evicted,
            block_lifetime_sum_s=lifetime_sum,
        )
        # Replicas that left take their counters with them: never let the node's go down.
        self.last = total.at_least(last)
        self.last_sample_s = now
        return record


def prefill_rate(replica: SimReplica) -> float:
    """The replica's prefill throughput as its node reports it: measured once it has run a
    step, before that the rate its step line prices (the node manager's dispatcher)."""
    if not replica.counters.steps and replica.stretch is None:
        limits = replica.limits
        return line_prefill_rate(replica.line, limits.block_size, limits.max_batched_tokens)
    return replica.costs.prefill_tokens_per_s(replica.limits.block_size)
