"""Stale-but-safe routing on a manual clock: only READY replicas of the model from the last view,
the least loaded counting what was sent since, each tenant within its guaranteed share (at
least one request), and nothing once the view is older than its bound."""

from strata.policy.clock import ManualClock
from strata.policy.scheduling.stale_routing import (
    StaleRefusal,
    StaleRouter,
    ViewReplica,
)


def replica(rid: str, model: str = "m", load: int = 0, slots: int = 4) -> ViewReplica:
    return ViewReplica(f"node-{rid}", f"10.0.0.{len(rid)}:50053", rid, model, load, slots)


def router(max_age_s: float = 30.0) -> tuple[StaleRouter, ManualClock]:
    clock = ManualClock()
    r = StaleRouter(clock, max_age_s)
    r.update(
        [replica("a", load=3), replica("b", load=1), replica("c", model="other")], ["m", "other"]
    )
    return r, clock


def test_the_least_loaded_ready_replica_counting_what_was_sent_since():
    r, _ = router()
    picks = [r.route("m", "t", guaranteed_share=1.0).replica_id for _ in range(4)]
    # b has 1 of 4 slots busy, a 3: b, b (2/4 vs 3/4), then b (3/4) ties a (3/4): by id, a
    assert picks == ["b", "b", "a", "b"]


def test_a_tenant_gets_its_guaranteed_share_of_the_slots_and_at_least_one():
    r, _ = router()
    # 8 slots of model m: a 25% share is 2 requests in flight
    got = [r.route("m", "gold", guaranteed_share=0.25) for _ in range(3)]
    assert [isinstance(g, ViewReplica) for g in got] == [True, True, False]
    assert got[2].retry_after_ms == 1000 and "guaranteed share (2 requests)" in got[2].reason
    # no guarantee: one at a time
    first = r.route("m", "free", guaranteed_share=0.0)
    assert isinstance(first, ViewReplica)
    assert isinstance(r.route("m", "free", guaranteed_share=0.0), StaleRefusal)
    r.done("free", first)
    assert isinstance(r.route("m", "free", guaranteed_share=0.0), ViewReplica)


def test_unknown_models_not_ready_models_and_an_old_view_are_refused():
    r, clock = router(max_age_s=10.0)
    unknown = r.route("llama", "t", 1.0)
    assert unknown.unknown_model and "known models: m, other" in unknown.reason
    r.update([replica("a")], ["m", "gone"])
    assert not r.route("gone", "t", 1.0).unknown_model  # known, but none READY
    clock.advance(10.0)
    assert isinstance(r.route("m", "t", 1.0), ViewReplica)  # at the bound: still usable
    clock.advance(0.1)
    old = r.route("m", "t", 1.0)
    assert isinstance(old, StaleRefusal) and "too old" in old.reason
    assert r.models == ()


def test_the_block_size_is_the_one_the_models_workers_report_the_majoritys_on_disagreement():
    from strata.core.blocks import DEFAULT_BLOCK_SIZE, agreed_block_size

    r = StaleRouter(ManualClock(), 30.0)
    assert r.block_size("m") == DEFAULT_BLOCK_SIZE  # nothing reported yet
    r.update(
        [
            ViewReplica("n1", "a:1", "x", "m", 0, 4, 32),
            ViewReplica("n2", "a:2", "y", "m", 0, 4, 32),
            ViewReplica("n3", "a:3", "z", "m", 0, 4, 8),
        ],
        ["m"],
    )
    assert r.block_size("m") == 32
    assert agreed_block_size([32, 32, 8]) == (32, False)
    assert agreed_block_size([0, 16]) == (16, True)  # 0: not reported, the default
