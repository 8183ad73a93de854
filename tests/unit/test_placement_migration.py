"""The make-before-break state machine and the drain rule (strata.policy.placement.migration),
on a manual clock: the same object the planner service drives on the wall clock and the
simulator on its virtual one."""

import math

import pytest

from strata.policy.clock import ManualClock
from strata.policy.placement import Assignment, PlacementPlan, Unload
from strata.policy.placement.migration import (
    DrainRule,
    MigrationBook,
    MigrationPhase,
    Retiring,
    routing_grace_s,
    split_unloads,
)
from strata.policy.registry import ReplicaPhase

READY, LOADING, FAILED = ReplicaPhase.READY, ReplicaPhase.LOADING, ReplicaPhase.FAILED


def retiring(model="m", node="n1", rid="m@n1"):
    return Retiring(model, node, rid, f"{node}:1", "moved")


def test_a_migration_drains_only_once_every_new_replica_is_ready():
    clock = ManualClock()
    book = MigrationBook(clock, ready_timeout_s=60)
    loads = [Assignment("m", "n2", "m@n2", "placed"), Assignment("m", "n3", "m@n3", "placed")]
    (m,) = book.start(loads, [retiring()], version=4)
    assert (m.phase, m.version, m.to_replica) == (MigrationPhase.LOADING, 4, {"m@n1": "m@n2"})
    assert set(book.leaving()) == {("n1", "m@n1")} and book.in_flight("m")
    progress = book.advance({("n2", "m@n2"): READY, ("n3", "m@n3"): LOADING})
    assert (progress.drain, progress.abandoned, m.phase) == ([], [], MigrationPhase.LOADING)
    progress = book.advance({("n2", "m@n2"): READY, ("n3", "m@n3"): READY})
    assert progress.drain == [m] and m.phase is MigrationPhase.DRAINING
    assert set(book.leaving()) == {("n1", "m@n1")}  # still leaving until the unload is done
    book.finish(m)
    assert m.phase is MigrationPhase.DONE and book.leaving() == {} and not book.in_flight("m")
    assert list(book.recent) == [m]


def test_a_failed_replica_or_the_deadline_abandons_and_the_old_one_keeps_serving():
    clock = ManualClock()
    book = MigrationBook(clock, ready_timeout_s=30)
    (failed,) = book.start([Assignment("a", "n2", "a@n2", "")], [retiring("a", "n1", "a@n1")])
    (slow,) = book.start([Assignment("b", "n2", "b@n2", "")], [retiring("b", "n1", "b@n1")])
    progress = book.advance({("n2", "a@n2"): FAILED, ("n2", "b@n2"): LOADING})
    assert progress.abandoned == [failed] and failed.phase is MigrationPhase.ABANDONED
    assert failed.detail == "new replica a@n2 on n2 failed to start; the old replica keeps serving"
    clock.advance(29.9)
    assert book.advance(None).abandoned == []  # no view: only the deadline is judged
    clock.advance(0.1)
    assert book.advance(None).abandoned == [slow]
    assert slow.detail == "new replica(s) not READY after 30 s; the old replica keeps serving"
    assert book.running == [] and book.leaving() == {}


def test_a_model_whose_load_failed_starts_no_migration():
    book = MigrationBook(ManualClock(), ready_timeout_s=1)
    assert book.start([], [retiring()]) == []
    assert book.leaving() == {}


def test_finish_refuses_a_migration_that_is_not_draining():
    book = MigrationBook(ManualClock(), ready_timeout_s=1)
    (m,) = book.start([Assignment("m", "n2", "m@n2", "")], [retiring()])
    with pytest.raises(ValueError, match="migration of m is loading, not draining"):
        book.finish(m)


def test_unloads_of_a_model_that_loads_this_round_wait_the_rest_drain_at_once():
    plan = PlacementPlan(
        loads=[Assignment("m", "n2", "m@n2", "moved")],
        unloads=[
            Unload("m", "n1", "m@n1", "moved"),
            Unload("x", "n1", "x@n1", "surplus"),
            Unload("y", "n3", "y@n3", "surplus"),
        ],
    )
    cordoned = [Unload("z", "n4", "z@n4", "n4 is cordoned")]
    split = split_unloads(plan, leaving={("n3", "y@n3")}, also_replaced=cordoned)
    assert [u.replica_id for u in split.replaced] == ["m@n1", "z@n4"]
    assert [u.replica_id for u in split.at_once] == ["x@n1"]  # y@n3 is already leaving


@pytest.mark.parametrize(
    "in_flight, at, done",
    [
        (0, 1.9, False),  # idle but within the routing grace: routing may still send it work
        (0, 2.0, True),
        (3, 5.0, False),  # past the grace, still working
        (3, 30.0, True),  # the drain timeout stops it whatever it holds
    ],
)
def test_the_drain_rule(in_flight, at, done):
    rule = DrainRule(routing_grace_s(heartbeat_interval_s=1.0), timeout_s=30.0)
    assert rule.settles_at(0.0) == 2.0
    assert rule.done(0.0, at, in_flight) is done


def test_without_a_timeout_a_drain_waits_for_its_work_and_a_zero_timeout_stops_at_once():
    assert DrainRule(2.0).done(0.0, 1e9, in_flight=1) is False
    assert DrainRule(2.0, math.inf).done(0.0, 2.0, in_flight=0) is True
    assert DrainRule(2.0, timeout_s=0.0).done(0.0, 0.0, in_flight=5) is True
