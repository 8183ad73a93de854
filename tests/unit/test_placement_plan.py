"""plan_placement: exact first-fit-decreasing assignments, stability, unloads, unplaced reasons."""

from __future__ import annotations

import pytest

from strata.policy.model_sizes import model_memory_bytes
from strata.policy.placement import (
    Assignment,
    ModelDemand,
    NodeCapacity,
    PlacedReplica,
    Unload,
    Unplaced,
    plan_placement,
)


def where(plan) -> list[tuple[str, str, str]]:
    return [(a.model, a.node_id, a.replica_id) for a in plan.assignments]


def test_first_fit_decreasing_exact_assignments():
    nodes = [NodeCapacity("n2", 100), NodeCapacity("n1", 60)]
    models = [ModelDemand("small", 30, replicas=2), ModelDemand("big", 70), ModelDemand("mid", 50)]
    plan = plan_placement(nodes, models)
    # big(70) -> n2 (n1 has 60); mid(50) -> n1; small(30) x2 -> n2 (30 left), n1 has 10: unplaced
    assert where(plan) == [
        ("big", "n2", "big@n2"),
        ("mid", "n1", "mid@n1"),
        ("small", "n2", "small@n2"),
    ]
    assert plan.loads[0] == Assignment(
        "big", "n2", "big@n2", "first-fit-decreasing: needs 70 bytes, 100 free on n2"
    )
    assert [a.model for a in plan.loads] == ["big", "mid", "small"]
    assert plan.unloads == []
    assert plan.unplaced == [
        Unplaced(
            "small", 1, "needs 30 bytes, largest free 10 bytes on a node without a replica of small"
        )
    ]


def test_existing_replicas_are_kept_even_where_ffd_would_not_put_them():
    # From scratch FFD puts a on n1. It already runs on n2 and fits, so it stays there.
    nodes = [NodeCapacity("n1", 100), NodeCapacity("n2", 100, (PlacedReplica("a", "r-a", 40),))]
    plan = plan_placement(nodes, [ModelDemand("a", 40), ModelDemand("b", 80)])
    assert where(plan) == [("a", "n2", "r-a"), ("b", "n1", "b@n1")]
    assert plan.assignments[0].reason == "kept: already on n2, needs 40 bytes, 60 left free"
    assert [a.replica_id for a in plan.loads] == ["b@n1"]
    assert plan.unloads == []


def test_replanning_the_applied_plan_changes_nothing():
    models = [ModelDemand("a", 40, replicas=2), ModelDemand("b", 80)]
    sizes = (("n1", 130), ("n2", 100))
    first = plan_placement([NodeCapacity(n, m) for n, m in sizes], models)
    applied = {}
    for a in first.assignments:
        applied.setdefault(a.node_id, []).append(
            PlacedReplica(a.model, a.replica_id, 0, managed=True)
        )
    again = plan_placement(
        [NodeCapacity(n, m, tuple(applied.get(n, ()))) for n, m in sizes], models
    )
    assert (
        where(again)
        == where(first)
        == [("a", "n1", "a@n1"), ("a", "n2", "a@n2"), ("b", "n1", "b@n1")]
    )
    assert first.unplaced == []
    assert again.loads == [] and again.unloads == [] and again.unplaced == []


def test_surplus_duplicates_and_dropped_models_are_unloaded():
    nodes = [
        NodeCapacity(
            "n1",
            100,
            (
                PlacedReplica("a", "a1", 10),
                PlacedReplica("a", "a2", 10),
                PlacedReplica("old", "o1", 20, managed=True),
                PlacedReplica("foreign", "f1", 50),
            ),
        ),
        NodeCapacity("n2", 100, (PlacedReplica("a", "a3", 10),)),
    ]
    plan = plan_placement(nodes, [ModelDemand("a", 10, replicas=1)])
    assert where(plan) == [("a", "n1", "a1")]
    assert plan.unloads == [
        Unload("a", "n1", "a2", "a already has 1 kept replica(s), 1 desired"),
        Unload("old", "n1", "o1", "old is no longer a desired model"),
        Unload("a", "n2", "a3", "a already has 1 kept replica(s), 1 desired"),
    ]
    # the unmanaged replica of an undesired model stays and keeps its memory
    assert plan.assignments[0].reason == "kept: already on n1, needs 10 bytes, 40 left free"


def test_second_replica_on_one_node_moves_to_another_node():
    nodes = [
        NodeCapacity("n1", 100, (PlacedReplica("a", "a1", 10), PlacedReplica("a", "a2", 10))),
        NodeCapacity("n2", 100),
    ]
    plan = plan_placement(nodes, [ModelDemand("a", 10, replicas=2)])
    assert where(plan) == [("a", "n1", "a1"), ("a", "n2", "a@n2")]
    assert plan.unloads == [
        Unload("a", "n1", "a2", "a second replica of a on n1; at most one per node")
    ]


def test_replica_that_no_longer_fits_is_unloaded_and_replaced():
    nodes = [NodeCapacity("n1", 50, (PlacedReplica("a", "a1", 40),)), NodeCapacity("n2", 100)]
    plan = plan_placement(nodes, [ModelDemand("a", 60)])
    assert plan.unloads == [
        Unload("a", "n1", "a1", "no longer fits: needs 60 bytes, 50 free on n1")
    ]
    assert where(plan) == [("a", "n2", "a@n2")]


def test_unplaced_reasons():
    assert plan_placement([], [ModelDemand("a", 10)]).unplaced == [
        Unplaced("a", 1, "needs 10 bytes, but no nodes are registered")
    ]
    plan = plan_placement([NodeCapacity("n1", 100)], [ModelDemand("a", 10, replicas=3)])
    assert plan.unplaced == [
        Unplaced(
            "a",
            2,
            "needs 10 bytes, but all 1 node(s) already hold a "
            "replica of a and a node holds at most one",
        )
    ]
    plan = plan_placement([NodeCapacity("n1", 100)], [ModelDemand("mystery", None)])
    assert plan.assignments == []
    assert plan.unplaced == [
        Unplaced(
            "mystery",
            1,
            "memory need of mystery is unknown: it is not "
            "in the model size table and no override was given",
        )
    ]


def test_zero_replicas_unloads_all_and_bad_demand_is_rejected():
    plan = plan_placement(
        [NodeCapacity("n1", 100, (PlacedReplica("a", "a1", 10),))],
        [ModelDemand("a", 10, replicas=0)],
    )
    assert plan.assignments == [] and [u.replica_id for u in plan.unloads] == ["a1"]
    with pytest.raises(ValueError, match="listed twice"):
        plan_placement([], [ModelDemand("a", 1), ModelDemand("a", 2)])
    with pytest.raises(ValueError, match="replicas of a must be >= 0, got -1"):
        ModelDemand("a", 1, replicas=-1)


def test_model_size_table_and_overrides():
    assert model_memory_bytes("smollm2-135m-instruct") == 400_000_000
    assert model_memory_bytes("dummy-tiny") == 4_000_000
    assert model_memory_bytes("smollm2-135m-instruct", {"smollm2-135m-instruct": 5}) == 5
    assert model_memory_bytes("nope") is None
    assert model_memory_bytes("nope", {"nope": 7}) == 7
