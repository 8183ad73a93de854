"""`strata placement plan|replan|explain` against an in-process placement planner on port 0."""

from __future__ import annotations

import asyncio

import pytest

from services.placement.convert import check_pb
from services.placement.policies import BatchAwarePolicy
from strata.client import cli
from strata.client.placement_cli import format_explanation
from strata.policy.placement import (
    ArrivalCurve,
    BatchAwareSettings,
    RedLineCheck,
    SlaTarget,
    replica_capacity,
)
from strata.v1 import common_pb2, placement_pb2
from tests.contract.test_placement_replan import FixedCurves, LinearCosts, beat, planner
from tests.contract.test_placement_service import Cluster, FakeNode

READY = common_pb2.REPLICA_STATE_READY


@pytest.fixture
async def placement(monkeypatch):
    # The planner here is one in-process servicer without the cluster credential's checks, so
    # the command line calls it without one (its checks are tested in tests/security).
    monkeypatch.setenv("STRATA_INTERNAL_AUTH", "off")
    c = Cluster()
    scheduler = await c.scheduler()
    await scheduler.Heartbeat(beat("n1", await c.node(FakeNode())))
    await scheduler.Heartbeat(beat("n2", await c.node(FakeNode())))
    sla = SlaTarget("interactive", ttft_ms=500, tpot_ms=40)
    cap = replica_capacity(LinearCosts(), sla, 100, 50)
    curves = FixedCurves(
        {
            "a": ArrivalCurve.flat("a", 600, [0.5 * cap, 0.1 * cap], 100, 50),
            "b": ArrivalCurve.flat("b", 600, [0.1 * cap, 0.5 * cap], 100, 50),
        },
        sla,
    )
    policy = BatchAwarePolicy(lambda model, device: LinearCosts(), BatchAwareSettings())
    p = planner(c, ("a", "b"), policy, curves)
    stub = await c.placement(p)
    yield c.servers[-1].address, stub
    await p.close()
    await c.close()


async def run(*argv: str) -> int:
    return await asyncio.to_thread(cli.main, list(argv))


async def test_replan_then_explain_print_the_decisions_with_their_numbers(placement, capsys):
    address, stub = placement
    assert await run("placement", "--placement", address, "replan") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "plan v1 (batch-aware)"
    assert [line.split()[:2] for line in out[1:]] == [["a", "n1"], ["b", "n1"]]

    assert await run("placement", "--placement", address, "explain", "--model", "b") == 0
    text = capsys.readouterr().out.splitlines()
    e = await stub.Explain(placement_pb2.ExplainRequest(model="b"))
    [check_a, check_b] = e.decisions[0].red_line
    assert text[:3] == [
        "plan v1: batch-aware: 1 node(s) used, mean window load 0.600; 2 load(s), 0 move(s), "
        "0 unload(s)",
        "windows: 2 of 600 s",
        "models:",
    ]
    assert text[4:] == [
        "nodes:",
        "  n1 [a, b] peak 0.600 mean 0.600 loads 0.60 0.60",
        "decisions:",
        "  load b b@n1 on n1: batch-aware: pair benefit 0.400 GPU against n1's load, "
        "1000000000 bytes free, red line holds",
        "      node loads per window: 0.60 0.60",
        "      pair benefit with a: 0.400 GPU",
        f"      migration cost {e.decisions[0].migration_cost:.4f} GPU, gain 0.400 GPU",
        f"      red line: a on n1 window 0: P99 TTFT {check_a.ttft_p99_ms:.1f}/500 ms, "
        f"TPOT {check_a.tpot_p99_ms:.1f}/40 ms (interactive) ok",
        f"      red line: b on n1 window 1: P99 TTFT {check_b.ttft_p99_ms:.1f}/500 ms, "
        f"TPOT {check_b.tpot_p99_ms:.1f}/40 ms (interactive) ok",
    ]
    assert text[3].startswith("  b: 1 replica(s), peak ")


async def test_an_unknown_cordon_prints_the_planners_reason_and_exits_2(placement, capsys):
    address, _ = placement
    assert await run("placement", "--placement", address, "replan", "--cordon", "n9") == 2
    assert capsys.readouterr().err == (
        "error: NOT_FOUND: cannot cordon n9: the scheduler lists no such node (known: n1, n2)\n"
    )


async def test_plan_before_any_round_is_unavailable(placement, capsys):
    address, _ = placement
    assert await run("placement", "--placement", address, "plan") == 2
    assert capsys.readouterr().err.startswith("error: UNAVAILABLE: no plan yet")


def test_a_check_broken_by_a_neighbours_burst_says_so():
    check = RedLineCheck(
        "a", "n1", 0, 612.5, 38.0, SlaTarget("interactive", 500, 40), False, bursting="b"
    )
    e = placement_pb2.PlacementExplanation(
        plan_version=3, summary="s", violations=[check_pb(check)]
    )
    assert format_explanation(e).splitlines()[2:4] == [
        "red-line violations:",
        "  a on n1 window 0 while b bursts: P99 TTFT 612.5/500 ms, TPOT 38.0/40 ms "
        "(interactive) BREAKS",
    ]
