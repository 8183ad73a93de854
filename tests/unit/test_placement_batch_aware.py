"""Batch-aware placement: exact placements, moves, red-line rejections and explanations.

Loads are given as fractions of one replica's capacity (11.01 req/s for 100-token prompts and
50-token answers under a 40 ms P99 TPOT target on LinearCosts). With these costs one replica at
0.5 shares a GPU with one at 0.1, two at 0.3 share one, and two at 0.4 do not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from strata.policy.placement import (
    ArrivalCurve,
    BatchAwareSettings,
    MigrationCost,
    ModelDemand,
    NodeCapacity,
    PlacedReplica,
    SlaTarget,
    plan_batch_aware,
    replica_capacity,
)
from strata.policy.placement.loads import WindowLoads
from strata.policy.placement.red_line import RedLine

GB = 10**9
SLA = SlaTarget("interactive", ttft_ms=500, tpot_ms=40)


@dataclass(frozen=True)
class LinearCosts:
    max_batch: int = 64
    colocation_share: float = 1.0
    prefill_colocation_share: float = 1.0

    def prefill_s(self, tokens: float) -> float:
        return tokens / 10_000

    def decode_step_s(self, batch: float, context: float) -> float:
        return 0.010 + 0.001 * batch


COSTS = LinearCosts()
CAP = replica_capacity(COSTS, SLA, 100, 50)


def curve(model: str, *fractions: float) -> ArrivalCurve:
    return ArrivalCurve.flat(model, 600, [f * CAP for f in fractions], 100, 50)


def bursty(model: str, fractions, bursts) -> ArrivalCurve:
    """curve() plus each window's busiest 30 s slice, counted so that its provisioned rate
    (the lower 99% bound of the slice's rate) is the given fraction of CAP."""

    def count(f: float) -> int:
        x = f * CAP * 30
        root = (2.326 + math.sqrt(2.326**2 + 4 * x)) / 2
        return math.ceil(root * root)

    return ArrivalCurve.from_counts(
        model,
        600,
        [round(f * CAP * 600) for f in fractions],
        [600.0] * len(fractions),
        [100] * len(fractions),
        [50] * len(fractions),
        burst_s=30,
        burst_requests=[count(b) for b in bursts],
    )


def plan(
    nodes,
    curves,
    *,
    memory=2 * GB,
    replicas=None,
    settings=BatchAwareSettings(),
    costs=lambda model, device: COSTS,
):
    replicas = replicas or {}
    sizes = memory if isinstance(memory, dict) else dict.fromkeys(curves, memory)
    models = [ModelDemand(m, sizes[m], replicas.get(m, 1)) for m in sorted(curves)]
    return plan_batch_aware(
        nodes, models, curves, {m: SLA for m in curves}, costs, settings=settings
    )


def where(result) -> list[tuple[str, str]]:
    return [(a.model, a.node_id) for a in result.plan.assignments]


def empty(*ids: str, memory: int = 10 * GB) -> list[NodeCapacity]:
    return [NodeCapacity(i, memory) for i in ids]


def test_phase_shifted_models_share_a_gpu_and_in_phase_ones_do_not():
    shifted = plan(empty("n1", "n2"), {"a": curve("a", 0.5, 0.1), "b": curve("b", 0.1, 0.5)})
    assert where(shifted) == [("a", "n1"), ("b", "n1")]
    assert not shifted.rejected
    [node] = [n for n in shifted.explanation.nodes if n.models]
    assert node.window_loads == pytest.approx((0.6, 0.6), abs=1e-9)

    in_phase = plan(empty("n1", "n2"), {"a": curve("a", 0.5, 0.1), "c": curve("c", 0.5, 0.1)})
    assert where(in_phase) == [("a", "n1"), ("c", "n2")]
    [c_decision] = [d for d in in_phase.explanation.decisions if d.model == "c"]
    assert c_decision.pairs == ()


def test_a_new_model_joins_the_gpu_whose_peak_it_complements():
    # Both GPUs could take c within the red line; n2's load peaks where c is quiet.
    nodes = [
        NodeCapacity("n1", 10 * GB, (PlacedReplica("a", "a-1", 2 * GB, managed=True),)),
        NodeCapacity("n2", 10 * GB, (PlacedReplica("b", "b-1", 2 * GB, managed=True),)),
    ]
    curves = {"a": curve("a", 0.3, 0.05), "b": curve("b", 0.05, 0.3), "c": curve("c", 0.3, 0.05)}
    result = plan(nodes, curves, settings=BatchAwareSettings(max_moves=0))
    assert where(result) == [("a", "n1"), ("b", "n2"), ("c", "n2")]
    assert [(a.model, a.node_id, a.replica_id) for a in result.plan.loads] == [("c", "n2", "c@n2")]
    [load] = [d for d in result.explanation.decisions if d.model == "c"]
    assert load.action == "load"
    assert [(p.other, round(p.benefit, 9)) for p in load.pairs] == [("b", 0.25)]
    assert load.reason.startswith("batch-aware: pair benefit 0.250 GPU against n2's load")
    assert load.window_loads == pytest.approx((0.35, 0.35), abs=1e-9)
    assert [c.ok for c in load.red_line] == [True, True]


def test_red_line_rejects_a_plan_that_breaks_a_target_and_nothing_is_applied():
    # One node already runs two in-phase models: no placement keeps both within 40 ms.
    nodes = [
        NodeCapacity(
            "n1",
            10 * GB,
            (
                PlacedReplica("a", "a-1", 2 * GB, managed=True),
                PlacedReplica("c", "c-1", 2 * GB, managed=True),
            ),
        )
    ]
    result = plan(nodes, {"a": curve("a", 0.5, 0.1), "c": curve("c", 0.5, 0.1)})
    assert result.rejected
    assert [(v.model, v.node_id, v.window, v.ok) for v in result.explanation.violations] == [
        ("a", "n1", 0, False),
        ("c", "n1", 0, False),
    ]
    worst = result.explanation.violations[0]
    assert worst.tpot_p99_ms > 40 and worst.sla == SLA
    assert result.explanation.summary().endswith(
        "REJECTED: 2 red-line violation(s), the current placement stays"
    )
    applied = result.applicable()
    assert applied.loads == [] and applied.unloads == []
    assert [(a.model, a.node_id, a.replica_id) for a in applied.assignments] == [
        ("a", "n1", "a-1"),
        ("c", "n1", "c-1"),
    ]


def test_rejected_plan_still_loads_a_model_that_has_no_replica_at_all():
    # n2 is too small for a or c, so n1 stays broken; z has no replica and fits on n2.
    nodes = [
        NodeCapacity(
            "n1",
            8 * GB,
            (
                PlacedReplica("a", "a-1", 4 * GB, managed=True),
                PlacedReplica("c", "c-1", 4 * GB, managed=True),
            ),
        ),
        NodeCapacity("n2", 3 * GB),
    ]
    curves = {"a": curve("a", 0.5, 0.1), "c": curve("c", 0.5, 0.1), "z": curve("z", 0.1, 0.1)}
    result = plan(nodes, curves, memory={"a": 4 * GB, "c": 4 * GB, "z": 2 * GB})
    assert result.rejected
    applied = result.applicable()
    assert [(a.model, a.node_id) for a in applied.loads] == [("z", "n2")]
    assert applied.unloads == []


def test_replanning_is_stable_and_moves_nothing_once_applied():
    curves = {
        "a": curve("a", 0.5, 0.1),
        "b": curve("b", 0.1, 0.5),
        "c": curve("c", 0.5, 0.1),
        "d": curve("d", 0.2, 0.2),
    }
    nodes = empty("n1", "n2", "n3")
    first, again = plan(nodes, curves), plan(nodes, curves)
    assert first.plan == again.plan and first.explanation == again.explanation
    running = {}
    for a in first.plan.assignments:
        running.setdefault(a.node_id, []).append(PlacedReplica(a.model, a.replica_id, 2 * GB, True))
    applied = [
        NodeCapacity(n.node_id, n.memory_bytes, tuple(running.get(n.node_id, ()))) for n in nodes
    ]
    replan = plan(applied, curves)
    assert where(replan) == where(first)
    assert replan.plan.loads == [] and replan.plan.unloads == [] and replan.moves == []
    assert {d.action for d in replan.explanation.decisions} == {"keep"}


def test_a_move_happens_only_when_its_gain_beats_the_migration_cost():
    # a and b run alone on n1 and n2; together they fit: moving one frees a GPU.
    nodes = [
        NodeCapacity("n1", 10 * GB, (PlacedReplica("a", "a-1", 2 * GB, managed=True),)),
        NodeCapacity("n2", 10 * GB, (PlacedReplica("b", "b-1", 2 * GB, managed=True),)),
    ]
    curves = {"a": curve("a", 0.3, 0.05), "b": curve("b", 0.05, 0.3)}
    # Gain: 1 GPU + peaks 0.3 + 0.3 - 0.35 = 1.25 GPU. Cost: (2 GB / 2 GB/s + 30 s) / horizon.
    short = MigrationCost(load_bytes_per_s=2e9, warmup_s=30, horizon_s=24)  # 31/24 = 1.29
    stay = plan(nodes, curves, settings=BatchAwareSettings(migration=short))
    assert stay.moves == [] and stay.plan.loads == [] and stay.plan.unloads == []

    long = MigrationCost(load_bytes_per_s=2e9, warmup_s=30, horizon_s=3600)  # 31/3600
    moved = plan(nodes, curves, settings=BatchAwareSettings(migration=long))
    [move] = moved.moves
    assert (
        move.model,
        move.from_node,
        move.from_replica,
        move.to_node,
        move.to_replica,
        move.forced,
    ) == ("a", "n1", "a-1", "n2", "a@n2", False)
    assert move.benefit == pytest.approx(1.25, abs=1e-9) and move.cost == 31 / 3600
    assert where(moved) == [("a", "n2"), ("b", "n2")]
    assert [(u.model, u.node_id, u.replica_id) for u in moved.plan.unloads] == [("a", "n1", "a-1")]
    assert moved.plan.unloads[0].reason.startswith(
        "moved to n2: replan (single): frees the most; gain 1.250 GPU > migration cost "
        "0.0086 GPU (31.0 s over a 3600 s horizon)"
    )
    [decision] = [d for d in moved.explanation.decisions if d.model == "a"]
    assert (decision.action, decision.from_node_id, decision.node_id) == ("move", "n1", "n2")


def test_a_gpu_that_breaks_the_red_line_gives_up_a_replica_whatever_the_cost():
    # Traffic grew: a and c, in phase, no longer fit together on n1; n2 is free.
    nodes = [
        NodeCapacity(
            "n1",
            10 * GB,
            (
                PlacedReplica("a", "a-1", 2 * GB, managed=True),
                PlacedReplica("c", "c-1", 2 * GB, managed=True),
            ),
        ),
        NodeCapacity("n2", 10 * GB),
    ]
    expensive = MigrationCost(horizon_s=1)
    result = plan(
        nodes,
        {"a": curve("a", 0.5, 0.1), "c": curve("c", 0.5, 0.1)},
        settings=BatchAwareSettings(migration=expensive),
    )
    assert not result.rejected
    [move] = result.moves
    assert (move.model, move.from_node, move.to_node, move.forced) == ("a", "n1", "n2", True)
    assert move.reason.startswith("forced: the red line breaks on n1 (a: window 0 P99 TTFT")
    assert where(result) == [("a", "n2"), ("c", "n1")]
    [decision] = [d for d in result.explanation.decisions if d.model == "a"]
    assert (decision.action, decision.from_node_id, decision.node_id) == ("move", "n1", "n2")
    assert decision.reason.startswith("forced: the red line breaks on n1")
    assert decision.reason.endswith(
        "; moved here, batch-aware: pair benefit 0.000 GPU against "
        "n2's load, 10000000000 bytes free, red line holds"
    )
    assert [(u.model, u.node_id, u.replica_id) for u in result.plan.unloads] == [("a", "n1", "a-1")]


def test_replica_count_follows_the_busiest_window():
    result = plan(empty("n1", "n2", "n3", "n4"), {"a": curve("a", 2.5, 0.2)})
    [model] = result.explanation.models
    assert model.replicas == 3
    assert model.reason == (
        f"peak {2.5 * CAP:.3g} req/s in window 0, one replica sustains "
        f"{CAP:.3g} req/s there within interactive (TTFT 500 ms, TPOT 40 ms)"
    )
    assert where(result) == [("a", "n1"), ("a", "n2"), ("a", "n3")]


def test_replica_count_follows_the_busiest_slice_of_a_window():
    result = plan(empty("n1", "n2", "n3"), {"a": bursty("a", (0.8, 0.2), (1.6, 0.2))})
    [model] = result.explanation.models
    assert model.replicas == 2
    assert model.reason.startswith("busiest 30 s at ")
    assert model.reason.endswith(
        f"req/s in window 0, one replica sustains {CAP:.3g} req/s "
        f"there within interactive (TTFT 500 ms, TPOT 40 ms)"
    )


def test_a_neighbours_burst_keeps_models_apart_that_share_by_their_means():
    means = {"a": curve("a", 0.5, 0.1), "b": curve("b", 0.1, 0.5)}
    assert where(plan(empty("n1", "n2"), means)) == [("a", "n1"), ("b", "n1")]
    # b bursts to 0.7 of a replica in a's busy window: a alone at 0.5 beside it breaks its
    # TPOT target there, though b's own replica absorbs the burst.
    bursts = {"a": curve("a", 0.5, 0.1), "b": bursty("b", (0.1, 0.5), (0.7, 0.5))}
    result = plan(empty("n1", "n2"), bursts)
    assert where(result) == [("a", "n1"), ("b", "n2")]
    assert [m.replicas for m in result.explanation.models] == [1, 1]
    # The check of the pair says whose burst breaks whom.
    loads = WindowLoads(2, bursts, {m: SLA for m in bursts}, lambda model, device: COSTS)
    loads.replicas.update(a=1, b=1)
    a_check, b_check = RedLine(loads).check("n1", "gpu", ["a", "b"])
    assert (a_check.ok, a_check.window, a_check.bursting) == (False, 0, "b")
    assert a_check.describe().startswith("a: window 0 while b bursts P99 TTFT ")
    assert a_check.describe().endswith("BREAKS interactive")
    assert b_check.ok and "bursts" not in b_check.describe()


def test_a_model_without_engine_costs_is_placed_by_memory_and_said_to_be_unmodelled():
    result = plan(
        empty("n1"),
        {"a": curve("a", 0.5, 0.1), "x": curve("x", 9.0, 9.0)},
        costs=lambda model, device: COSTS if model == "a" else None,
    )
    assert where(result) == [("a", "n1"), ("x", "n1")]
    [x] = [d for d in result.explanation.decisions if d.model == "x"]
    checks = {c.model: c for c in x.red_line}
    assert not checks["x"].modelled and checks["x"].ok
    assert checks["x"].describe() == (
        "x: not modelled (no engine profile or no traffic), not checked"
    )


def test_memory_still_binds_and_unplaced_replicas_say_why():
    result = plan(
        empty("n1", memory=3 * GB), {"a": curve("a", 0.1, 0.1), "b": curve("b", 0.1, 0.1)}
    )
    assert where(result) == [("a", "n1")]
    [u] = result.plan.unplaced
    assert (u.model, u.missing) == ("b", 1)
    assert (
        u.reason == "needs 2000000000 bytes, largest free 1000000000 bytes on a node "
        "without a replica of b"
    )


def test_curves_must_share_their_windows():
    with pytest.raises(ValueError, match="every arrival curve must have the same windows"):
        plan(empty("n1"), {"a": curve("a", 0.1, 0.1), "b": curve("b", 0.1)})


def test_a_lookahead_shares_a_gpu_until_the_peaks_that_conflict_come_near():
    from services.placement.curves_source import CurveSnapshot
    from services.placement.policies import BatchAwarePolicy

    # a and c peak together in window 3 (1.0 of a GPU): over the whole period they never
    # share; judged two windows ahead they share from window 0 and part before window 3.
    curves = {"a": curve("a", 0.5, 0.1, 0.1, 0.5), "c": curve("c", 0.1, 0.1, 0.5, 0.5)}
    snap = CurveSnapshot(600.0, curves, {m: SLA for m in curves})
    models = [ModelDemand(m, 2 * GB, 1) for m in sorted(curves)]
    now = [0.0]
    policy = BatchAwarePolicy(
        lambda model, device: COSTS, BatchAwareSettings(), lookahead=2, unix_now=lambda: now[0]
    )
    early = policy.plan(empty("n1", "n2"), models, {}, snap)
    assert [(a.model, a.node_id) for a in early.plan.assignments] == [("a", "n1"), ("c", "n1")]
    assert early.explanation.windows == 2
    now[0] = 86_400.0 * 3 + 1200.0  # window 2 of a later day: window 3 is next
    nodes = [
        NodeCapacity(
            "n1",
            10 * GB,
            (
                PlacedReplica("a", "a@n1", 2 * GB, managed=True),
                PlacedReplica("c", "c@n1", 2 * GB, managed=True),
            ),
        ),
        NodeCapacity("n2", 10 * GB),
    ]
    late = policy.plan(nodes, models, {}, snap)
    # the red line breaks in window 3 on n1: a (the smaller move, by name on equal memory)
    # moves to n2 before the peak
    assert sorted((a.model, a.node_id) for a in late.plan.assignments) == [("a", "n2"), ("c", "n1")]
    assert [(m.model, m.from_node, m.to_node, m.forced) for m in late.moves] == [
        ("a", "n1", "n2", True)
    ]
    whole = BatchAwarePolicy(lambda model, device: COSTS, BatchAwareSettings())
    apart = whole.plan(empty("n1", "n2"), models, {}, snap)
    assert [(a.model, a.node_id) for a in apart.plan.assignments] == [("a", "n1"), ("c", "n2")]
