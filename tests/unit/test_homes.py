"""Home nodes (strata.policy.scheduling.homes) and the scheduler's use of them."""

from __future__ import annotations

import pytest

from strata.policy.registry import ReplicaPhase, TenantLoad
from strata.policy.routing import RouteDecision
from strata.policy.scheduling.global_scheduler import Mode
from strata.policy.scheduling.homes import COMMON, Homes, HomeSettings, home_partition
from tests.unit.test_global_scheduler import node, policy, replica, scheduler

NODES = [f"n{i:02d}" for i in range(10)]
OPEN = HomeSettings(guests=True)  # other tenants' requests may go to a home


def test_homes_deal_nodes_by_share_in_name_order_and_leave_the_rest_in_common():
    homes = home_partition({"b": 0.3, "a": 0.2, "bulk": 0.0}, list(reversed(NODES)))
    assert homes == {
        "a": frozenset(NODES[0:2]),
        "b": frozenset(NODES[2:5]),
        COMMON: frozenset(NODES[5:]),
    }


def test_homes_round_by_largest_remainder_and_keep_one_node_each():
    homes = home_partition({"a": 0.34, "b": 0.33, "c": 0.33}, NODES)
    assert sorted(len(v) for v in homes.values()) == [3, 3, 4]
    assert len(homes["a"]) == 4 and COMMON not in homes  # the shares leave nothing over
    tiny = home_partition({"a": 0.01, "b": 0.01}, NODES)
    assert len(tiny["a"]) == len(tiny["b"]) == 1 and len(tiny[COMMON]) == 8


def test_overcommitted_shares_are_scaled_to_the_pool_and_small_pools_have_no_homes():
    homes = home_partition({"a": 0.8, "b": 0.8}, NODES)
    assert len(homes["a"]) == len(homes["b"]) == 5
    assert set().union(*homes.values()) == set(NODES)
    assert home_partition({"a": 0.5, "b": 0.5}, ["n0"]) == {}  # fewer nodes than tenants
    assert home_partition({"bulk": 0.0}, NODES) == {}  # nobody has a guarantee


def test_homes_follow_the_tenants_seen_lately():
    h = Homes(HomeSettings(forget_s=60.0))
    h.observe("a", 0.5, 0.0)
    assert h.home("a", "m", NODES, 1) == frozenset(NODES[:5])
    h.observe("bulk", 0.0, 0.0)
    assert h.home("bulk", "m", NODES, 1) == frozenset(NODES[5:])
    h.observe("a", 0.5, 100.0)
    # bulk was last routed 100 s ago: it has no home, and a's home is half the pool still
    assert h.home("a", "m", NODES, 1) == frozenset(NODES[:5])
    h.observe("b", 0.5, 100.0)
    assert h.home("b", "m", NODES, 1) == frozenset(NODES[5:])
    # the same membership count means the same nodes: the homes are not recomputed
    assert h.home("b", "m", NODES[:4], 1) == frozenset(NODES[5:])
    assert h.home("b", "m", NODES[:4], 2) == frozenset(NODES[2:4])
    assert h.home("a", "m", NODES[:1], 3) is None  # one node: no partition to prefer
    assert h.home("a", "other", NODES[:2], 1) == frozenset(NODES[:1])  # homes per model


def test_the_registry_counts_changes_to_which_nodes_hold_a_ready_replica():
    gs = scheduler(node("n0", replica("r0")), node("n1", replica("r1")))
    reg = gs.registry
    before = reg.ready_members("m")
    reg.heartbeat(node("n0", replica("r0", queued=50)))  # a new report, the same nodes
    assert reg.ready_members("m") == before
    reg.heartbeat(node("n2", replica("r2")))
    assert reg.ready_members("m") == before + 1
    reg.heartbeat(node("n2", replica("r2", phase=ReplicaPhase.LOADING)))
    assert reg.ready_members("m") == before + 2
    reg.clock.advance(reg.ttl_s + 1.0)
    assert reg.expire() == ["n0", "n1", "n2"]
    assert reg.ready_members("m") == before + 4  # n0 and n1 left
    assert reg.ready_members("unknown") == 0


def test_a_home_is_preferred_within_the_slack_and_the_targets_fraction():
    h = Homes(HomeSettings(slack_s=1.0, ttft_fraction=0.25))
    assert HomeSettings() == HomeSettings(slack_s=0.5, ttft_fraction=0.25, guests=False)
    assert h.prefer(1400.0, 500.0, 8000.0)  # 0.9 s slower, within 2 s of an 8 s target
    assert not h.prefer(1600.0, 500.0, 8000.0)  # past the slack
    assert not h.prefer(900.0, 500.0, 3000.0)  # past a quarter of a 3 s target
    assert h.prefer(1400.0, 500.0, None)  # best effort: the slack alone
    with pytest.raises(ValueError, match="ttft_fraction"):
        HomeSettings(ttft_fraction=0.0)


def two_tenant_pool(queued_home: int) -> list:
    """Four nodes at 1,000 tokens/s: a's home (n0, n1: share 0.5 of four) holds `queued_home`
    tokens each; b's (n2, n3) is idle."""
    return [
        node(f"n{i}", replica(f"r{i}", queued=queued_home if i < 2 else 0, rate=1000.0))
        for i in range(4)
    ]


def route_a(gs, ttft_ms: float = 8000.0) -> RouteDecision:
    gs.route("m", policy("b", guaranteed=0.5, ttft_ms=8000.0), 0, 0)  # b is known: halves
    return gs.route("m", policy("a", guaranteed=0.5, ttft_ms=ttft_ms), 100, 0)


def test_the_scheduler_keeps_a_tenant_home_while_it_costs_little_and_spills_when_not():
    # 300 tokens queued at home: 0.4 s to a first token there, 0.1 s on b's idle nodes
    assert route_a(scheduler(*two_tenant_pool(300), homes=OPEN)).node_id in {"n0", "n1"}
    # 700 queued: 0.8 s, past the 0.5 s slack: b's idle nodes take it (guests allowed)
    assert route_a(scheduler(*two_tenant_pool(700), homes=OPEN)).node_id in {"n2", "n3"}
    # a 1 s target allows at most 0.25 s at home
    assert route_a(scheduler(*two_tenant_pool(300), homes=OPEN), ttft_ms=1000.0).node_id in {
        "n2",
        "n3",
    }
    # without homes, or in the baselines, the best replica anywhere
    assert route_a(scheduler(*two_tenant_pool(300), homes=None)).node_id in {"n2", "n3"}
    fcfs = scheduler(*two_tenant_pool(300), mode=Mode.FCFS)
    assert fcfs.route("m", policy("a", guaranteed=0.5), 100, 0).node_id in {"n2", "n3"}


def test_other_tenants_load_at_home_is_weighed_like_anywhere():
    # b's protected decodes on a's home make it costlier there (the router's interference
    # term) but within the slack a still stays home
    pool = two_tenant_pool(0)
    pool[0] = node("n0", replica("r0", rate=1000.0), tenants=[TenantLoad("b", 1, 2, 0, 100)])
    assert route_a(scheduler(*pool, homes=OPEN)).node_id == "n1"


def test_without_guests_a_tenant_reaches_only_its_home_and_the_common_nodes():
    closed = Homes(HomeSettings(guests=False))
    for tenant, share in (("a", 0.3), ("b", 0.3), ("bulk", 0.0)):
        closed.observe(tenant, share, 0.0)
    assert closed.reach("a", "m", NODES, 1) == frozenset(NODES[:3] + NODES[6:])
    assert closed.reach("b", "m", NODES, 1) == frozenset(NODES[3:])
    assert closed.reach("bulk", "m", NODES, 1) == frozenset(NODES[6:])
    assert closed.reach("a", "m", NODES[:2], 2) == frozenset(NODES[:1])  # no common node left
    assert closed.reach("a", "m", NODES[:1], 3) is None  # no partition: anywhere
    opened = Homes(HomeSettings(guests=True))
    opened.observe("a", 0.3, 0.0)
    assert opened.reach("a", "m", NODES, 1) is None


def guarded_pool() -> list:
    """Four nodes at 1,000 tokens/s: a's home n0 (2,000 tokens queued), b's home n1 (idle),
    the common nodes n2 and n3 (500 queued each)."""
    queued = [2000, 0, 500, 500]
    return [node(f"n{i}", replica(f"r{i}", queued=q, rate=1000.0)) for i, q in enumerate(queued)]


def route_in(gs, tenant: str) -> str:
    for t in ("a", "b"):
        gs.route("m", policy(t, guaranteed=0.25, ttft_ms=8000.0), 0, 0)
    gs.route("m", policy("bulk"), 0, 0)
    share = 0.25 if tenant in ("a", "b") else 0.0
    return gs.route("m", policy(tenant, guaranteed=share, ttft_ms=8000.0), 100, 0).node_id


def test_without_guests_a_spill_goes_to_the_common_nodes_never_another_tenants_home():
    # a's home is 2.1 s from a first token, b's idle home 0.1 s, the common nodes 0.6 s.
    closed = HomeSettings()
    assert route_in(scheduler(*guarded_pool(), homes=closed), "a") in {"n2", "n3"}
    assert route_in(scheduler(*guarded_pool(), homes=HomeSettings(guests=True)), "a") == "n1"
    # A tenant without a guarantee stays on the common nodes, however idle b's home is.
    assert route_in(scheduler(*guarded_pool(), homes=closed), "bulk") in {"n2", "n3"}
    assert route_in(scheduler(*guarded_pool(), homes=closed), "b") == "n1"
