"""Router with a prefix index: cached blocks against load, memory waits, pull sources."""

from __future__ import annotations

import random

from strata.policy.clock import ManualClock
from strata.policy.kv_index import KVSource, PrefixIndex
from strata.policy.registry import NodeRegistry, NodeState, ReplicaPhase, ReplicaState
from strata.policy.routing import RouteDecision, Router

CHAIN = list(range(101, 111))  # a 10-block prompt: 160 tokens at 16 tokens a block


def ready(rid: str, queued: int = 0, waiting_for_memory: int = 0) -> ReplicaState:
    return ReplicaState(
        model="m",
        replica_id=rid,
        phase=ReplicaPhase.READY,
        queued_tokens=queued,
        kv_blocks_free=64,
        kv_blocks_total=64,
        waiting_for_memory=waiting_for_memory,
    )


def registry(clock: ManualClock | None = None, **nodes: ReplicaState) -> NodeRegistry:
    reg = NodeRegistry(clock=clock or ManualClock(), ttl_s=2.0)
    for node_id, replica in nodes.items():
        reg.heartbeat(NodeState(node_id=node_id, address=f"{node_id}.addr:7", replicas=(replica,)))
    return reg


def index(**held: int) -> PrefixIndex:
    """Each named node holds that many leading blocks of CHAIN."""
    idx = PrefixIndex()
    for node_id, blocks in held.items():
        idx.apply(node_id, f"{node_id}.kv:9", 1, True, CHAIN[:blocks], [])
    return idx


def route(
    reg: NodeRegistry,
    idx: PrefixIndex | None,
    prompt_tokens: int = 160,
    hashes: list[int] = CHAIN,
    **kw,
) -> RouteDecision:
    router = Router(rng=random.Random(0), request_weight_tokens=100, **kw)
    return router.route("m", "t", prompt_tokens, reg, prefix_hashes=hashes, index=idx)


def test_the_node_holding_the_prefix_wins_over_a_less_busy_one():
    # n1: 0 queued + 160 to prefill = 160; n2: 100 queued + 0 to prefill = 100
    reg = registry(n1=ready("r1"), n2=ready("r2", queued=100))
    assert route(reg, index(n2=10)) == RouteDecision("n2", "n2.addr:7", "r2", cached_blocks=10)


def test_a_much_busier_holder_loses_and_is_named_as_the_source():
    # n1: 160; n2: 500 + 0 -> n1, which can pull the 10 blocks from n2's store
    reg = registry(n1=ready("r1"), n2=ready("r2", queued=500))
    assert route(reg, index(n2=10)) == RouteDecision(
        "n1", "n1.addr:7", "r1", cached_blocks=0, kv_source=KVSource("n2", "n2.kv:9", 10)
    )


def test_partial_prefixes_compare_by_tokens_left_to_compute():
    # n1: 40 queued + (160 - 4*16) = 136; n2: 90 queued + (160 - 6*16) = 154 -> n1
    reg = registry(n1=ready("r1", queued=40), n2=ready("r2", queued=90))
    decision = route(reg, index(n1=4, n2=6))
    assert (decision.node_id, decision.cached_blocks) == ("n1", 4)
    assert decision.kv_source == KVSource("n2", "n2.kv:9", 6)  # 6 >= 4 + 2


def test_a_source_must_hold_at_least_two_more_blocks_than_the_chosen_node():
    reg = registry(n1=ready("r1"), n2=ready("r2", queued=1000))
    assert route(reg, index(n1=5, n2=6)).kv_source is None
    assert route(reg, index(n1=5, n2=7)).kv_source == KVSource("n2", "n2.kv:9", 7)
    assert route(reg, index(n1=5, n2=7), min_source_gain_blocks=3).kv_source is None


def test_tokens_to_prefill_are_floored_at_zero():
    # prompt of 20 tokens: n1 10 queued + max(0, 20 - 48) = 10; n2 0 + max(0, 20 - 32) = 0.
    # Without the floor n1 would score 10 - 28 = -18 and beat n2's -12.
    reg = registry(n1=ready("r1", queued=10), n2=ready("r2"))
    assert route(reg, index(n1=3, n2=2), prompt_tokens=20).node_id == "n2"


def test_a_replica_waiting_for_memory_goes_last_even_with_the_prefix():
    reg = registry(n1=ready("r1", waiting_for_memory=1), n2=ready("r2", queued=5000))
    decision = route(reg, index(n1=10))
    assert (decision.node_id, decision.cached_blocks) == ("n2", 0)
    assert decision.kv_source == KVSource("n1", "n1.kv:9", 10)


def test_without_hashes_or_index_routing_is_by_load_alone():
    reg = registry(n1=ready("r1", queued=10), n2=ready("r2"))
    assert route(reg, None) == RouteDecision("n2", "n2.addr:7", "r2")
    assert route(reg, index(n1=10), hashes=[]) == RouteDecision("n2", "n2.addr:7", "r2")
    assert Router(rng=random.Random(0)).route("m", "t", 160, reg) == RouteDecision(
        "n2", "n2.addr:7", "r2"
    )


def test_a_silent_node_is_never_a_source():
    clock = ManualClock()
    reg = registry(clock, n1=ready("r1"), n2=ready("r2", queued=1000))
    idx = index(n2=10, n3=10)  # n3 reports blocks but never heartbeats
    assert route(reg, idx).kv_source == KVSource("n2", "n2.kv:9", 10)
    clock.advance(1.5)
    reg.heartbeat(NodeState(node_id="n1", address="n1.addr:7", replicas=(ready("r1"),)))
    clock.advance(1.0)  # n2 silent for 2.5 s > TTL
    decision = route(reg, idx)
    assert (decision.node_id, decision.kv_source) == ("n1", None)
