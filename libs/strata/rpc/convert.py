"""Protobuf <-> library types shared by several services (the node manager reports what the
scheduler reads): one pair of converters per type."""

from __future__ import annotations

import math
from collections.abc import Sequence

from strata.core.step_model import StepLine
from strata.policy.registry import ReplicaPhase, TenantLoad
from strata.policy.scheduling.delays import ClassDelays
from strata.policy.scheduling.prefill_ahead import ClassTokens, class_tokens
from strata.v1 import common_pb2

_PHASE_FROM_PB = {
    common_pb2.REPLICA_STATE_UNSPECIFIED: ReplicaPhase.UNSPECIFIED,
    common_pb2.REPLICA_STATE_LOADING: ReplicaPhase.LOADING,
    common_pb2.REPLICA_STATE_READY: ReplicaPhase.READY,
    common_pb2.REPLICA_STATE_DRAINING: ReplicaPhase.DRAINING,
    common_pb2.REPLICA_STATE_FAILED: ReplicaPhase.FAILED,
    common_pb2.REPLICA_STATE_STANDBY: ReplicaPhase.STANDBY,
}
_PHASE_TO_PB = {v: k for k, v in _PHASE_FROM_PB.items()}


def phase_from_pb(state: common_pb2.ReplicaState) -> ReplicaPhase:
    """A state added to the proto later reads as UNSPECIFIED, which routing never picks."""
    return _PHASE_FROM_PB.get(state, ReplicaPhase.UNSPECIFIED)


def phase_to_pb(phase: ReplicaPhase) -> common_pb2.ReplicaState:
    return _PHASE_TO_PB[phase]


def tenant_load_to_pb(t: TenantLoad) -> common_pb2.TenantLoad:
    return common_pb2.TenantLoad(
        tenant=t.tenant,
        priority=t.priority,
        running=t.running,
        queued=t.queued,
        tokens=t.tokens,
        running_best_effort=t.running_best_effort,
    )


def tenant_load_from_pb(t: common_pb2.TenantLoad) -> TenantLoad:
    return TenantLoad(
        tenant=t.tenant,
        priority=t.priority,
        running=t.running,
        queued=t.queued,
        tokens=max(0, t.tokens),
        running_best_effort=max(0, min(t.running, t.running_best_effort)),
    )


def step_line_from_pb(values: Sequence[float], samples: int) -> StepLine | None:
    """A reported step line (the step_line and step_line_samples of WorkerStats or ReplicaInfo):
    None when none was reported, or when it is malformed (not six coefficients, or one negative
    or not finite), so that a bad report prices nothing instead of failing the heartbeat."""
    if not values:
        return None
    try:
        return StepLine.from_coefficients(list(values), samples=max(0, samples))
    except ValueError:
        return None


def step_line_to_pb(line: StepLine | None) -> dict[str, list[float] | int]:
    """The step_line and step_line_samples fields of WorkerStats or ReplicaInfo (none for None)."""
    if line is None:
        return {}
    return {"step_line": list(line.coefficients()), "step_line_samples": line.samples}


def class_delays_from_pb(r: common_pb2.ReplicaInfo) -> ClassDelays:
    """The report's delays by class, ascending, the malformed ones dropped (a class at 0 is
    kept: it has samples and waits nothing); a report with only the class-blind
    recent_delay_s (an older node) gives it for every class."""
    by_class = {
        c.priority: c.delay_s for c in r.class_delays if math.isfinite(c.delay_s) and c.delay_s >= 0
    }
    if not by_class and math.isfinite(r.recent_delay_s) and r.recent_delay_s > 0:
        by_class[0] = r.recent_delay_s
    return tuple(sorted(by_class.items()))


def class_delays_to_pb(delays: ClassDelays) -> dict[str, float | list[common_pb2.ClassDelay]]:
    """ReplicaInfo's recent_delay_s and class_delays fields for `delays`."""
    return {
        "recent_delay_s": max((d for _, d in delays), default=0.0),
        "class_delays": [common_pb2.ClassDelay(priority=p, delay_s=d) for p, d in delays],
    }


def positive_or_zero(value: float) -> float:
    """A reported quantity that is either positive or absent: NaN, infinities and values at
    or below 0 read as 0 (absent)."""
    return value if math.isfinite(value) and value > 0 else 0.0


def class_tokens_from_pb(values: Sequence[common_pb2.ClassTokens]) -> ClassTokens:
    """Queued tokens by class as reported (WorkerStats or ReplicaInfo queued_by_class), in
    canonical form (strata.policy.scheduling.prefill_ahead.class_tokens)."""
    return class_tokens((c.priority, c.tokens) for c in values)


def class_tokens_to_pb(by_class: ClassTokens) -> list[common_pb2.ClassTokens]:
    return [common_pb2.ClassTokens(priority=p, tokens=n) for p, n in by_class]
