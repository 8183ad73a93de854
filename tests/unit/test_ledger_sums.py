"""The pool ledger's per-replica sums of unreported routes (strata.policy.scheduling.ledger)
equal what the routes themselves add up to, through routes, reports and a node's going away."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from strata.policy.registry import NodeState
from strata.policy.scheduling.ledger import PendingRoute, PoolLedger
from strata.policy.scheduling.prefill_ahead import class_tokens
from strata.policy.scheduling.slo import DecodeLoad

NODES = ("n1", "n2")
REPLICAS = ("r1", "r2")

route = st.tuples(
    st.sampled_from(NODES),
    st.sampled_from(REPLICAS),
    st.integers(1, 500),
    st.sampled_from([None, 0.0, 50.0, 100.0, 300.0]),
    st.integers(0, 2),
)
step = st.one_of(
    st.tuples(st.just("route"), route),
    st.tuples(st.just("report"), st.sampled_from(NODES), st.integers(0, 5)),
    st.tuples(st.just("gone"), st.sampled_from(NODES)),
)


def expected(ledger: PoolLedger, node_id: str, replica_id: str) -> tuple[DecodeLoad, int, list]:
    routes = [p for p in ledger.unreported.get(node_id, {}).values() if p.replica_id == replica_id]
    load = DecodeLoad.of((p.tokens, p.tpot_ms) for p in routes)
    return load, sum(p.replica_work for p in routes), routes


@settings(max_examples=200, deadline=None)
@given(st.lists(step, max_size=60))
def test_the_sums_follow_the_routes_they_stand_for(steps):
    ledger = PoolLedger()
    routed = 0
    for s in steps:
        if s[0] == "route":
            node_id, replica_id, tokens, tpot, priority = s[1]
            routed += 1
            pending = PendingRoute(replica_id, "t", tokens, tokens // 2, tpot, priority, 0.0)
            ledger.routed(node_id, f"q{routed}", pending)
        elif s[0] == "report":
            # The node lists some of its routes as received.
            listed = frozenset(list(ledger.unreported.get(s[1], {}))[: s[2]])
            ledger(None, NodeState(node_id=s[1], address="a", arrived_routes=listed))
        else:
            ledger(NodeState(node_id=s[1], address="a"), None)
        for node_id in NODES:
            for replica_id in REPLICAS:
                load, work, routes = expected(ledger, node_id, replica_id)
                priorities = [p.priority for p in routes]
                assert ledger.pending_load(node_id, replica_id) == load
                assert ledger.pending(node_id, replica_id) == work
                by_class = class_tokens((p.priority, p.replica_work) for p in routes)
                assert ledger.pending_by_class(node_id, replica_id) == by_class
                for p in range(4):
                    below = sum(1 for q in priorities if q < p)
                    assert ledger.pending_below(node_id, replica_id, p) == below
