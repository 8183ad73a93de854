"""Level 1: the pool ledger, quota admission, priority- and margin-aware routing, the SLA check,
the static and fcfs baselines, and sampled decisions over 1,000 nodes."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from strata.core.step_model import StepLine
from strata.core.tenant_policy import TenantPolicy
from strata.policy.clock import ManualClock
from strata.policy.kv_index import PrefixIndex
from strata.policy.registry import (
    NodeRegistry,
    NodeState,
    ReplicaPhase,
    ReplicaState,
    TenantLoad,
)
from strata.policy.routing import RouteDecision, Router
from strata.policy.scheduling.admission import MIN_RETRY_S, AdmissionSettings, Refusal, admit
from strata.policy.scheduling.global_scheduler import (
    INFEASIBLE,
    LINE_TOLERANCE,
    MIN_TTFT_MARGIN_MS,
    RATE,
    GlobalScheduler,
    Mode,
    RateLimit,
    SchedulerSettings,
    admission_allowance_ms,
    queued_ahead,
)
from strata.policy.scheduling.ledger import PoolLedger
from strata.policy.scheduling.slo import (
    DecodeLoad,
    chunk_budget,
    prefill_s,
    solo_prefill_s,
    step_ms,
)


def replica(
    rid: str,
    queued: int = 0,
    running: int = 0,
    total: int = 100,
    free: int = 100,
    rate: float = 0.0,
    phase: ReplicaPhase = ReplicaPhase.READY,
) -> ReplicaState:
    return ReplicaState(
        model="m",
        replica_id=rid,
        phase=phase,
        queued_tokens=queued,
        running_requests=running,
        kv_blocks_total=total,
        kv_blocks_free=free,
        tokens_per_s=rate,
    )


def node(
    node_id: str, *replicas: ReplicaState, tenants=(), margin: float = 0.0, arrived=()
) -> NodeState:
    return NodeState(
        node_id=node_id,
        address=f"{node_id}:1",
        replicas=replicas,
        tenants=tuple(tenants),
        safety_margin=margin,
        arrived_routes=frozenset(arrived),
    )


def scheduler(
    *nodes: NodeState,
    mode: Mode = Mode.TWO_LEVEL,
    sample: int = 0,
    tolerance: float = 0.0,
    seed: int = 0,
    **settings,
) -> GlobalScheduler:
    reg = NodeRegistry(clock=ManualClock())
    router = Router(
        rng=random.Random(seed),
        request_weight_tokens=100,
        sample_size=sample,
        tie_tolerance=tolerance,
    )
    settings.setdefault("admission", AdmissionSettings(oversubscription=2.0, horizon_s=30.0))
    gs = GlobalScheduler(
        reg, router, PoolLedger(), PrefixIndex(), SchedulerSettings(mode=mode, **settings)
    )
    for n in nodes:
        reg.heartbeat(n)
    return gs


def policy(
    tenant: str = "t",
    priority: int = 1,
    ttft_ms: float | None = None,
    guaranteed: float = 0.0,
    burst: float = 1.0,
) -> TenantPolicy:
    return TenantPolicy(tenant, "c", priority, ttft_ms, None, 1.0, guaranteed, burst)


def test_ledger_follows_heartbeats_pending_routes_and_expiry():
    gs = scheduler(
        node("n1", replica("r1", total=100), tenants=[TenantLoad("a", 1, 1, 0, 300)]),
        node("n2", replica("r2", total=50, phase=ReplicaPhase.LOADING)),
    )
    ledger = gs.ledger
    assert (ledger.capacity_tokens, ledger.tenant_tokens["a"]) == (1600, 300)  # READY only
    decision = gs.route("m", policy("a"), 100, 20)
    assert isinstance(decision, RouteDecision) and decision.route_id
    # reserved: 100 + 20; queued ahead on r1 until n1 reports: its 100 prompt tokens
    assert (ledger.tenant_tokens["a"], ledger.pending("n1", "r1")) == (420, 100)
    # A report taken before the request reached n1 does not list its route: it still counts.
    gs.registry.heartbeat(node("n1", replica("r1"), tenants=[TenantLoad("a", 1, 1, 0, 300)]))
    assert (ledger.tenant_tokens["a"], ledger.pending("n1", "r1")) == (420, 100)
    # n1's next report includes that request: the pending entry goes, the report counts it.
    gs.registry.heartbeat(
        node(
            "n1",
            replica("r1"),
            tenants=[TenantLoad("a", 1, 2, 0, 420)],
            arrived=[decision.route_id],
        )
    )
    assert (ledger.tenant_tokens["a"], ledger.pending("n1", "r1")) == (420, 0)
    gs.registry.clock.advance(gs.registry.ttl_s + 1)
    assert gs.registry.expire() == ["n1", "n2"]
    assert (ledger.capacity_tokens, ledger.tenant_tokens["a"], ledger.nodes) == (0, 0, 0)


def test_a_burst_routed_across_a_heartbeat_is_counted_until_the_node_lists_it():
    gs = scheduler(node("n1", replica("r1", total=1000)))
    ledger = gs.ledger
    routes = [gs.route("m", policy("a"), 50, 10) for _ in range(6)]
    ids = [r.route_id for r in routes if isinstance(r, RouteDecision)]
    assert len(set(ids)) == 6  # one id per decision
    assert ledger.pending_load("n1", "r1").seqs == 6 and ledger.pending("n1", "r1") == 300
    # The node's report lists the first four as received (the other two are still on their way
    # from the gateway): only those four leave the pending count.
    gs.registry.heartbeat(node("n1", replica("r1", total=1000), arrived=ids[:4]))
    assert ledger.pending_load("n1", "r1").seqs == 2 and ledger.pending("n1", "r1") == 100
    assert ledger.tenant_tokens["a"] == 2 * 60
    # The other two never arrive (their caller went away): they stop counting after the TTL.
    gs.registry.clock.advance(ledger.pending_ttl_s / 2)
    gs.registry.heartbeat(node("n1", replica("r1", total=1000), arrived=ids[:4]))
    assert ledger.pending_load("n1", "r1").seqs == 2
    gs.registry.clock.advance(ledger.pending_ttl_s / 2 + 0.1)
    gs.registry.heartbeat(node("n1", replica("r1", total=1000)))
    assert ledger.pending_load("n1", "r1").seqs == 0 and ledger.tenant_tokens["a"] == 0


def test_lower_classes_are_turned_away_first_as_the_pool_fills():
    ledger = PoolLedger(capacity_tokens=1000, tokens_per_s=1000.0)
    ledger.tenant_tokens.update({"x": 1690, "g": 10})  # of 2000: batch stops at 80%, std 90%
    ledger.guarantees["g"] = 0.1
    settings = AdmissionSettings(oversubscription=2.0, class_step=0.1)
    assert admit(policy("b", priority=0), 200, ledger, settings).reason == "pool_full"
    assert admit(policy("s", priority=1), 100, ledger, settings) is None
    assert admit(policy("s", priority=1), 200, ledger, settings).reason == "pool_full"
    assert admit(policy("i", priority=2), 300, ledger, settings) is None


def test_capacity_is_what_a_replica_holds_or_computes_in_the_horizon():
    gs = scheduler(
        node("n1", replica("r1", total=100, rate=10.0)),  # 1600 KV, 300 in 30 s
        node("n2", replica("r2", total=100, rate=1000.0)),  # 1600 KV, 30000
        node("n3", replica("r3", total=100)),
    )  # 1600 KV, no rate yet
    assert gs.ledger.capacity_tokens == 300 + 1600 + 1600


def test_burst_share_refuses_with_a_retry_hint_but_never_a_first_request():
    ledger = PoolLedger(capacity_tokens=1000, tokens_per_s=100.0)
    burst = policy("a", burst=0.5)  # of the 2 x 1000 tokens the pool admits: 1000
    two = AdmissionSettings(oversubscription=2.0)
    assert admit(burst, 1800, ledger, two) is None  # holds nothing yet: one is servable
    ledger.tenant_tokens["a"] = 900
    refusal = admit(burst, 200, ledger, two)
    assert isinstance(refusal, Refusal) and refusal.reason == "burst"
    # 100 tokens over its cap, drained at its share (50%) of 100 tokens/s: 2 s
    assert refusal.retry_after_s == pytest.approx(2.0)
    assert refusal.message.startswith("tenant 'a' holds 900 tokens of work")
    assert admit(burst, 100, ledger, two) is None  # exactly at the cap


def test_full_pool_refuses_borrowers_but_admits_within_the_guarantee():
    ledger = PoolLedger(capacity_tokens=1000, tokens_per_s=500.0)
    ledger.tenant_tokens.update({"big": 1900, "small": 50})
    settings = AdmissionSettings(oversubscription=2.0, class_step=0.1)
    # alone, a borrower's work queues on the nodes: nobody's guarantee is at stake
    assert admit(policy("big"), 100, ledger, settings) is None
    ledger.guarantees["small"] = 0.2  # small holds work within its guarantee
    refusal = admit(policy("big"), 100, ledger, settings)
    # a standard (priority 1) tenant is refused at 90% of the 2000 admitted: 250 tokens over,
    # at 500 tokens/s
    assert refusal.reason == "pool_full" and refusal.retry_after_s == pytest.approx(0.5)
    assert admit(policy("small", guaranteed=0.2), 100, ledger, settings) is None
    # Interference: a mean safety margin of 0.5 halves what the pool admits.
    ledger2 = PoolLedger(capacity_tokens=1000, margin_sum=0.5, nodes=1)
    ledger2.tenant_tokens.update({"x": 890, "g": 10})  # of 900 a standard tenant is admitted to
    ledger2.guarantees["g"] = 0.1
    assert admit(policy("y"), 200, ledger2, settings).reason == "pool_full"
    assert (
        admit(policy("y"), 200, ledger2, AdmissionSettings(2.0, use_margin=False, class_step=0.1))
        is None
    )


def test_every_class_counts_all_queued_work_as_ahead_of_it():
    # The engine finishes started prefill chunks before admitting new work, so 1000 queued
    # batch tokens delay an interactive request as much as 1000 interactive ones would.
    gs = scheduler(
        node("n1", replica("r1", queued=1000), tenants=[TenantLoad("bulk", 0, 0, 3, 1000)]),
        node("n2", replica("r2", queued=300), tenants=[TenantLoad("web", 2, 1, 0, 300)]),
    )
    assert gs.route("m", policy("chat", priority=2), 10, 10).node_id == "n2"


def test_safety_margin_and_pending_work_steer_away():
    gs = scheduler(
        node("n1", replica("r1", queued=100), margin=0.5), node("n2", replica("r2", queued=120))
    )
    assert gs.route("m", policy(), 10, 0).node_id == "n2"  # 110 * 1.5 > 130
    gs2 = scheduler(node("n1", replica("r1")), node("n2", replica("r2", queued=70)))
    picks = [gs2.route("m", policy(), 40, 40).node_id for _ in range(3)]
    # n1 gets the first; its 40 prompt tokens pending there and the decode to follow (100) are
    # then more than n2's 70, so the second goes to n2; then n1's 140 < n2's 210
    assert picks == ["n1", "n2", "n1"]


def test_sla_check_refuses_what_no_replica_can_serve_in_time():
    # 900 tokens ahead + 100 to prefill at 1000 tokens/s: an estimated first token at 1000 ms.
    gs = scheduler(node("n1", replica("r1", queued=900, rate=1000.0)))
    decision = gs.route("m", policy(ttft_ms=2000.0), 100, 10)
    assert isinstance(decision, RouteDecision)
    assert decision.estimated_ttft_ms == pytest.approx(1000.0)
    refusal = gs.route("m", policy(ttft_ms=500.0), 100, 10)
    assert isinstance(refusal, Refusal) and refusal.reason == "sla"
    assert "TTFT target of 500 ms" in refusal.message
    # the first decision's 100 prompt tokens are pending there now: 900 + 100 ahead + 100 to
    # prefill -> 1.1 s estimated against 0.5 s
    assert refusal.retry_after_s == pytest.approx(0.6)
    relaxed = scheduler(node("n1", replica("r1", queued=900, rate=1000.0)), sla_check=False)
    assert isinstance(relaxed.route("m", policy(ttft_ms=500.0), 100, 10), RouteDecision)


def test_static_partitions_confine_each_tenant_and_name_a_missing_one():
    nodes = [node("n1", replica("r1", queued=500)), node("n2", replica("r2"))]
    gs = scheduler(*nodes, mode=Mode.STATIC, partitions={"a": frozenset({"n1"})})
    assert gs.route("m", policy("a"), 10, 10).node_id == "n1"  # n2 is idle, but not a's
    refusal = gs.route("m", policy("b"), 10, 10)
    assert refusal.reason == "partition" and "tenant 'b' has no partition" in refusal.message
    with pytest.raises(ValueError, match="static mode needs partitions"):
        SchedulerSettings(mode=Mode.STATIC)


def test_fcfs_mode_ignores_quotas():
    gs = scheduler(
        node("n1", replica("r1", total=10), tenants=[TenantLoad("a", 1, 9, 9, 5000)]),
        mode=Mode.FCFS,
    )
    assert isinstance(gs.route("m", policy("a", burst=0.1), 100, 100), RouteDecision)
    two = scheduler(node("n1", replica("r1", total=10), tenants=[TenantLoad("a", 1, 9, 9, 5000)]))
    assert two.route("m", policy("a", burst=0.1), 100, 100).reason == "burst"


def test_tie_tolerance_spreads_near_equal_replicas():
    nodes = [node(f"n{i}", replica(f"r{i}", queued=100 + i)) for i in range(5)]
    exact = scheduler(*nodes)
    assert {exact.route("m", policy(), 0, 0).node_id for _ in range(1)} == {"n0"}
    spread = scheduler(*nodes, tolerance=0.1, seed=3)
    # no pending feedback between picks (max_tokens 0, prompt 0): only the draw spreads them
    assert len({spread.route("m", policy(), 0, 0).node_id for _ in range(40)}) == 5


def test_tie_tolerance_is_a_share_of_the_wait_not_of_the_prompts_own_prefill():
    # A 1000-token prompt: 1 s of its own prefill everywhere. n0 is idle; n1 has 50 tokens
    # queued (50 ms), within 10% of the whole estimate but not of n0's wait (none): the prompt
    # always goes to the idle replica.
    # One decision per seeded scheduler: a decision's own work counts on its replica after it.
    def picks(*nodes: NodeState) -> set[str]:
        return {
            scheduler(*nodes, tolerance=0.1, seed=seed).route("m", policy(), 1000, 0).node_id
            for seed in range(30)
        }

    idle = node("n0", replica("r0", rate=1000.0))
    assert picks(idle, node("n1", replica("r1", queued=50, rate=1000.0))) == {"n0"}
    # Behind queues on both (1000 and 1080 tokens: waits of 1 s and 1.08 s) they tie.
    busy = node("n0", replica("r0", queued=1000, rate=1000.0))
    assert picks(busy, node("n1", replica("r1", queued=1080, rate=1000.0))) == {"n0", "n1"}


def test_a_request_routed_but_not_reported_weighs_its_decode_as_a_running_one_does():
    # n0 runs one request (100 tokens of decode ahead); n1 is idle and takes a 96-token prompt.
    # Unreported, that request still queues its prompt and will decode there: 96 + 100 tokens
    # ahead of the next prompt, more than n0's, so the next prompt goes to n0.
    gs = scheduler(
        node("n0", replica("r0", running=1, rate=1000.0)), node("n1", replica("r1", rate=1000.0))
    )
    assert gs.route("m", policy(), 96, 10).node_id == "n1"
    assert gs.ledger.pending_requests("n1", "r1") == 1
    assert gs.route("m", policy(), 1000, 10).node_id == "n0"


def test_sampled_decisions_over_a_thousand_nodes_keep_the_prefix_holder():
    nodes = [node(f"n{i:04d}", replica(f"r{i}", queued=500)) for i in range(1000)]
    gs = scheduler(*nodes, sample=16)
    chain = [11, 12, 13, 14]
    gs.index.apply("n0777", "kv:1", 1, True, chain, ())
    for _ in range(20):
        d = gs.route("m", policy(), 64, 0, prefix_hashes=chain)
        assert (d.node_id, d.cached_blocks) == ("n0777", 4)
        # a report that lists the route clears its pending work
        gs.registry.heartbeat(node("n0777", replica("r777", queued=500), arrived=[d.route_id]))
    seen = {gs.route("m", policy(), 64, 0).node_id for _ in range(50)}
    assert len(seen) > 10  # random samples, not always the same few nodes


def test_registry_index_tracks_phase_changes_and_expiry():
    reg = NodeRegistry(clock=ManualClock())
    reg.heartbeat(node("n1", replica("a"), replica("b")))
    assert sorted(loc.replica.replica_id for loc in reg.ready_index("m")[0]) == ["a", "b"]
    reg.heartbeat(node("n1", replica("a", phase=ReplicaPhase.DRAINING), replica("b")))
    items, by_node = reg.ready_index("m")
    assert [loc.replica.replica_id for loc in items] == ["b"]
    assert [loc.replica.replica_id for loc in by_node["n1"]] == ["b"]
    reg.heartbeat(node("n2", replica("c")))
    reg.clock.advance(reg.ttl_s + 1)
    reg.heartbeat(node("n2", replica("c")))
    reg.expire()
    assert [loc.node.node_id for loc in reg.ready_index("m")[0]] == ["n2"]


def test_a_prompt_too_long_for_the_target_anywhere_is_refused_as_infeasible():
    # 2000 tokens alone take 2 s at 1000 tokens/s: a 500 ms target cannot be met even on an
    # idle replica. Waiting would not help: refused as infeasible, with no retry hint.
    gs = scheduler(node("n1", replica("r1", queued=900, rate=1000.0)))
    refused = gs.route("m", policy(ttft_ms=500.0), 2000, 10)
    assert isinstance(refused, Refusal) and refused.reason == INFEASIBLE
    assert "looser target" in refused.message and refused.retry_after_s == 0.0
    # A prompt the target holds for alone is judged on the queue as before.
    assert isinstance(gs.route("m", policy(ttft_ms=1500.0), 200, 10), RouteDecision)
    # Turned off, the infeasible request is served (the isolation benchmark's setting).
    lenient = scheduler(node("n1", replica("r1", queued=900, rate=1000.0)), refuse_infeasible=False)
    decision = lenient.route("m", policy(ttft_ms=500.0), 2000, 10)
    assert isinstance(decision, RouteDecision)
    assert (decision.estimated_ttft_ms, decision.solo_ttft_ms) == (
        pytest.approx(2900.0),
        pytest.approx(2000.0),
    )


def test_a_prompt_within_the_lines_error_of_its_target_is_served_when_idle_not_refused():
    # 1050 tokens alone: 1050 ms at 1000 tokens/s, 5% past a 1000 ms target: within the step
    # line's error (LINE_TOLERANCE), so the final refusal is not made. A retry cannot help it:
    # it goes while its estimate is within the line's error of the target (1100 ms), and is
    # refused for a retry behind a longer queue.
    assert LINE_TOLERANCE == 0.1
    idle = scheduler(node("n1", replica("r1", rate=1000.0)))
    decision = idle.route("m", policy(ttft_ms=1000.0), 1050, 10)
    assert isinstance(decision, RouteDecision)
    assert decision.solo_ttft_ms == pytest.approx(1050.0)
    short = scheduler(node("n1", replica("r1", queued=40, rate=1000.0)))
    assert isinstance(short.route("m", policy(ttft_ms=1000.0), 1050, 10), RouteDecision)
    queued = scheduler(node("n1", replica("r1", queued=100, rate=1000.0)))
    refused = queued.route("m", policy(ttft_ms=1000.0), 1050, 10)
    assert isinstance(refused, Refusal) and refused.reason == "sla"
    # Past the tolerance the refusal is final, as before.
    far = scheduler(node("n1", replica("r1", rate=1000.0)))
    refused = far.route("m", policy(ttft_ms=1000.0), 1150, 10)
    assert isinstance(refused, Refusal) and refused.reason == INFEASIBLE


def test_near_its_target_even_alone_a_request_goes_when_the_replica_is_idle():
    # 900 tokens alone: 900 ms, within a 1000 ms target but past its 850 ms margin.
    idle = scheduler(node("n1", replica("r1", rate=1000.0)))
    assert isinstance(idle.route("m", policy(ttft_ms=1000.0), 900, 10), RouteDecision)
    queued = scheduler(node("n1", replica("r1", queued=300, rate=1000.0)))
    refused = queued.route("m", policy(ttft_ms=1000.0), 900, 10)
    assert isinstance(refused, Refusal) and refused.reason == "sla"


def test_a_request_a_retry_cannot_help_goes_while_its_estimate_is_near_the_target():
    # 900 tokens alone: 900 ms; refused, it could come back no sooner than MIN_RETRY_S, and
    # alone then it would be past the 850 ms margin: a refusal cannot help it. With 50 tokens
    # queued ahead (950 ms) it goes; with 150 (1050 ms, within the step line's error of the
    # target: LINE_TOLERANCE) too; with 300 (1200 ms) it does not.
    assert MIN_RETRY_S == 0.5 and LINE_TOLERANCE == 0.1
    for queued in (50, 150):
        near = scheduler(node("n1", replica("r1", queued=queued, rate=1000.0)))
        assert isinstance(near.route("m", policy(ttft_ms=1000.0), 900, 10), RouteDecision)
    far = scheduler(node("n1", replica("r1", queued=300, rate=1000.0)))
    refused = far.route("m", policy(ttft_ms=1000.0), 900, 10)
    assert isinstance(refused, Refusal) and "over the 1100 ms admission allows" in refused.message
    # A short prompt a retry can help keeps the margin: 100 ms alone, 900 ms with the queue.
    short = scheduler(node("n1", replica("r1", queued=800, rate=1000.0)))
    refused = short.route("m", policy(ttft_ms=1000.0), 100, 10)
    assert isinstance(refused, Refusal) and "over the 850 ms admission allows" in refused.message


def test_a_class_whose_target_a_retry_would_use_up_keeps_its_margin():
    # A 500 ms target: its 350 ms allowance (at least MIN_TTFT_MARGIN_MS below the target) is
    # shorter than the MIN_RETRY_S wait, so a retry never meets it for any request of the
    # class; the margin still holds for those that meet it alone. 100 tokens at 1000 tokens/s:
    # 100 ms alone.
    assert MIN_RETRY_S == 0.5 and MIN_TTFT_MARGIN_MS == 150.0
    fits = scheduler(node("n1", replica("r1", queued=250, rate=1000.0)))
    assert isinstance(fits.route("m", policy(ttft_ms=500.0), 100, 10), RouteDecision)
    past = scheduler(node("n1", replica("r1", queued=300, rate=1000.0)))
    refused = past.route("m", policy(ttft_ms=500.0), 100, 10)
    assert isinstance(refused, Refusal) and "over the 350 ms admission allows" in refused.message
    # Past the margin even alone (450 ms), it goes while the replica is idle.
    idle = scheduler(node("n1", replica("r1", rate=1000.0)))
    assert isinstance(idle.route("m", policy(ttft_ms=500.0), 450, 10), RouteDecision)


def test_a_short_target_keeps_an_absolute_margin_never_below_half_its_slack():
    # target x 0.85, at least 150 ms below the target, never below half of target x 0.85.
    assert admission_allowance_ms(2000.0, 0.85, 150.0) == pytest.approx(1700.0)
    assert admission_allowance_ms(1000.0, 0.85, 150.0) == pytest.approx(850.0)
    assert admission_allowance_ms(500.0, 0.85, 150.0) == pytest.approx(350.0)
    assert admission_allowance_ms(200.0, 0.85, 150.0) == pytest.approx(85.0)
    assert admission_allowance_ms(500.0, 0.85, 0.0) == pytest.approx(425.0)
    # The scheduler judges with its settings' margin: with none, 425 ms again.
    lax = scheduler(node("n1", replica("r1", queued=300, rate=1000.0)), min_margin_ms=0.0)
    assert isinstance(lax.route("m", policy(ttft_ms=500.0), 100, 10), RouteDecision)
    with pytest.raises(ValueError, match="min_margin_ms"):
        SchedulerSettings(min_margin_ms=-1.0)


def test_prompts_avoid_nodes_where_they_would_stall_other_tenants_protected_decodes():
    # n1: 4 chat sequences decoding; n2: 4 bulk (best effort) sequences and a little more
    # queued. An aggressor's 500-token prompt at 1000 tokens/s stalls each chat decode on n1
    # for 0.5 s: 2 s of inflicted delay outweighs n2's 100 extra queued tokens.
    loads = {"n1": [TenantLoad("chat", 2, 4, 0, 800)], "n2": [TenantLoad("bulk", 0, 4, 0, 800)]}
    nodes = [
        node("n1", replica("r1", rate=1000.0), tenants=loads["n1"]),
        node("n2", replica("r2", queued=100, rate=1000.0), tenants=loads["n2"]),
    ]
    assert scheduler(*nodes).route("m", policy("agg", priority=1), 500, 10).node_id == "n2"
    # chat itself does not count its own sequences: it takes the less loaded n1
    assert scheduler(*nodes).route("m", policy("chat", priority=2), 500, 10).node_id == "n1"
    # the pooled baseline knows no classes: least load wins
    assert scheduler(*nodes, mode=Mode.FCFS).route("m", policy("agg"), 500, 10).node_id == "n1"


# -- the TPOT check: engine slots ----------------------------------------------------------------
# 10 ms a step, 2 ms a decode token, 1 ms per 1,000 keys read (strata.policy.scheduling.slo).
LINE = StepLine(0.010, 2e-5, 0.002 - 2e-5, 1e-8, 1e-6, 0.0)


def busy(seqs: int, tpot_ms: float | None = 100.0, queued_tenants=()) -> NodeState:
    """A node whose one replica runs `seqs` requests of 1,000 keys (step = 10 + 3 seqs ms)."""
    r = ReplicaState(
        model="m",
        replica_id="r",
        phase=ReplicaPhase.READY,
        kv_blocks_total=10_000,
        kv_blocks_free=10_000,
        tokens_per_s=10_000.0,
        step_line=LINE,
        slots=DecodeLoad.of([(1000, tpot_ms)] * seqs),
        slot_turnover_s=8.8 / 26,  # requests hold a slot for 1,000 steps of 8.8 ms
        max_seqs=32,
    )
    return node("n", r, tenants=queued_tenants)


def sla(ttft_ms: float | None, tpot_ms: float | None = 100.0) -> TenantPolicy:
    return TenantPolicy("t", "standard", 1, ttft_ms, tpot_ms)


def test_a_request_the_running_decodes_have_no_room_for_waits_for_one_to_finish():
    # 26 running: the 27th would take the step past 90 ms; waiting for one of them to finish
    # (a slot frees every 8.8 s / 26) is 0.34 s, and its one-block prompt then takes a step:
    # within a 2 s TTFT, past a 200 ms one.
    assert isinstance(scheduler(busy(26)).route("m", sla(2000.0), 16, 984), RouteDecision)
    refused = scheduler(busy(26)).route("m", sla(200.0), 16, 984)
    assert isinstance(refused, Refusal) and refused.reason == "sla"
    assert refused.retry_after_s == pytest.approx(0.5)  # the floor: room frees in 0.34 s
    # Once decodes finish there is room, and the same request goes at once.
    assert isinstance(scheduler(busy(20)).route("m", sla(200.0), 16, 984), RouteDecision)


def test_requests_routed_since_the_last_heartbeat_count_against_the_slots():
    gs = scheduler(busy(24))  # a one-block prefill step beside 26 decodes: 88 ms + 16 tokens
    assert isinstance(gs.route("m", sla(250.0), 16, 984), RouteDecision)  # 25th fits
    assert isinstance(gs.route("m", sla(250.0), 16, 984), RouteDecision)  # 26th fits
    refused = gs.route("m", sla(250.0), 16, 984)  # the 27th would not
    assert isinstance(refused, Refusal) and refused.reason == "sla"


def test_a_higher_class_is_not_priced_behind_lower_ones_waiting_for_a_slot():
    # The engine is full (26); two standard requests routed since the report wait at the
    # node. An interactive one goes before them (the node's queue serves classes in strict
    # priority): one turnover (0.34 s) and a step, within 600 ms less 15%, not three.
    gs = scheduler(busy(26))
    for _ in range(2):
        assert isinstance(gs.route("m", sla(2000.0), 16, 984), RouteDecision)
    assert gs.ledger.pending_below("n", "r", 2) == 2
    urgent = TenantPolicy("u", "interactive", 2, 600.0, 100.0)
    assert isinstance(gs.route("m", urgent, 16, 984), RouteDecision)
    # Another standard one waits behind all three: four turnovers, past 600 ms.
    assert isinstance(gs.route("m", sla(600.0), 16, 984), Refusal)


def test_a_class_that_would_displace_a_lower_one_waits_no_longer_than_the_node_lets_it():
    # Eight slots, all running; a slot frees every 2 s. An interactive request (500 ms) would
    # wait 2 s by turnover, but the node displaces a lower class for it once it has waited
    # URGENT_FRACTION of its target (strata.node.dispatcher): it waits 250 ms at most.
    def full(running: list[TenantLoad]) -> NodeState:
        n = busy(8)
        r = replace(n.replicas[0], max_seqs=8, slot_turnover_s=2.0)
        return node("n", r, tenants=running)

    chat = TenantPolicy("u", "interactive", 2, 500.0, 100.0)
    bulk = [TenantLoad("bulk", 0, 8, 0, 8000)]
    assert isinstance(scheduler(full(bulk)).route("m", chat, 16, 100), RouteDecision)
    # The engine runs only its own class or above: nobody to displace, 2 s to wait.
    peers = [TenantLoad("peer", 2, 8, 0, 8000)]
    refused = scheduler(full(peers)).route("m", chat, 16, 100)
    assert isinstance(refused, Refusal) and refused.reason == "sla"
    # Seven of its class run and one more queues ahead: they take the one lower slot first.
    mixed = [TenantLoad("peer", 2, 7, 1, 8000), TenantLoad("bulk", 0, 1, 0, 1000)]
    assert isinstance(scheduler(full(mixed)).route("m", chat, 16, 100), Refusal)
    mixed = [TenantLoad("peer", 2, 6, 1, 8000), TenantLoad("bulk", 0, 2, 0, 1000)]
    assert isinstance(scheduler(full(mixed)).route("m", chat, 16, 100), RouteDecision)


def test_a_class_displaces_best_effort_at_once_and_is_priced_so():
    # As above, with 300 ms of prompts queued ahead at the replica's rate: 250 ms of waiting
    # to displace a standard request on top is past 500 ms; a best-effort one is displaced
    # at once (strata.policy.scheduling.slots), no wait.
    def full(running_best_effort: int) -> NodeState:
        r = replace(busy(8).replicas[0], max_seqs=8, slot_turnover_s=2.0, queued_tokens=3000)
        return node("n", r, tenants=[TenantLoad("low", 0, 8, 0, 8000, running_best_effort)])

    chat = TenantPolicy("u", "interactive", 2, 500.0, 100.0)
    refused = scheduler(full(0)).route("m", chat, 16, 100)
    assert isinstance(refused, Refusal) and refused.estimate is not None
    assert refused.estimate.slot_wait_ms == pytest.approx(250.0)
    assert refused.estimate.ahead_ms == pytest.approx(300.0, rel=0.1)
    assert isinstance(scheduler(full(1)).route("m", chat, 16, 100), RouteDecision)


def test_a_long_prompt_beside_a_full_decode_batch_is_priced_by_its_chunks():
    # Beside 26 decodes of a 100 ms TPOT target a step may carry one block of prefill (the
    # decodes alone take 88 ms of the 90 ms allowed): 900 tokens would take 57 steps of
    # ~90 ms. Sooner, the engine runs the decodes alone, 2 ms of slack a step, until their
    # slack pays for the prompt's whole step: still 2.8 s to the first token, though the
    # replica's token rate says 0.1 s.
    refused = scheduler(busy(26)).route("m", sla(2000.0), 900, 100)
    assert isinstance(refused, Refusal) and refused.reason == "sla"
    assert "estimated at 2831 ms" in refused.message
    # Beside four decodes the chunk is large: the same prompt goes in a few steps.
    assert isinstance(scheduler(busy(4)).route("m", sla(2000.0), 900, 100), RouteDecision)


def test_a_replica_the_sla_check_refuses_gives_way_to_the_next_best_one():
    # The router ranks the busy node first (nothing queued there), but beside its 26 decodes
    # the prompt would take 2.8 s (above). The next best replica has 500 prompt tokens queued
    # and no decodes: its first token comes well within the target, so the request goes there
    # rather than being refused.
    crowded = busy(26)
    (r,) = crowded.replicas
    calm = node("n2", replace(r, replica_id="r2", queued_tokens=500, slots=DecodeLoad()))
    decision = scheduler(crowded, calm).route("m", sla(2000.0), 900, 100)
    assert isinstance(decision, RouteDecision)
    assert decision.node_id == "n2" and decision.admitted_by is not None
    # With no other replica the refusal stands.
    assert isinstance(scheduler(busy(26)).route("m", sla(2000.0), 900, 100), Refusal)


def test_the_slack_the_decodes_lend_now_prices_the_prompt_when_nothing_comes_before_it():
    # As above: 900 tokens beside 26 decodes priced with no slack, 2.8 s. Decodes that have
    # kept well within their target lend their next step 150 ms beyond the 90 ms (the worker's
    # report): the prompt's whole step goes at once.
    # The engine's queued tokens are the one each decode has pending: no prompt among them.
    r = replace(
        busy(26).replicas[0],
        step_allowance_ms=90.0 + 150.0,
        running_requests=26,
        queued_tokens=26,
    )
    whole_ms = step_ms(LINE, DecodeLoad.of([(1000, 100.0)] * 26), 900)
    assert 90.0 < whole_ms <= 240.0
    admitted = scheduler(node("n", r)).route("m", sla(2000.0), 900, 100)
    assert isinstance(admitted, RouteDecision) and admitted.admitted_by is not None
    assert admitted.admitted_by.own_prefill_ms == pytest.approx(whole_ms, rel=1e-6)
    assert admitted.admitted_by.lent_ms == pytest.approx(150.0)
    # Prompts queued in its engine spend the slack first: the fresh price again.
    fresh_ms = 1000.0 * prefill_s(LINE, DecodeLoad.of([(1000, 100.0)] * 26), 900, 16)
    assert fresh_ms > 1000.0
    for queued in (replace(r, queued_tokens=26 + 16), replace(r, waiting_requests=1)):
        refused = scheduler(node("n", queued)).route("m", sla(2000.0), 900, 100)
        assert isinstance(refused, Refusal) and refused.estimate is not None
        assert refused.estimate.own_prefill_ms == pytest.approx(fresh_ms, rel=1e-6)
        assert refused.estimate.lent_ms == 0.0
    # So does a request its node queues for a slot.
    waiting = node("n", r, tenants=[TenantLoad("other", 1, 26, 1, 26_000)])
    refused = scheduler(waiting).route("m", sla(2000.0), 900, 100)
    assert isinstance(refused, Refusal) and refused.estimate is not None
    assert refused.estimate.own_prefill_ms == pytest.approx(fresh_ms, rel=1e-6)
    # And a request routed there since the report, which decodes with no slack.
    gs = scheduler(node("n", r))
    assert isinstance(gs.route("m", sla(2000.0), 16, 100), RouteDecision)
    again = gs.route("m", sla(2000.0), 900, 100)
    assert isinstance(again, Refusal) and again.estimate is not None
    assert again.estimate.own_prefill_ms > fresh_ms / 2 > whole_ms


def test_a_tpot_target_one_decode_step_alone_misses_is_refused_as_infeasible():
    # One decode of 1,000 keys alone: 10 + 2 + 1 = 13 ms a token, past a 10 ms target.
    refused = scheduler(busy(0)).route("m", sla(2000.0, 10.0), 900, 100)
    assert isinstance(refused, Refusal) and refused.reason == INFEASIBLE
    assert "TPOT target of 10 ms" in refused.message
    assert isinstance(scheduler(busy(0)).route("m", sla(2000.0, 20.0), 900, 100), RouteDecision)


def test_alone_is_priced_by_the_step_line_in_the_engines_chunks_not_the_measured_rate():
    # The replica measured 100 tokens/s beside other requests' decodes: 900 tokens would be
    # 9 s. Its line prices them alone, in chunks of its engine's 128 tokens a step, each over
    # the chunks before it: well within 2 s. Judged by the line, the request goes.
    r = replace(busy(0).replicas[0], tokens_per_s=100.0, max_batched_tokens=128)
    alone_s = solo_prefill_s(LINE, 900, 16, 128)
    assert alone_s > 900 // 128 * step_ms(LINE, DecodeLoad(), 128) / 1000.0
    assert isinstance(scheduler(node("n", r)).route("m", sla(2000.0), 900, 100), RouteDecision)
    # Past a target the line says it misses alone: infeasible, quoting the line's time.
    refused = scheduler(node("n", r)).route("m", sla(1000.0 * alone_s / 2), 900, 100)
    assert isinstance(refused, Refusal) and refused.reason == INFEASIBLE
    assert f"about {1000.0 * alone_s:.0f} ms" in refused.message


def test_interference_now_is_no_reason_to_call_a_request_infeasible():
    # A prompt that alone on an idle machine meets its target, on a node whose safety margin
    # says it runs 2x slower lately: not infeasible (a retry may be served once the
    # interference passes), but refused over the SLA beside the node's decodes, with a hint.
    alone_s = solo_prefill_s(LINE, 900, 16, busy(20).replicas[0].max_batched_tokens)
    target = 1000.0 * alone_s / 0.7
    slowed = replace(busy(20), safety_margin=1.0)
    refused = scheduler(slowed).route("m", sla(target), 900, 100)
    assert isinstance(refused, Refusal) and refused.reason == "sla"
    assert refused.retry_after_s > 0
    # Past the target even on an idle machine: infeasible, quoting the idle time.
    refused = scheduler(slowed).route("m", sla(1000.0 * alone_s / 1.2), 900, 100)
    assert isinstance(refused, Refusal) and refused.reason == INFEASIBLE
    assert f"about {1000.0 * alone_s:.0f} ms" in refused.message
    # On an idle replica too, with the interference it waits: alone now (1.4x the target)
    # would miss, so "no worse than alone" does not let it in; without it, it goes.
    idle = replace(busy(0), safety_margin=1.0)
    refused = scheduler(idle).route("m", sla(target), 900, 100)
    assert isinstance(refused, Refusal) and refused.reason == "sla"
    assert isinstance(scheduler(busy(0)).route("m", sla(target), 900, 100), RouteDecision)


def test_best_effort_queues_boundedly_and_waits_behind_the_classes():
    best_effort = TenantPolicy("t", "batch", 0, None, None)
    # Nothing judged on TPOT runs: best effort goes in.
    assert isinstance(scheduler(busy(26, None)).route("m", best_effort, 900, 100), RouteDecision)
    # 40 requests queued at the node ahead of it: about 40 x 0.34 s, past the 5 s bound.
    crowded = busy(26, queued_tenants=[TenantLoad("x", 1, 26, 40, 40_000)])
    refused = scheduler(crowded, best_effort_wait_s=5.0).route("m", best_effort, 900, 100)
    assert isinstance(refused, Refusal) and "best-effort" in refused.message
    assert isinstance(
        scheduler(crowded, best_effort_wait_s=30.0).route("m", best_effort, 900, 100),
        RouteDecision,
    )


def test_without_a_step_line_only_the_queue_estimate_judges():
    r = ReplicaState(model="m", replica_id="r", phase=ReplicaPhase.READY, kv_blocks_total=100,
                     kv_blocks_free=100, slots=DecodeLoad.of([(1000, 1.0)] * 100))  # fmt: skip
    assert isinstance(scheduler(node("n", r)).route("m", sla(1.0, 1.0), 900, 100), RouteDecision)


def test_a_tenants_request_rate_holds_across_the_gateways_routing_here():
    # Three gateways send the same tenant's limit (2/s, bursts of 2): the scheduler holds one
    # bucket for the tenant, so the third request at once is refused whichever gateway sent it.
    gs = scheduler(busy(0))
    limit = RateLimit(2.0, 2.0)
    routed = [gs.route("m", sla(2000.0), 16, 16, rate=limit) for _ in range(3)]
    assert [isinstance(r, RouteDecision) for r in routed] == [True, True, False]
    assert routed[2].reason == RATE and routed[2].retry_after_s == pytest.approx(0.5)
    assert "2/s" in routed[2].message
    # Another tenant has a bucket of its own; half a second later the first has a token again.
    other = TenantPolicy("t2", "standard", 1, 2000.0, 100.0)
    assert isinstance(gs.route("m", other, 16, 16, rate=limit), RouteDecision)
    gs.registry.clock.advance(0.5)
    assert isinstance(gs.route("m", sla(2000.0), 16, 16, rate=limit), RouteDecision)
    # Without a limit nothing is counted.
    assert all(isinstance(gs.route("m", sla(2000.0), 16, 16), RouteDecision) for _ in range(5))


def test_a_request_waits_behind_higher_classes_and_its_fair_share_of_its_own():
    api = TenantPolicy("api", "standard", 1, 2000.0, 200.0)
    tenants = [
        TenantLoad("chat", 2, 0, 2),  # a higher class: both ahead
        TenantLoad("agg", 1, 8, 6),  # a burst of its class: one of them per one of api's
        TenantLoad("batch", 0, 0, 9),  # a lower class: none
    ]
    assert queued_ahead(tenants, api) == 2 + 1
    assert queued_ahead([*tenants, TenantLoad("api", 1, 0, 3)], api) == 2 + 4 + 3
    # The bursting tenant itself waits behind its own backlog and api's few.
    agg = TenantPolicy("agg", "standard", 1, 2000.0, 200.0)
    assert queued_ahead([*tenants, TenantLoad("api", 1, 0, 3)], agg) == 2 + 6 + 3


def test_the_sla_check_counts_the_queue_as_the_engine_serves_it_by_class():
    # 900 tokens queued at 1000 tokens/s, 800 of them best effort's: the engine serves an
    # interactive prompt after its own class's 100 and at most one step (64) of the rest.
    def split(by_class) -> GlobalScheduler:
        r = replace(replica("r1", queued=900, rate=1000.0), max_batched_tokens=64)
        return scheduler(node("n1", replace(r, queued_by_class=by_class)))

    gs = split(((0, 800), (2, 100)))
    refusal = gs.route("m", policy("chat", priority=2, ttft_ms=100.0), 100, 10)
    assert isinstance(refusal, Refusal) and refusal.estimate is not None
    assert refusal.estimate.ahead_ms == pytest.approx(164.0)
    assert refusal.estimate.estimate_ms == pytest.approx(264.0)
    assert isinstance(
        gs.route("m", policy("chat", priority=2, ttft_ms=500.0), 100, 10), RouteDecision
    )
    # The admitted prompt's 100 tokens now count ahead of the next of its class (and above).
    again = gs.route("m", policy("chat", priority=2, ttft_ms=100.0), 100, 10)
    assert again.estimate.ahead_ms == pytest.approx(264.0)
    # The lowest class waits for everything; so does every class on a report not split by class.
    low = gs.route("m", policy("bulk", priority=0, ttft_ms=100.0), 100, 10)
    assert low.estimate.ahead_ms == pytest.approx(1000.0)
    unsplit = split(()).route("m", policy("chat", priority=2, ttft_ms=100.0), 100, 10)
    assert unsplit.estimate.ahead_ms == pytest.approx(900.0)


def test_the_lower_classes_step_under_way_is_what_a_step_beside_the_decodes_carries():
    # Two decodes with a 50 ms TPOT target run there: a step beside them carries a chunk far
    # smaller than the engine's 2048-token cap, and that bounds the lower classes' step.
    line = StepLine(0.01, 2e-4, 0.0, 0.0, 0.0, 0.0)
    held = DecodeLoad(2, 200, 50.0)
    r = replace(
        replica("r1", queued=900, rate=1000.0),
        max_batched_tokens=2048,
        queued_by_class=((0, 800), (2, 100)),
        step_line=line,
        slots=held,
        block_size=16,
    )
    chunk = chunk_budget(line, held, 2048, 16)
    assert 16 <= chunk < 800
    gs = scheduler(node("n1", r))
    refusal = gs.route("m", policy("chat", priority=2, ttft_ms=100.0), 100, 10)
    assert refusal.estimate.ahead_ms == pytest.approx(100.0 + chunk)


def test_the_queue_ahead_drains_between_reports():
    # 900 tokens reported queued at 1000 tokens/s: refused at once for a 500 ms target; the
    # engine keeps prefilling after its report, so 0.7 s later only 200 of them are left ahead.
    gs = scheduler(node("n1", replica("r1", queued=900, rate=1000.0)))
    refusal = gs.route("m", policy(ttft_ms=500.0), 100, 10)
    assert isinstance(refusal, Refusal) and refusal.estimate.ahead_ms == pytest.approx(900.0)
    gs.registry.clock.advance(0.7)
    decision = gs.route("m", policy(ttft_ms=500.0), 100, 10)
    assert isinstance(decision, RouteDecision)
    assert decision.admitted_by.ahead_ms == pytest.approx(200.0)
    # Its own 100 tokens join the queue at 0.7 s: 0.05 s later the next request waits behind
    # 200 + 100 - 50 of them.
    gs.registry.clock.advance(0.05)
    follow = gs.route("m", policy(ttft_ms=500.0), 100, 10)
    assert follow.admitted_by.ahead_ms == pytest.approx(250.0)
