"""Placement planner in-process: make-before-break moves (cordon a node, the new replica loads,
the old one drains only once the new one is READY), abandoned moves, Explain with the batch-aware
policy's numbers, and refused Replan requests."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import grpc
import pytest

from services.placement.actions import NodeClients
from services.placement.curves_source import CurveSnapshot, snapshot
from services.placement.planner import Planner, PlannerSettings, SchedulerLink
from services.placement.policies import BatchAwarePolicy
from strata.policy.clock import WallClock
from strata.policy.placement import (
    ArrivalCurve,
    BatchAwareSettings,
    SlaTarget,
    replica_capacity,
)
from strata.v1 import (
    common_pb2,
    metrics_pb2,
    placement_pb2,
    scheduler_pb2,
    scheduler_pb2_grpc,
)
from tests.contract.test_placement_service import Cluster, FakeNode

MODEL = "smollm2-135m-instruct"
GB = 10**9
READY, LOADING, FAILED = (
    common_pb2.REPLICA_STATE_READY,
    common_pb2.REPLICA_STATE_LOADING,
    common_pb2.REPLICA_STATE_FAILED,
)


@pytest.fixture
async def cluster():
    c = Cluster()
    yield c
    await c.close()


def beat(
    node_id: str, address: str, *replicas: tuple[str, str, int]
) -> scheduler_pb2.HeartbeatRequest:
    return scheduler_pb2.HeartbeatRequest(
        node=common_pb2.NodeInfo(
            node_id=node_id,
            address=address,
            memory_bytes=2 * GB,
            device="cpu",
            replicas=[
                common_pb2.ReplicaInfo(model=m, replica_id=r, state=s) for m, r, s in replicas
            ],
        )
    )


def planner(
    cluster: Cluster, models=(MODEL,), policy=None, curves=None, load_timeout_s=300.0
) -> Planner:
    cluster.nodes = NodeClients()
    # The wall clock: migrations wait for READY replicas in real time here.
    return Planner(
        SchedulerLink(
            scheduler_pb2_grpc.SchedulerStub(cluster.channel(cluster.scheduler_addr)),
            cluster.scheduler_addr,
        ),
        cluster.nodes,
        PlannerSettings(
            models=models,
            memory_overrides={m: GB for m in models},
            rpc_timeout_s=240.0,
            drain_timeout_ms=100,
            load_timeout_s=load_timeout_s,
            ready_poll_s=0.01,
        ),
        WallClock(),
        wall_ms=lambda: 1_700_000_000_000,
        policy=policy,
        curves=curves,
    )


async def until(predicate, timeout_s=240.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not predicate():
        assert loop.time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


async def test_cordoned_replica_drains_only_after_its_replacement_is_ready(cluster):
    scheduler = await cluster.scheduler()
    old_node, new_node = FakeNode(), FakeNode()
    addr1, addr2 = await cluster.node(old_node), await cluster.node(new_node)
    await scheduler.Heartbeat(beat("n1", addr1, (MODEL, "r1", READY)))
    await scheduler.Heartbeat(beat("n2", addr2))
    p = planner(cluster)
    stub = await cluster.placement(p)

    plan = await stub.Replan(placement_pb2.ReplanRequest(cordon=["n1"]))
    new_id = f"{MODEL}@n2"
    assert new_node.loads == [(MODEL, new_id)] and old_node.unloads == []
    assert list(plan.cordoned_nodes) == ["n1"]
    assert [(a.model, a.node_id, a.replica_id) for a in plan.assignments] == [(MODEL, "n2", new_id)]
    [move] = plan.moves
    assert (
        move.model,
        move.from_node_id,
        move.from_replica_id,
        move.to_node_id,
        move.to_replica_id,
        move.state,
    ) == (MODEL, "n1", "r1", "n2", new_id, "loading")

    # Loading: a round in between neither loads again nor unloads anything.
    await scheduler.Heartbeat(beat("n2", addr2, (MODEL, new_id, LOADING)))
    again = await stub.Replan(placement_pb2.ReplanRequest())
    await asyncio.sleep(0.1)
    assert new_node.loads == [(MODEL, new_id)] and old_node.unloads == [] and new_node.unloads == []
    assert again.version == plan.version and again.moves[0].state == "loading"

    await scheduler.Heartbeat(beat("n2", addr2, (MODEL, new_id, READY)))
    await until(lambda: old_node.unloads == [(MODEL, "r1", 100)])
    await p.migrations.wait_idle()
    done = await stub.GetPlan(placement_pb2.GetPlanRequest())
    assert done.moves[0].state == "done"
    assert done.moves[0].reason == "n1 is cordoned"

    # Uncordoned, n1 takes replicas again; nothing moves back by itself.
    await scheduler.Heartbeat(beat("n1", addr1))
    back = await stub.Replan(placement_pb2.ReplanRequest(uncordon=["n1"]))
    assert list(back.cordoned_nodes) == [] and new_node.unloads == []
    assert old_node.loads == []


async def test_a_move_whose_new_replica_fails_is_abandoned_and_the_old_one_keeps_serving(cluster):
    scheduler = await cluster.scheduler()
    old_node, new_node = FakeNode(), FakeNode()
    addr1, addr2 = await cluster.node(old_node), await cluster.node(new_node)
    await scheduler.Heartbeat(beat("n1", addr1, (MODEL, "r1", READY)))
    await scheduler.Heartbeat(beat("n2", addr2))
    p = planner(cluster)
    stub = await cluster.placement(p)
    await stub.Replan(placement_pb2.ReplanRequest(cordon=["n1"]))
    await scheduler.Heartbeat(beat("n2", addr2, (MODEL, f"{MODEL}@n2", FAILED)))
    await p.migrations.wait_idle()
    assert old_node.unloads == []
    [move] = (await stub.GetPlan(placement_pb2.GetPlanRequest())).moves
    assert move.state == "abandoned"
    assert move.reason == (
        f"n1 is cordoned; new replica {MODEL}@n2 on n2 failed to start; the "
        f"old replica keeps serving"
    )


async def test_a_move_that_never_gets_ready_is_abandoned_after_the_load_timeout(cluster):
    scheduler = await cluster.scheduler()
    old_node, new_node = FakeNode(), FakeNode()
    addr1, addr2 = await cluster.node(old_node), await cluster.node(new_node)
    await scheduler.Heartbeat(beat("n1", addr1, (MODEL, "r1", READY)))
    await scheduler.Heartbeat(beat("n2", addr2))
    p = planner(cluster, load_timeout_s=0.2)
    await p.replan(cordon=["n1"])
    await p.migrations.wait_idle()
    assert old_node.unloads == []
    assert p.latest.migrations[0].detail == (
        "new replica(s) not READY after 0.2 s; the old replica keeps serving"
    )


async def test_replan_refuses_unknown_and_contradictory_cordons(cluster):
    scheduler = await cluster.scheduler()
    await scheduler.Heartbeat(beat("n1", await cluster.node(FakeNode())))
    stub = await cluster.placement(planner(cluster))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.Replan(placement_pb2.ReplanRequest(cordon=["n9"]))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert err.value.details() == "cannot cordon n9: the scheduler lists no such node (known: n1)"
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.Replan(placement_pb2.ReplanRequest(cordon=["n1"], uncordon=["n1"]))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details() == "n1 cannot be cordoned and uncordoned at once"
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.Explain(placement_pb2.ExplainRequest())
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE


@dataclass(frozen=True)
class LinearCosts:
    max_batch: int = 64
    colocation_share: float = 1.0
    prefill_colocation_share: float = 1.0

    def prefill_s(self, tokens: float) -> float:
        return tokens / 10_000

    def decode_step_s(self, batch: float, context: float) -> float:
        return 0.010 + 0.001 * batch


class FixedCurves:
    """What the metrics collector would answer: two models whose peaks alternate."""

    problem = ""

    def __init__(self, curves: dict[str, ArrivalCurve], sla: SlaTarget) -> None:
        self._snapshot = CurveSnapshot(600.0, curves, {m: sla for m in curves})

    async def fetch(self, models):
        return self._snapshot


async def test_explain_gives_window_loads_pair_benefits_and_red_line_checks(cluster):
    scheduler = await cluster.scheduler()
    n1, n2 = FakeNode(), FakeNode()
    await scheduler.Heartbeat(beat("n1", await cluster.node(n1)))
    await scheduler.Heartbeat(beat("n2", await cluster.node(n2)))
    sla = SlaTarget("interactive", ttft_ms=500, tpot_ms=40)
    cap = replica_capacity(LinearCosts(), sla, 100, 50)
    curves = FixedCurves(
        {
            "a": ArrivalCurve.flat("a", 600, [0.5 * cap, 0.1 * cap], 100, 50),
            "b": ArrivalCurve.flat("b", 600, [0.1 * cap, 0.5 * cap], 100, 50),
        },
        sla,
    )
    policy = BatchAwarePolicy(
        lambda model, device: LinearCosts() if device == "cpu" else None, BatchAwareSettings()
    )
    stub = await cluster.placement(planner(cluster, ("a", "b"), policy, curves))
    plan = await stub.Replan(placement_pb2.ReplanRequest())
    assert plan.policy == "batch-aware" and not plan.rejected
    assert [(a.model, a.node_id) for a in plan.assignments] == [("a", "n1"), ("b", "n1")]
    assert sorted(n1.loads) == [("a", "a@n1"), ("b", "b@n1")] and n2.loads == []

    e = await stub.Explain(placement_pb2.ExplainRequest())
    assert (e.plan_version, e.policy, e.window_s, e.windows, e.rejected) == (
        1,
        "batch-aware",
        600.0,
        2,
        False,
    )
    assert e.summary == (
        "batch-aware: 1 node(s) used, mean window load 0.600; 2 load(s), 0 move(s), 0 unload(s)"
    )
    b = next(d for d in e.decisions if d.model == "b")
    assert (b.action, b.node_id, b.replica_id) == ("load", "n1", "b@n1")
    assert list(b.window_loads) == pytest.approx([0.6, 0.6], abs=1e-9)
    # Peaks 0.5 + 0.5 apart, 0.6 shared: 0.4 of a GPU saved.
    assert [(p.other, round(p.benefit, 9)) for p in b.pairs] == [("a", 0.4)]
    checks = {c.model: c for c in b.red_line}
    assert checks["a"].ok and checks["a"].window == 0 and checks["a"].sla_class == "interactive"
    assert (checks["a"].ttft_target_ms, checks["a"].tpot_target_ms) == (500.0, 40.0)
    assert 0 < checks["a"].tpot_p99_ms <= 40.0 and checks["b"].window == 1
    assert [(m.model, m.replicas) for m in e.models] == [("a", 1), ("b", 1)]
    assert [(n.node_id, list(n.models)) for n in e.nodes] == [("n1", ["a", "b"]), ("n2", [])]

    only_a = await stub.Explain(placement_pb2.ExplainRequest(model="a"))
    assert [d.model for d in only_a.decisions] == ["a"] and len(only_a.models) == 1
    on_n2 = await stub.Explain(placement_pb2.ExplainRequest(node_id="n2"))
    assert list(on_n2.decisions) == [] and [n.node_id for n in on_n2.nodes] == ["n2"]


def test_curves_from_the_metrics_reply_fill_silent_models_with_zeros():
    reply = metrics_pb2.ArrivalCurvesResponse(
        window_s=60,
        observed_s=[60.0, 60.0],
        curves=[
            metrics_pb2.ArrivalCurve(
                model="a",
                requests=[6, 0],
                prompt_tokens_mean=[10.0, 0.0],
                output_tokens_mean=[5.0, 0.0],
                sla=metrics_pb2.SlaTarget(sla_class="interactive", ttft_ms=300),
            ),
            metrics_pb2.ArrivalCurve(
                model="not-desired",
                requests=[1, 1],
                prompt_tokens_mean=[1.0, 1.0],
                output_tokens_mean=[1.0, 1.0],
            ),
        ],
    )
    got = snapshot(reply, ["a", "b"])
    assert sorted(got.curves) == ["a", "b"]
    assert got.curves["a"].rates == (0.1, 0.0) and got.curves["b"].rates == (0.0, 0.0)
    assert got.sla == {"a": SlaTarget("interactive", 300.0, None)}


def test_curves_from_the_metrics_reply_keep_the_busiest_slices():
    reply = metrics_pb2.ArrivalCurvesResponse(
        window_s=60,
        observed_s=[60.0, 60.0],
        burst_s=15,
        curves=[
            metrics_pb2.ArrivalCurve(
                model="a",
                requests=[6, 0],
                prompt_tokens_mean=[10.0, 0.0],
                output_tokens_mean=[5.0, 0.0],
                burst_requests=[3, 0],
            )
        ],
    )
    a = snapshot(reply, ["a"]).curves["a"]
    assert (a.burst_s, a.burst_rates) == (15.0, (0.2, 0.0))
