"""The overload benchmark's arithmetic (benchmarks/overload): how a point offers its rate, how a
point's records become attainment and goodput, the static partition of guaranteed shares, and
the targets judged on a curve."""

from __future__ import annotations

import pytest

from benchmarks.isolation.workload import TenantSpec
from benchmarks.overload.alone import Alone, AloneResult, sample_evenly
from benchmarks.overload.points import REFUSED, point_stats, refusal_reason
from benchmarks.overload.report import goodput_chart, stack_verdicts
from benchmarks.overload.sim_part import guaranteed_partition
from benchmarks.overload.workload import point_window_s, requests_in, time_scale_for
from strata.core.sla import SlaTable
from strata.eval.client_metrics import ClientRecord
from strata.eval.workload import WorkloadRequest


def test_a_point_sends_its_rate_over_its_window_from_the_traces_start():
    assert requests_in(2.0, 30.0) == 60 and requests_in(0.01, 1.0) == 1
    arrivals = [float(i) for i in range(200)]  # one a second
    # 60 requests over 30 s: the 60th trace arrival (59 s) lands at 30 s: twice as fast.
    assert time_scale_for(arrivals, 2.0, 30.0) == pytest.approx(59 / 30)
    with pytest.raises(ValueError, match="the trace has 200"):
        time_scale_for(arrivals, 10.0, 30.0)
    with pytest.raises(ValueError):
        requests_in(0.0, 10.0)
    # Long enough for ~100 served at what the stack serves, at least the floor, whole seconds.
    assert point_window_s(0.5, 2.0, 60.0, 100) == 200.0
    assert point_window_s(6.0, 2.0, 60.0, 100) == 60.0
    assert point_window_s(1.3, 2.0, 30.0, 100) == 77.0


def _record(
    i: int, cls: str, status: str = "OK", ttft: float | None = 0.1, tpot: float = 0.05
) -> ClientRecord:
    e2e = None if ttft is None else ttft + 7 * tpot
    return ClientRecord(
        i, "t", 0.0, 0.0, 16, 8, cls, status=status, ttft_s=ttft, e2e_s=e2e, output_tokens=8
    )


def test_attainment_counts_the_admitted_and_goodput_the_window():
    table = SlaTable()  # interactive 500/100, standard 2000/200, batch best effort
    records = [
        _record(0, "standard"),
        _record(1, "standard", ttft=2.5),  # late: admitted, not attained
        _record(2, "interactive"),
        _record(3, "interactive", tpot=0.2),  # TPOT past 100 ms
        _record(4, "standard", status="DEADLINE_EXCEEDED", ttft=None),  # admitted, failed
        ClientRecord(5, "t", 0.0, 0.0, 16, 8, "standard", status=REFUSED,
                     error="no replica of 'm' can meet the standard class's TTFT target"),
    ]  # fmt: skip
    stats = point_stats(records, 10.0, table)
    a = stats.all
    assert (a.sent, a.refused, a.admitted, a.completed, a.failed) == (6, 1, 5, 4, 1)
    assert a.attainment == pytest.approx(2 / 5) and a.goodput_rps == pytest.approx(0.2)
    assert a.offered_rps == pytest.approx(0.6) and a.refused_share == pytest.approx(1 / 6)
    assert stats.by_class["standard"].attained == 1 and stats.by_class["interactive"].attained == 1
    assert stats.failures == {"DEADLINE_EXCEEDED": 1} and stats.refusals == {"sla": 1}
    assert refusal_reason("the pool is full for the standard class") == "pool_full"
    assert refusal_reason("something new") == "other"


def test_the_static_partition_gives_each_guarantee_its_gpus_and_the_rest_to_best_effort():
    tenants = (
        TenantSpec("a", "interactive", 0.3, guaranteed_share=0.3),
        TenantSpec("b", "standard", 0.3, guaranteed_share=0.35),
        TenantSpec("c", "batch", 0.2, guaranteed_share=0.0),
        TenantSpec("d", "standard", 0.2, guaranteed_share=0.15),
    )
    nodes = [f"g{i}" for i in range(64)]
    parts = guaranteed_partition(tenants, nodes)
    assert {k: len(v) for k, v in parts.items()} == {"a": 19, "b": 22, "c": 13, "d": 10}
    assert sorted(n for v in parts.values() for n in v) == sorted(nodes)  # each node once
    with pytest.raises(ValueError, match="cannot hold"):
        guaranteed_partition(
            (TenantSpec("x", "standard", 1.0, guaranteed_share=1.0), tenants[2]), ["g0", "g1"]
        )


def _point(rate: float, goodput: float, std_attain: float, unattainable: float = 0.0) -> dict:
    """A point offered `rate` req/s over 100 s (rates here are offered loads as measured), of
    which `unattainable` requests missed their targets even alone."""

    def cls(attainment: float) -> dict:
        return {"admitted": 10, "attainment": attainment, "goodput_rps": goodput}

    return {
        "rate": rate,
        "window_s": 100.0,
        "alone": {"unattainable": unattainable},
        "stats": {
            "all": {"goodput_rps": goodput, "offered_rps": rate, "sent": round(100 * rate)},
            "by_class": {"standard": cls(std_attain), "interactive": cls(1.0)},
        },
    }


def test_the_targets_judge_every_two_level_point_up_to_3x_and_goodput_against_the_best():
    run = {
        "model": "m",
        "capacity_rps": 2.0,
        "modes": {
            "fcfs": {"points": [_point(1.0, 0.9, 0.5), _point(6.0, 0.1, 0.1)]},
            "two-level": {
                "points": [
                    _point(1.0, 1.0, 0.95),
                    _point(2.0, 1.5, 0.95, unattainable=40.0),
                    _point(6.0, 1.8, 0.85),
                    _point(8.0, 0.1, 0.0),
                ]
            },
        },
    }
    verdicts = {v.name: v for v in stack_verdicts(run)}
    assert len(verdicts) == 9  # 3 points within 3x, 2 classes and goodput each; fcfs not judged
    assert verdicts["m 0.5x: standard attainment of admitted"].passed
    assert not verdicts["m 3.0x: standard attainment of admitted"].passed
    # 0.5x offered 1.0 req/s and met all of it; at 3x, 1.8 is the curve's best.
    assert verdicts["m 0.5x: goodput vs min(best, attainable offer)"].passed
    assert verdicts["m 3.0x: goodput vs min(best, attainable offer)"].passed
    # 1x met 1.5 of its 2.0 req/s; 40 of its 200 requests missed even alone: 1.5 of 1.6.
    at_1x = verdicts["m 1.0x: goodput vs min(best, attainable offer)"]
    assert at_1x.passed and at_1x.measured == "1.50 of 1.60 req/s"
    chart = goodput_chart(run)
    assert chart[0] == "```mermaid" and chart[-1] == "```"
    assert sum(1 for line in chart if line.strip().startswith("line [")) == 2


def _w(index: int) -> WorkloadRequest:
    return WorkloadRequest(index, 0.0, "p", 10, 8, "api", "k", "standard")


def test_the_infeasible_refusals_are_sampled_evenly_and_their_misses_extrapolated():
    items = [_w(i) for i in range(10)]
    assert [w.index for w in sample_evenly(items, 4)] == [0, 2, 5, 7]
    assert sample_evenly(items, 20) == items and sample_evenly(items, 0) == []

    def result(met: bool) -> AloneResult:
        return AloneResult(0, "interactive", 300, 700.0, 40.0, met)

    # 3 of a sample of 4 missed even alone: 30 of the point's 40 refusals are unattainable.
    alone = Alone(40, (result(False), result(False), result(True), result(False)))
    assert (alone.missed, alone.unattainable) == (3, 30.0)
    assert Alone(5, ()).unattainable == 0.0
