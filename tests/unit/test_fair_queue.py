"""The node's fair queue: exact pop order under strict priority, weights, idle tenants, FCFS."""

import pytest

from strata.policy.clock import ManualClock
from strata.policy.scheduling.fair_queue import (
    FairQueue,
    FcfsQueue,
    QueueItem,
    TenantQueued,
    displacers,
)


def _item(
    rid, tenant="a", priority=1, prompt=60, out=40, weight=1.0, model="m", ttft=None, replica=""
):
    return QueueItem(rid, tenant, model, priority, prompt, out, weight, ttft, replica)


def _drain(q, accept=None):
    out = []
    while (item := q.pop_next(accept)) is not None:
        out.append(item.request_id)
    return out


def test_strict_priority_across_classes_then_arrival_within_one_flow():
    q = FairQueue(ManualClock())
    for rid, prio in (("b1", 0), ("s1", 1), ("b2", 0), ("i1", 2), ("s2", 1), ("i2", 2)):
        q.push(_item(rid, tenant=rid[0], priority=prio))
    assert _drain(q) == ["i1", "i2", "s1", "s2", "b1", "b2"]
    assert len(q) == 0


def test_weights_one_to_three_give_one_to_three_tokens_of_service_over_a_backlog():
    q = FairQueue(ManualClock())
    for k in range(12):
        q.push(_item(f"a{k}", tenant="a", weight=1.0))  # 100 tokens each
        q.push(_item(f"b{k}", tenant="b", weight=3.0))
    served = _drain(q)[:8]
    # start tags: a 0, 100, ...; b 0, 33.3, 66.7, 100, 133.3, ... (ties by arrival)
    assert served == ["a0", "b0", "b1", "b2", "a1", "b3", "b4", "b5"]
    tokens = {t: 100 * sum(r[0] == t for r in served) for t in "ab"}
    assert tokens == {"a": 200, "b": 600}


def test_cost_is_prompt_plus_max_tokens_so_big_requests_wait_their_share():
    q = FairQueue(ManualClock())
    q.push(_item("big", tenant="a", prompt=900, out=100))  # 1000 tokens
    q.push(_item("big2", tenant="a", prompt=900, out=100))
    for k in range(4):
        q.push(_item(f"s{k}", tenant="b", prompt=200, out=50))  # 250 tokens each
    # a: 0, 1000; b: 0, 250, 500, 750: all of b's fit before a's second
    assert _drain(q) == ["big", "s0", "s1", "s2", "s3", "big2"]


def test_an_idle_tenant_banks_no_credit():
    q = FairQueue(ManualClock())
    for k in range(6):
        q.push(_item(f"a{k}", tenant="a"))
    assert [q.pop_next().request_id for _ in range(3)] == ["a0", "a1", "a2"]
    # v is now 200 (the start tag last served); a's next request starts at 300
    # b sent nothing so far: it starts at v (200), not at 0, so it does not jump the whole of
    # a's remaining backlog; it takes turns from here on
    q.push(_item("b0", tenant="b"))
    q.push(_item("b1", tenant="b"))
    q.push(_item("b2", tenant="b"))
    assert [i.start_tag for i in (q.pop_next(),)] == [200.0]
    assert _drain(q) == ["a3", "b1", "a4", "b2", "a5"]


def test_models_are_separate_flows_of_one_tenant():
    q = FairQueue(ManualClock())
    for k in range(2):
        q.push(_item(f"x{k}", tenant="a", model="x"))
    for k in range(2):
        q.push(_item(f"y{k}", tenant="a", model="y"))
    assert _drain(q) == ["x0", "y0", "x1", "y1"]


def test_an_emptied_level_forgets_its_flows():
    q = FairQueue(ManualClock())
    for k in range(3):
        q.push(_item(f"a{k}", tenant="a"))
    assert _drain(q) == ["a0", "a1", "a2"]
    q.push(_item("a3", tenant="a"))
    q.push(_item("b0", tenant="b"))
    a3, b0 = q.pop_next(), q.pop_next()
    assert (a3.request_id, b0.request_id) == ("a3", "b0")
    assert a3.start_tag == b0.start_tag == 300.0  # even, at the end of the last busy period


def test_accept_skips_requests_whose_replica_is_full_and_keeps_their_place():
    q = FairQueue(ManualClock())
    q.push(_item("i1", tenant="i", priority=2, replica="r1"))
    q.push(_item("s1", tenant="s", priority=1, replica="r2"))
    q.push(_item("s2", tenant="s", priority=1, replica="r1"))
    assert q.pop_next(lambda it: it.replica_id == "r2").request_id == "s1"
    assert q.pop_next(lambda it: it.replica_id == "r2") is None
    assert _drain(q) == ["i1", "s2"]


def test_remove_takes_a_request_out_and_gives_a_flows_last_reservation_back():
    q = FairQueue(ManualClock())
    q.push(_item("a0", tenant="a"))
    q.push(_item("a1", tenant="a"))
    q.push(_item("b0", tenant="b"))
    assert q.remove("a1").request_id == "a1"
    assert q.remove("a1") is None and "a1" not in q
    q.push(_item("a2", tenant="a"))  # starts at 100, where a1 started
    assert [(i.request_id, i.start_tag) for i in (q.pop_next(), q.pop_next(), q.pop_next())] == [
        ("a0", 0.0),
        ("b0", 0.0),
        ("a2", 100.0),
    ]
    assert q.pop_next() is None


def test_a_request_id_is_queued_once():
    q = FairQueue(ManualClock())
    q.push(_item("a0"))
    with pytest.raises(ValueError, match="already queued"):
        q.push(_item("a0"))


def test_loads_count_queued_requests_and_tokens_per_tenant():
    q = FairQueue(ManualClock())
    q.push(_item("a0", tenant="a", priority=2, prompt=10, out=5))
    q.push(_item("a1", tenant="a", priority=2, prompt=20, out=5))
    q.push(_item("b0", tenant="b", priority=0, prompt=7, out=1))
    assert q.loads() == {"a": TenantQueued("a", 2, 2, 40), "b": TenantQueued("b", 0, 1, 8)}
    q.pop_next()
    q.remove("b0")
    assert q.loads() == {"a": TenantQueued("a", 2, 1, 25)}


def test_urgent_names_requests_whose_wait_plus_service_reaches_the_fraction_of_ttft():
    clock = ManualClock()
    q = FairQueue(clock)
    q.push(_item("i0", tenant="i", priority=2, ttft=500.0, prompt=100))
    clock.advance(0.1)
    q.push(_item("i1", tenant="i", priority=2, ttft=500.0, prompt=400))
    q.push(_item("s0", tenant="s", priority=1, ttft=2000.0))
    q.push(_item("b0", tenant="b", priority=0))  # best effort: never urgent
    clock.advance(0.1)
    assert q.urgent() == []  # 200 ms < 250 ms (half of 500)

    def service(it):
        return it.prompt_tokens / 1000.0  # 1000 tokens per second

    # i0: 0.2 + 0.1 = 0.3 s >= 0.25; i1: 0.1 + 0.4 = 0.5 s >= 0.25; s0: 0.1 + 0.06 < 1.0
    assert [i.request_id for i in q.urgent(service)] == ["i0", "i1"]
    clock.advance(1.0)
    assert [i.request_id for i in q.urgent(service)] == ["i0", "i1", "s0"]
    assert [i.request_id for i in q.urgent(service, fraction=1.0)] == ["i0", "i1"]
    assert len(q) == 4  # urgent() takes nothing out


def test_displacers_are_the_urgent_then_every_other_request_with_a_target():
    clock = ManualClock()
    q = FairQueue(clock)
    q.push(_item("s0", tenant="s", priority=1, ttft=2000.0))
    q.push(_item("b0", tenant="b", priority=0))  # best effort: displaces nobody
    q.push(_item("i0", tenant="i", priority=2, ttft=500.0))
    assert [(i.request_id, u) for i, u in displacers(q)] == [("i0", False), ("s0", False)]
    clock.advance(0.3)  # i0 is past half its target
    assert [(i.request_id, u) for i, u in displacers(q)] == [("i0", True), ("s0", False)]
    fcfs = FcfsQueue(clock)
    fcfs.push(_item("i1", tenant="i", priority=2, ttft=500.0))
    assert displacers(fcfs) == []  # a queue without classes displaces nothing


def test_fcfs_is_one_line_in_arrival_order_and_never_urgent():
    clock = ManualClock()
    q = FcfsQueue(clock)
    for rid, prio, weight in (("b1", 0, 1.0), ("i1", 2, 5.0), ("s1", 1, 1.0), ("b2", 0, 1.0)):
        q.push(_item(rid, tenant=rid[0], priority=prio, weight=weight, ttft=10.0))
    clock.advance(10.0)
    assert q.urgent() == []
    assert q.pop_next(lambda it: it.request_id != "b1").request_id == "i1"
    assert _drain(q) == ["b1", "s1", "b2"]
    assert not FcfsQueue.classes and FairQueue.classes
