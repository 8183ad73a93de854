"""First-token delays as feedback for admission (strata.policy.scheduling.delays): what a node
records and reports, and how the scheduler's TTFT check uses it. Manual clocks throughout."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from strata.core.step_model import StepLine
from strata.core.tenant_policy import TenantPolicy
from strata.policy.clock import ManualClock
from strata.policy.kv_index import PrefixIndex
from strata.policy.registry import NodeRegistry, NodeState, ReplicaPhase, ReplicaState
from strata.policy.routing import RouteDecision, Router
from strata.policy.scheduling.admission import AdmissionSettings, Refusal
from strata.policy.scheduling.delays import FirstTokens, RecentDelays, class_delay_s
from strata.policy.scheduling.global_scheduler import GlobalScheduler, SchedulerSettings
from strata.policy.scheduling.ledger import PoolLedger
from strata.policy.scheduling.slo import solo_prefill_s

# 10 ms a step, 1 ms a token: a 1,000-token prompt alone is ~1 s to its first token.
LINE = StepLine(0.010, 0.001, 0.0, 0.0, 0.0, 0.0)


def test_the_delay_is_a_high_quantile_of_the_latest_first_tokens_and_ages_out():
    d = RecentDelays(window=10, quantile=0.9, max_age_s=20.0)
    assert d.delay_s("r", 0.0) == 0.0  # nothing measured: no claim
    for i in range(10):
        d.add("r", 0.1 * i, now=float(i))
    assert d.delay_s("r", 9.0) == pytest.approx(0.9)  # nearest rank of 0.0 .. 0.9
    d.add("r", -0.5, now=9.5)  # a prefill faster than its price waited nothing
    assert d.delay_s("r", 9.5) == pytest.approx(0.9)  # the window keeps the latest ten
    # Older than 20 s is forgotten: at 29.2 s only the one at 9.5 s is left.
    assert d.delay_s("r", 28.5) == pytest.approx(0.9)
    assert d.delay_s("r", 29.2) == 0.0
    assert d.delay_s("r", 30.0) == 0.0
    d.add("gone", 3.0, now=30.0)
    d.forget({"r"})
    assert d.delay_s("gone", 30.0) == 0.0
    with pytest.raises(ValueError):
        RecentDelays(window=0)


def test_a_replica_reports_its_delay_only_while_something_waits_for_a_first_token():
    ft = FirstTokens(RecentDelays(window=4))
    ft.dispatched("r", "a")
    ft.dispatched("r", "b")
    # a waited 3 s at the node for a prefill priced at 1 s: 2 s of delay.
    ft.first_token("r", "a", waited_s=3.0, own_s=1.0, now=10.0)
    # b still waits: a request arriving now would be second in line, 2 s a place.
    assert ft.delay_s("r", 10.0, queued=0) == pytest.approx(4.0)
    ft.released("r", "b")  # cancelled before its first token
    assert ft.delay_s("r", 10.0, queued=0) == 0.0  # the queue drained: no claim
    assert ft.delay_s("r", 10.0, queued=1) == pytest.approx(4.0)  # one queued for it
    ft.forget(set())
    assert ft.delay_s("r", 10.0, queued=1) == 0.0


def test_a_delay_is_taken_per_place_in_the_queue_and_priced_for_the_queue_now():
    ft = FirstTokens(RecentDelays(window=8, quantile=1.0))
    # A burst: c arrived behind a and b (both without a first token), and waited 3.5 s beyond
    # its own prefill, so about 3.5 / 3 s a place.
    ft.arrived("a", 0)
    ft.arrived("b", 1)
    ft.arrived("c", 2)
    for rid in ("a", "b", "c"):
        ft.dispatched("r", rid)
    ft.first_token("r", "a", waited_s=1.3, own_s=0.1, now=1.3)
    ft.first_token("r", "b", waited_s=2.5, own_s=0.1, now=2.5)
    ft.first_token("r", "c", waited_s=3.6, own_s=0.1, now=3.6)
    # Later one request is in the engine without a token: the next is second in line, priced
    # at two places, not at the 3.5 s the burst's last request waited.
    ft.arrived("d", 0)
    ft.dispatched("r", "d")
    assert ft.delay_s("r", 5.0, queued=0) == pytest.approx(2 * 1.2)
    # Ten queued for it besides: eleven ahead, twelve places.
    assert ft.delay_s("r", 5.0, queued=10) == pytest.approx(12 * 1.2)
    # A request that leaves before its first token leaves nothing behind.
    ft.arrived("e", 3)
    ft.left("e")
    ft.released("r", "d")
    assert ft._ahead == {}


def _scheduler(delay_s: float, priority: int = 1) -> GlobalScheduler:
    reg = NodeRegistry(clock=ManualClock())
    gs = GlobalScheduler(
        reg,
        Router(rng=random.Random(0), request_weight_tokens=100),
        PoolLedger(),
        PrefixIndex(),
        SchedulerSettings(admission=AdmissionSettings(oversubscription=2.0, horizon_s=30.0)),
    )
    r = ReplicaState(
        model="m",
        replica_id="r1",
        phase=ReplicaPhase.READY,
        kv_blocks_total=100,
        kv_blocks_free=100,
        tokens_per_s=2000.0,
        block_size=16,
        step_line=LINE,
        max_batched_tokens=256,
    )
    delays = ((priority, delay_s),) if delay_s > 0 else ()
    reg.heartbeat(NodeState("n1", "n1:1", replicas=(replace(r, class_delays=delays),)))
    return gs


def test_the_ttft_check_takes_the_replicas_recent_delay_over_a_shorter_estimate():
    policy = TenantPolicy("t", "standard", 1, 2000.0, None, 1.0, 0.0, 1.0)
    # Idle by every report: the estimate alone is the prompt at 2,000 tokens/s, 0.25 s.
    assert isinstance(_scheduler(0.0).route("m", policy, 500, 10), RouteDecision)
    # Its latest requests waited 1.5 s beyond their own prefill: 1.5 s + this prompt's own
    # ~0.52 s (two chunks of 256 and 244 tokens) passes the 1,700 ms the check allows.
    own = solo_prefill_s(LINE, 500, 16, 256)
    assert own == pytest.approx(0.010 * 2 + 0.001 * 500)
    refused = _scheduler(1.5).route("m", policy, 500, 10)
    assert isinstance(refused, Refusal) and refused.reason == "sla"
    assert f"{(1.5 + own) * 1000:.0f} ms" in refused.message
    # A short prompt still fits beside the same delay: 1.5 s + 0.06 s.
    assert isinstance(_scheduler(1.5).route("m", policy, 50, 10), RouteDecision)


def test_delays_are_kept_and_priced_per_class():
    ft = FirstTokens(RecentDelays(window=8, quantile=1.0))
    # A standard request (1) waited behind three others 4 s beyond its prefill: 1 s a place.
    # An interactive one (2) went before the queued standard ones: one ahead, 0.1 s a place.
    ft.arrived("s", 3, priority=1)
    ft.arrived("i", 1, priority=2)
    ft.arrived("x", 0, priority=1)
    for rid in ("s", "i", "x"):
        ft.dispatched("r", rid)
    ft.first_token("r", "s", waited_s=4.5, own_s=0.5, now=5.0)
    ft.first_token("r", "i", waited_s=0.7, own_s=0.5, now=5.0)
    # The standard "x" still waits in the engine, which serves the interactive class first;
    # the node's queue holds 4 standard requests and 1 interactive.
    assert (ft.waiting("r", 1), ft.waiting("r", 2)) == (1, 0)
    queued = {1: 5, 2: 1}
    delays = ft.class_delays("r", 5.0, lambda p: queued[p])
    assert delays == (
        (1, pytest.approx(1.0 * (5 + 1 + 1))),  # behind all five queued and x
        (2, pytest.approx(0.1 * (1 + 1))),  # behind the interactive one only
    )
    # Nothing either class cannot pass waits: both are reported at 0 (not left out, which
    # would have the scheduler read a lower class's delay), until their samples age out.
    ft.released("r", "x")
    assert ft.class_delays("r", 5.0, lambda p: 0) == ((1, 0.0), (2, 0.0))
    assert ft.class_delays("r", 30.0, lambda p: 0) == ()


def test_the_scheduler_reads_its_class_delay_or_the_nearest_class_below():
    delays = ((0, 9.0), (1, 2.0), (3, 0.5))
    assert class_delay_s(delays, 1) == 2.0
    assert class_delay_s(delays, 2) == 2.0  # none of class 2: standard's bounds it
    assert class_delay_s(delays, 5) == 0.5
    assert class_delay_s(((1, 2.0),), 0) == 0.0  # nothing at or below: no claim
    assert class_delay_s(((1, 2.0), (2, 0.0)), 2) == 0.0  # its own class waits nothing
    assert class_delay_s((), 1) == 0.0
    # The TTFT check: an interactive request is not judged by the standard class's delay.
    interactive = TenantPolicy("t", "interactive", 2, 2000.0, None, 1.0, 0.0, 1.0)
    refused = _scheduler(1.5, priority=1).route("m", interactive, 500, 10)
    assert isinstance(refused, Refusal)  # standard's 1.5 s bounds a class with no samples
    assert isinstance(_scheduler(1.5, priority=3).route("m", interactive, 500, 10), RouteDecision)
