"""Router: exact choices by load, KV room and free blocks; seeded tie-breaks; miss reasons."""

from __future__ import annotations

import random

from strata.policy.clock import ManualClock
from strata.policy.registry import NodeRegistry, NodeState, ReplicaPhase, ReplicaState
from strata.policy.routing import MissKind, RouteDecision, Router


def ready(
    rid: str,
    queued: int = 0,
    running: int = 0,
    free: int = 0,
    total: int = 0,
    model: str = "m",
    phase: ReplicaPhase = ReplicaPhase.READY,
) -> ReplicaState:
    return ReplicaState(
        model=model,
        replica_id=rid,
        phase=phase,
        queued_tokens=queued,
        running_requests=running,
        kv_blocks_free=free,
        kv_blocks_total=total,
    )


def registry(**nodes: tuple[ReplicaState, ...]) -> NodeRegistry:
    reg = NodeRegistry(clock=ManualClock())
    for node_id, replicas in nodes.items():
        reg.heartbeat(NodeState(node_id=node_id, address=f"{node_id}.addr:7", replicas=replicas))
    return reg


def router(seed: int = 0) -> Router:
    return Router(rng=random.Random(seed), request_weight_tokens=100)


def test_picks_least_load_counting_running_requests_as_tokens():
    # n1: 250 queued; n2: 3 running = 300; n3: 100 queued + 1 running = 200 -> n3
    reg = registry(
        n1=(ready("r1", queued=250),),
        n2=(ready("r2", running=3),),
        n3=(ready("r3", queued=100, running=1),),
    )
    assert router().route("m", "t", 10, reg) == RouteDecision("n3", "n3.addr:7", "r3")


def test_equal_load_prefers_more_free_kv_blocks():
    reg = registry(
        n1=(ready("r1", queued=50, free=10, total=64),),
        n2=(ready("r2", queued=50, free=40, total=64),),
    )
    assert router().route("m", "t", 10, reg) == RouteDecision("n2", "n2.addr:7", "r2")


def test_replica_whose_free_kv_cannot_hold_the_prompt_goes_last():
    # r1 is idle but has 2 free blocks = 32 tokens < 100-token prompt; r2 is busier but has room.
    reg = registry(
        n1=(ready("r1", free=2, total=64),), n2=(ready("r2", queued=500, free=20, total=64),)
    )
    assert router().route("m", "t", 100, reg).replica_id == "r2"
    assert router().route("m", "t", 32, reg).replica_id == "r1"


def test_not_ready_replicas_and_other_models_are_ignored():
    reg = registry(
        n1=(ready("r1", phase=ReplicaPhase.LOADING), ready("x1", model="x")),
        n2=(ready("r2", queued=9000),),
    )
    assert router().route("m", "t", 1, reg).replica_id == "r2"


def test_ties_break_with_the_seeded_rng_reproducibly_and_spread():
    reg = registry(n1=(ready("r1"),), n2=(ready("r2"),), n3=(ready("r3"),))
    picks = [router(seed=7).route("m", "t", 1, reg).replica_id for _ in range(3)]
    assert len(set(picks)) == 1  # same seed, same choice
    expected = random.Random(7).choice(["r1", "r2", "r3"])  # candidates sorted by node, replica
    assert picks[0] == expected
    shared = router(seed=1)
    spread = {shared.route("m", "t", 1, reg).replica_id for _ in range(50)}
    assert spread == {"r1", "r2", "r3"}


def test_single_best_does_not_consume_rng():
    rng = random.Random(3)
    state = rng.getstate()
    reg = registry(n1=(ready("r1", queued=1),), n2=(ready("r2"),))
    assert Router(rng=rng).route("m", "t", 1, reg).replica_id == "r2"
    assert rng.getstate() == state


def test_unknown_model_lists_known_models():
    reg = registry(n1=(ready("r1"), ready("k1", model="k")))
    assert router().route("q", "t", 1, reg) is None
    miss = Router.explain_miss("q", reg)
    assert miss.kind is MissKind.UNKNOWN_MODEL
    assert miss.message == "model 'q' is not served by this cluster; known models: k, m"


def test_known_model_without_ready_replica_is_retryable():
    reg = registry(
        n1=(ready("r1", phase=ReplicaPhase.LOADING),),
        n2=(ready("r2", phase=ReplicaPhase.FAILED), ready("r3", phase=ReplicaPhase.LOADING)),
    )
    miss = Router.explain_miss("m", reg)
    assert miss.kind is MissKind.NO_READY_REPLICA
    assert miss.message == (
        "model 'm' has no ready replica right now (2 loading, 1 failed); retry in a few seconds"
    )


def test_model_whose_nodes_all_expired_is_known_but_unavailable():
    clock = ManualClock()
    reg = NodeRegistry(clock=clock, ttl_s=1.0)
    reg.heartbeat(NodeState(node_id="n1", address="a", replicas=(ready("r1"),)))
    clock.advance(1.5)
    assert router().route("m", "t", 1, reg) is None
    miss = Router.explain_miss("m", reg)
    assert miss.kind is MissKind.NO_READY_REPLICA
    assert "no replica on any live node" in miss.message


def test_a_sample_within_a_node_set_draws_nodes_of_that_set_in_id_order():
    # 40 nodes, two replicas each; the set holds 20 of them. A sample of 4 draws 4 of its
    # nodes and scores both replicas of each; the same seed draws the same nodes whatever
    # order the set is given in, and a set no larger than the sample is scored whole.
    reg = registry(**{f"n{i:02d}": (ready(f"a{i}"), ready(f"b{i}")) for i in range(40)})
    within = frozenset(f"n{i:02d}" for i in range(0, 40, 2))
    seen: list[set[str]] = []
    for given in (within, frozenset(sorted(within, reverse=True)), set(within)):
        r = Router(rng=random.Random(3), sample_size=4)
        got = r._candidates("m", reg, (), None, given, 4)
        assert len(got) == 8 and {loc.node.node_id for loc in got} <= within
        assert all(sum(loc.node is g.node for g in got) == 2 for loc in got)
        seen.append({loc.node.node_id for loc in got})
    assert seen[0] == seen[1] == seen[2]
    small = frozenset(["n01", "n03"])
    got = router()._candidates("m", reg, (), None, small, 4)
    assert sorted(loc.replica.replica_id for loc in got) == ["a1", "a3", "b1", "b3"]
