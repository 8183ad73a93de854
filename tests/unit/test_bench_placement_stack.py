"""The placement benchmark's real-stack part, the pieces without processes: the workload's rate
curves and traces, the history rows, each way's settings, replica changes from the scheduler's
listings, the figures, and that the default workload is one batch-aware placement packs and
first-fit-decreasing does not."""

import math

import pytest

from benchmarks.placement.stack_figures import way_figures
from benchmarks.placement.stack_history import history_rows
from benchmarks.placement.stack_profiles import fit_prompt
from benchmarks.placement.stack_watch import Listing, SeenReplica, replica_changes
from benchmarks.placement.stack_ways import (
    StackSettings,
    memory_overrides,
    replica_bytes,
    way_overrides,
)
from benchmarks.placement.stack_workload import (
    ROLES,
    ModelRate,
    build_traces,
    model_rates,
)
from services.placement.config import BUNDLED_PROFILES
from strata.core.profile import load_profile
from strata.core.records import NodeSampleRecord, RequestRecord
from strata.core.sla import SlaTable
from strata.eval.traces import TraceRequest
from strata.policy.placement import (
    ArrivalCurve,
    ModelDemand,
    NodeCapacity,
    SlaTarget,
    plan_batch_aware,
    plan_placement,
)
from strata.policy.placement.capacity import replica_capacity
from strata.policy.placement.profiles import ProfileCosts
from strata.v1 import common_pb2

READY, DRAINING = common_pb2.REPLICA_STATE_READY, common_pb2.REPLICA_STATE_DRAINING
CAPACITIES = {"dummy-tiny": 2.0, "dummy-long": 4.0, "dummy-small": 1.0}
INTERACTIVE = SlaTable().lookup("interactive")


def rates_by_model(period_s: float = 150.0) -> dict[str, ModelRate]:
    return {r.role.model: r for r in model_rates(ROLES, CAPACITIES, period_s)}


def test_the_partners_are_in_antiphase_and_add_up_to_a_constant():
    rates = rates_by_model()
    tiny, long_ = rates["dummy-tiny"], rates["dummy-long"]
    # mean 0.3 of a replica (2 and 4 req/s), swinging 0.9 around it, a quarter period apart
    assert (tiny.mean_rate, long_.mean_rate) == (pytest.approx(0.6), pytest.approx(1.2))
    assert tiny.rate(0.0) == pytest.approx(0.6)
    assert tiny.rate(37.5) == pytest.approx(0.6 * 1.9)  # its peak, a quarter in
    assert tiny.rate(112.5) == pytest.approx(0.6 * 0.1)  # its trough
    assert long_.rate(37.5) == pytest.approx(1.2 * 0.1)  # the partner's trough
    assert long_.rate(112.5) == pytest.approx(1.2 * 1.9)
    for t in (0.0, 20.0, 37.5, 81.0, 140.0, -55.0):
        load = tiny.rate(t) / 2.0 + long_.rate(t) / 4.0
        assert load == pytest.approx(0.6)
    assert tiny.rate(-150.0 + 37.5) == pytest.approx(tiny.rate(37.5))  # history: same day


def test_the_steady_model_bursts_at_the_same_phase_every_period():
    small = rates_by_model()["dummy-small"]
    assert small.mean_rate == pytest.approx(0.5)
    # 1.6x for 10 s from a quarter of the 150 s period, in history as in the evaluation
    assert [small.in_burst(t) for t in (37.4, 37.5, 47.4, 47.5, -112.5, -102.6, -102.5)] == [
        False,
        True,
        True,
        False,
        True,
        True,
        False,
    ]
    assert small.rate(40.0) == pytest.approx(0.8)
    assert small.rate(60.0) == pytest.approx(0.5)
    assert small.peak_rate == pytest.approx(0.8)


def test_history_precedes_the_evaluation_and_a_seed_reproduces_both():
    a = build_traces(ROLES, CAPACITIES, 150.0, 190.0, seed=3)
    b = build_traces(ROLES, CAPACITIES, 150.0, 190.0, seed=3)
    assert a.history == b.history and a.evaluation == b.evaluation
    assert all(-190.0 <= q.arrival_s < 0.0 for q in a.history)
    assert all(0.0 <= q.arrival_s < 150.0 for q in a.evaluation)
    sizes = {(q.model, q.prompt_tokens, q.output_tokens) for q in a.evaluation}
    assert sizes == {("dummy-tiny", 1569, 32), ("dummy-long", 666, 32), ("dummy-small", 313, 32)}
    # one evaluation period: about each model's mean rate x 150 s (Poisson, so within 5 sd)
    for model, rate in rates_by_model().items():
        n = sum(q.model == model for q in a.evaluation)
        expected = rate.mean_rate * 150.0 * (1.06 * 10 / 150 + 1 if model == "dummy-small" else 1.0)
        assert abs(n - expected) < 5 * math.sqrt(expected)
    with pytest.raises(ValueError, match="at least one period"):
        build_traces(ROLES, CAPACITIES, 150.0, 100.0, seed=3)


def test_history_rows_end_where_the_evaluation_starts():
    history = [
        TraceRequest(-12.5, 640, 32, model="dummy-long"),
        TraceRequest(-0.001, 320, 32, model="dummy-small"),
    ]
    rows = history_rows(history, 1_700_000_000_000, "bench", run_id=7)
    assert [
        (
            r["request_id"],
            r["model"],
            r["start_unix_ms"],
            r["prompt_tokens"],
            r["completion_tokens"],
            r["tenant"],
            r["run_id"],
            r["error_code"],
            r["ttft_ms"],
        )
        for r in rows
    ] == [
        ("history-0", "dummy-long", 1_699_999_987_500, 640, 32, "bench", 7, "", None),
        ("history-1", "dummy-small", 1_699_999_999_999, 320, 32, "bench", 7, "", None),
    ]


def test_ffd_takes_vllms_share_and_batch_aware_the_weights_and_pool():
    s = StackSettings()
    models = ["dummy-tiny", "dummy-small"]
    assert memory_overrides("ffd", models, s) == {m: int(0.9 * (8 << 30)) for m in models}
    # dummy-tiny: 512 x 64 embedding and untied head, 2 layers of 36,992, a final norm of 64
    assert replica_bytes("dummy-tiny", 256 << 20) == 139_584 * 4 + (256 << 20)
    env = way_overrides("batch-aware", models, s, "/p")
    assert env["placement"]["STRATA_PLACEMENT_POLICY"] == "batch-aware"
    assert env["placement"]["STRATA_MODEL_MEMORY_BYTES"] == (
        f"dummy-tiny={139_584 * 4 + (256 << 20)},"
        f"dummy-small={replica_bytes('dummy-small', 256 << 20)}"
    )
    assert (
        env["placement"]["STRATA_PLACEMENT_WINDOW_S"],
        env["placement"]["STRATA_PLACEMENT_WINDOWS"],
        env["placement"]["STRATA_PLACEMENT_PROFILES"],
    ) == ("25", "6", "/p")
    assert env["scheduler"] == {"STRATA_SLA_ADMISSION": "0"}
    with pytest.raises(ValueError, match="way must be one of"):
        memory_overrides("random", models, s)


def listing(ms, *replicas, nodes=("node-0", "node-1", "node-2")):
    return Listing(ms, nodes, tuple(SeenReplica(n, rid, m, st) for n, rid, m, st in replicas))


def test_replica_changes_count_what_the_planner_did_after_the_start():
    listings = [
        listing(900, ("node-0", "r1", "dummy-small", READY)),
        listing(
            1000, ("node-0", "r1", "dummy-small", READY), ("node-1", "r2", "dummy-tiny", READY)
        ),
        # node-1 misses a heartbeat: its replica is not unloaded for that
        listing(2000, ("node-0", "r1", "dummy-small", READY), nodes=("node-0", "node-2")),
        listing(
            3000,
            ("node-0", "r1", "dummy-small", READY),
            ("node-1", "r2", "dummy-tiny", READY),
            ("node-2", "r3", "dummy-small", READY),
        ),
        listing(
            4000,
            ("node-0", "r1", "dummy-small", DRAINING),
            ("node-1", "r2", "dummy-tiny", READY),
            ("node-2", "r3", "dummy-small", READY),
        ),
        listing(
            5000, ("node-1", "r2", "dummy-tiny", READY), ("node-2", "r3", "dummy-small", READY)
        ),
        listing(9000, ("node-1", "r2", "dummy-tiny", READY)),  # after the end
    ]
    c = replica_changes(listings, start_ms=1500, end_ms=6000)
    assert c.at_start == {"node-0": ["dummy-small"], "node-1": ["dummy-tiny"]}
    assert c.at_end == {"node-1": ["dummy-tiny"], "node-2": ["dummy-small"]}
    assert [(r.node_id, r.replica_id) for r in c.loads] == [("node-2", "r3")]
    assert [(r.node_id, r.replica_id) for r in c.unloads] == [("node-0", "r1")]
    assert c.hosting == ["node-0", "node-1", "node-2"]
    assert c.migrations == 2


def row(model, ttft, tpot, e2e, error=""):
    return RequestRecord(
        request_id=f"{model}-{ttft}",
        trace_id="t",
        tenant="bench",
        model=model,
        start_unix_ms=0,
        ttft_ms=ttft,
        tpot_ms=tpot,
        e2e_ms=e2e,
        queue_ms=None,
        prompt_tokens=320,
        completion_tokens=32,
        cached_tokens=0,
        finish_reason="length",
        error_code=error,
        status_code=2 if error else 0,
    )


def test_figures_average_utilization_over_the_nodes_used_and_judge_each_request():
    listings = [
        listing(
            0,
            ("node-0", "r1", "dummy-small", READY),
            ("node-1", "r2", "dummy-tiny", READY),
            ("node-1", "r3", "dummy-long", READY),
        )
    ]
    changes = replica_changes(listings, 0, 1000)
    samples = [
        NodeSampleRecord("node-0", 1, utilization=0.2),
        NodeSampleRecord("node-0", 2, utilization=0.4),
        NodeSampleRecord("node-1", 1, utilization=0.9),
        NodeSampleRecord("node-2", 1, utilization=0.0),
    ]
    rows = [
        row("dummy-small", 100.0, 20.0, 800.0),
        row("dummy-small", 600.0, 20.0, 1500.0),
        row("dummy-tiny", 200.0, 150.0, 5000.0),
        row("dummy-tiny", None, None, 3.0, "UNAVAILABLE"),
    ]
    f = way_figures(
        "batch-aware",
        rows,
        samples,
        changes,
        INTERACTIVE,
        ["dummy-tiny", "dummy-long", "dummy-small"],
    )
    assert f.nodes_used == ("node-0", "node-1")
    assert f.utilization == pytest.approx((0.3 + 0.9) / 2)  # node-2 held nothing
    assert f.utilization_by_node == {"node-0": pytest.approx(0.3), "node-1": 0.9, "node-2": 0.0}
    tiny, long_, small = f.models
    assert (small.requests, small.failed, small.sla) == (2, 0, 0.5)  # 600 ms > 500 ms
    assert small.ttft_p99_ms == pytest.approx(100 + 0.99 * 500)
    assert (tiny.requests, tiny.failed, tiny.sla, tiny.tpot_p99_ms) == (2, 1, 0.0, 150.0)
    assert (long_.requests, long_.ttft_p99_ms, long_.sla) == (0, None, 1.0)
    assert (f.requests, f.failed, f.sla, f.migrations) == (4, 1, 0.25, 0)


def window_curves(rates, window_s: float, windows: int) -> dict[str, ArrivalCurve]:
    """Each model's exact mean rate per window (no Poisson noise)."""
    out = {}
    for r in rates:
        means = []
        for w in range(windows):
            ts = [(w + (k + 0.5) / 500) * window_s for k in range(500)]
            means.append(sum(r.rate(t) for t in ts) / len(ts))
        out[r.role.model] = ArrivalCurve.flat(
            r.role.model, window_s, means, r.role.prompt_tokens, r.role.output_tokens
        )
    return out


def test_a_prompt_is_fitted_to_the_capacity_asked_for():
    costs = ProfileCosts(load_profile(f"{BUNDLED_PROFILES}/dummy-tiny-cpu.json"))
    sla = SlaTarget("interactive", 500.0, 100.0)
    p = fit_prompt(costs, sla, 32, 2.5, 2016)
    # the shortest prompt at which one replica sustains 2.5 req/s or less
    assert replica_capacity(costs, sla, p, 32) <= 2.5 < replica_capacity(costs, sla, p - 1, 32)
    assert 1000 < p < 2016
    # a capacity no prompt within the context gets down to: the longest prompt
    assert fit_prompt(costs, sla, 32, 0.001, 600) == 600


def test_the_default_day_is_one_batch_aware_packs_onto_two_nodes_and_ffd_spreads_on_three():
    costs = ProfileCosts(load_profile(f"{BUNDLED_PROFILES}/dummy-tiny-cpu.json"))
    sla = SlaTarget("interactive", 500.0, 100.0)
    capacities = {
        r.model: replica_capacity(costs, sla, r.prompt_tokens, r.output_tokens) for r in ROLES
    }
    rates = model_rates(ROLES, capacities, 150.0)
    nodes = [NodeCapacity(f"node-{i}", 8 << 30) for i in range(3)]
    settings = StackSettings()
    models = [r.model for r in ROLES]
    aware = memory_overrides("batch-aware", models, settings)
    result = plan_batch_aware(
        nodes,
        [ModelDemand(m, aware[m], 1) for m in models],
        window_curves(rates, 25.0, 6),
        {m: sla for m in models},
        lambda model, device: costs,
        devices={n.node_id: "cpu" for n in nodes},
    )
    assert not result.rejected
    groups = {}
    for a in result.plan.assignments:
        groups.setdefault(a.node_id, []).append(a.model)
    assert sorted(sorted(g) for g in groups.values()) == [
        ["dummy-long", "dummy-tiny"],
        ["dummy-small"],
    ]
    ffd = memory_overrides("ffd", models, settings)
    spread = plan_placement(nodes, [ModelDemand(m, ffd[m], 1) for m in models])
    assert sorted(a.node_id for a in spread.assignments) == ["node-0", "node-1", "node-2"]


def test_describe_sets_the_ways_side_by_side():
    from pathlib import Path

    from benchmarks.common.cpu import CpuShare
    from benchmarks.placement.stack import StackComparison
    from benchmarks.placement.stack_profiles import ModelCost
    from benchmarks.placement.stack_run import StackRun

    traces = build_traces(ROLES, CAPACITIES, 150.0, 190.0, seed=1)
    listings = [
        listing(
            0,
            ("node-0", "r1", "dummy-small", READY),
            ("node-1", "r2", "dummy-tiny", READY),
            ("node-1", "r3", "dummy-long", READY),
        )
    ]
    samples = [
        NodeSampleRecord("node-0", 1, utilization=0.2),
        NodeSampleRecord("node-1", 1, utilization=0.5),
    ]
    rows = [row("dummy-small", 100.0, 20.0, 800.0), row("dummy-tiny", 200.0, 30.0, 900.0)]
    models = [r.model for r in ROLES]

    def run(way, figures_listings):
        f = way_figures(
            way, rows, samples, replica_changes(figures_listings, 0, 1000), INTERACTIVE, models
        )
        return StackRun(
            way,
            f,
            {m: 2 for m in models},
            1,
            0,
            0,
            3,
            way,
            0.0,
            20.0,
            150.0,
            240.0,
            CpuShare(150.0, 1.2, 0.05, 0.4),
        )

    spread = [
        listing(
            0,
            ("node-0", "r1", "dummy-small", READY),
            ("node-1", "r2", "dummy-tiny", READY),
            ("node-2", "r3", "dummy-long", READY),
        )
    ]
    c = StackComparison(
        {"ffd": run("ffd", spread), "batch-aware": run("batch-aware", listings)},
        StackSettings(),
        ROLES,
        {m: ModelCost(m, 90.0, 1.0, CAPACITIES[m]) for m in models},
        {m: 0.0 for m in models},
        Path("/w/profiles"),
        traces,
        INTERACTIVE,
        1,
        500.0,
        2.5,
    )
    text = c.describe().splitlines()
    assert text[0] == "## Real stack (this machine, seed 1, 8.3 min)"
    assert any("together they ask for 0.6 of a replica at every moment" in t for t in text)
    assert (
        "| batch-aware | node-0: dummy-small; node-1: dummy-long + dummy-tiny | 2 | 35.0% | "
        "node-0 20.0%, node-1 50.0% | 100.0% | 899 | 0 (0 + 0) | 0 of 2 | 1.20 / 0.05 / 0.40 "
        "| 20 / 150 / 240 |"
    ) in text
    assert (
        "| ffd | node-0: dummy-small; node-1: dummy-tiny; node-2: dummy-long | 3 | 23.3% | "
        "node-0 20.0%, node-1 50.0% | 100.0% | 899 | 0 (0 + 0) | 0 of 2 | 1.20 / 0.05 / 0.40 "
        "| 20 / 150 / 240 |"
    ) in text
    assert "| dummy-tiny | 1 | 0 | 200 / 200 | 30 | 900 | 100.0% |" in text
    assert text[-1] == (
        "Batch-aware used 2 node(s) where first-fit-decreasing used 3; "
        "utilization of the nodes used 35.0% vs 23.3% (+50%); E2E P99 899 vs "
        "899 ms (+0%); SLA attainment 100.0% vs 100.0%; migrations 0 vs 0; failed "
        "requests 0 vs 0."
    )
