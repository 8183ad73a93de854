"""Placement planner in-process on port 0, against the real scheduler and fake node managers."""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import dataclass, field

import grpc
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from services.placement.actions import NodeClients
from services.placement.config import (
    PlacementConfig,
    parse_memory_overrides,
    parse_replicas,
)
from services.placement.planner import Planner, PlannerSettings, SchedulerLink
from services.placement.servicer import PlacementServicer
from services.scheduler.servicer import SchedulerServicer
from strata.core.settings import ConfigError
from strata.policy.clock import ManualClock, WallClock
from strata.policy.registry import NodeRegistry
from strata.policy.routing import Router
from strata.rpc.server import Registration, channel, start_server
from strata.telemetry import names
from strata.v1 import (
    common_pb2,
    node_pb2,
    node_pb2_grpc,
    placement_pb2,
    placement_pb2_grpc,
    scheduler_pb2,
    scheduler_pb2_grpc,
)

MODEL = "smollm2-135m-instruct"
GB = 10**9


@dataclass
class FakeNode(node_pb2_grpc.NodeManagerServicer):
    """Records LoadModel/UnloadModel; answers with `fail` when set. Test-only."""

    fail: tuple[grpc.StatusCode, str] | None = None
    loads: list[tuple[str, str]] = field(default_factory=list)
    unloads: list[tuple[str, str, int]] = field(default_factory=list)

    async def LoadModel(self, request, context):
        self.loads.append((request.model, request.replica_id))
        if self.fail:
            await context.abort(*self.fail)
        return node_pb2.LoadModelResponse(
            replica=common_pb2.ReplicaInfo(
                model=request.model,
                replica_id=request.replica_id,
                state=common_pb2.REPLICA_STATE_LOADING,
            )
        )

    async def UnloadModel(self, request, context):
        self.unloads.append((request.model, request.replica_id, request.drain_timeout_ms))
        return node_pb2.UnloadModelResponse(unloaded=1)


class Cluster:
    def __init__(self) -> None:
        self.servers = []
        self.channels = []
        self.exporter = InMemorySpanExporter()

    async def start(self, registration: Registration) -> str:
        running = await start_server([registration])
        self.servers.append(running)
        return running.address

    async def scheduler(self) -> scheduler_pb2_grpc.SchedulerStub:
        servicer = SchedulerServicer(
            NodeRegistry(clock=WallClock()), Router(rng=random.Random(0)), heartbeat_interval_s=1.0
        )
        self.scheduler_addr = await self.start(
            Registration(
                add=lambda s: scheduler_pb2_grpc.add_SchedulerServicer_to_server(servicer, s),
                service_name="strata.v1.Scheduler",
            )
        )
        return scheduler_pb2_grpc.SchedulerStub(self.channel(self.scheduler_addr))

    async def node(self, fake: FakeNode) -> str:
        return await self.start(
            Registration(
                add=lambda s: node_pb2_grpc.add_NodeManagerServicer_to_server(fake, s),
                service_name="strata.v1.NodeManager",
            )
        )

    async def placement(self, planner: Planner) -> placement_pb2_grpc.PlacementStub:
        servicer = PlacementServicer(planner)
        addr = await self.start(
            Registration(
                add=lambda s: placement_pb2_grpc.add_PlacementServicer_to_server(servicer, s),
                service_name="strata.v1.Placement",
            )
        )
        return placement_pb2_grpc.PlacementStub(self.channel(addr))

    def planner(
        self,
        scheduler_addr: str,
        models: tuple[str, ...] = (MODEL,),
        clock: ManualClock | None = None,
    ) -> Planner:
        self.nodes = NodeClients()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        return Planner(
            SchedulerLink(
                scheduler_pb2_grpc.SchedulerStub(self.channel(scheduler_addr)), scheduler_addr
            ),
            self.nodes,
            PlannerSettings(models=models, rpc_timeout_s=240.0, drain_timeout_ms=100),
            clock or ManualClock(),
            tracer=provider.get_tracer("t"),
            wall_ms=lambda: 1_700_000_000_000,
        )

    def channel(self, addr: str):
        ch = channel(addr)
        self.channels.append(ch)
        return ch

    async def close(self) -> None:
        if hasattr(self, "nodes"):
            await self.nodes.close()
        for ch in self.channels:
            await ch.close()
        for s in self.servers:
            await s.stop(0)


@pytest.fixture
async def cluster():
    c = Cluster()
    yield c
    await c.close()


def heartbeat(
    node_id: str, address: str, *replicas: tuple[str, str]
) -> scheduler_pb2.HeartbeatRequest:
    return scheduler_pb2.HeartbeatRequest(
        node=common_pb2.NodeInfo(
            node_id=node_id,
            address=address,
            memory_bytes=2 * GB,
            device="cpu",
            replicas=[
                common_pb2.ReplicaInfo(model=m, replica_id=r, state=common_pb2.REPLICA_STATE_READY)
                for m, r in replicas
            ],
        )
    )


def assignments(plan: placement_pb2.PlacementPlan) -> list[tuple[str, str, str, str]]:
    return [(a.model, a.node_id, a.replica_id, a.reason) for a in plan.assignments]


async def test_planner_loads_configured_model_on_registered_node_and_get_plan_returns_it(cluster):
    scheduler = await cluster.scheduler()
    fake = FakeNode()
    node_addr = await cluster.node(fake)
    await scheduler.Heartbeat(heartbeat("n1", node_addr))
    stub = await cluster.placement(cluster.planner(cluster.scheduler_addr))

    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.GetPlan(placement_pb2.GetPlanRequest())
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE

    plan = await stub.Replan(placement_pb2.ReplanRequest())
    rid = f"{MODEL}@n1"
    assert fake.loads == [(MODEL, rid)]
    assert (plan.version, plan.created_unix_ms, list(plan.unplaced_models)) == (
        1,
        1_700_000_000_000,
        [],
    )
    assert assignments(plan) == [
        (MODEL, "n1", rid, "first-fit-decreasing: needs 400000000 bytes, 2000000000 free on n1")
    ]
    assert await stub.GetPlan(placement_pb2.GetPlanRequest()) == plan

    # Before the node heartbeats the new replica, a replan must not load it a second time.
    again = await stub.Replan(placement_pb2.ReplanRequest())
    assert fake.loads == [(MODEL, rid)] and again.version == 1

    await scheduler.Heartbeat(heartbeat("n1", node_addr, (MODEL, rid)))
    settled = await stub.Replan(placement_pb2.ReplanRequest())
    assert fake.loads == [(MODEL, rid)] and fake.unloads == []
    assert settled.version == 1
    assert assignments(settled) == [
        (MODEL, "n1", rid, "kept: already on n1, needs 400000000 bytes, 1600000000 left free")
    ]
    spans = cluster.exporter.get_finished_spans()
    assert [s.name for s in spans] == [names.SPAN_PLACEMENT_REPLAN] * 3


async def test_load_never_heartbeated_is_issued_again_after_the_grace(cluster):
    scheduler = await cluster.scheduler()
    fake = FakeNode()
    await scheduler.Heartbeat(heartbeat("n1", await cluster.node(fake)))
    clock = ManualClock()
    planner = cluster.planner(cluster.scheduler_addr, clock=clock)
    await planner.replan()
    clock.advance(4.9)
    await planner.replan()
    assert len(fake.loads) == 1
    clock.advance(0.2)  # past the 5 s grace: the node evidently lost it
    await planner.replan()
    assert fake.loads == [(MODEL, f"{MODEL}@n1")] * 2


async def test_surplus_replica_is_unloaded_and_foreign_replicas_are_left_alone(cluster):
    scheduler = await cluster.scheduler()
    fake1, fake2 = FakeNode(), FakeNode()
    addr1, addr2 = await cluster.node(fake1), await cluster.node(fake2)
    await scheduler.Heartbeat(heartbeat("n1", addr1, (MODEL, "a"), ("someone-elses", "x")))
    await scheduler.Heartbeat(heartbeat("n2", addr2, (MODEL, "b")))
    stub = await cluster.placement(cluster.planner(cluster.scheduler_addr))
    plan = await stub.Replan(placement_pb2.ReplanRequest())
    assert [(a.model, a.node_id, a.replica_id) for a in plan.assignments] == [(MODEL, "n1", "a")]
    assert fake1.unloads == [] and fake1.loads == [] and fake2.loads == []
    assert fake2.unloads == [(MODEL, "b", 100)]


async def test_node_errors_are_logged_with_node_id_and_retried_next_round(cluster, caplog):
    scheduler = await cluster.scheduler()
    fake = FakeNode(fail=(grpc.StatusCode.RESOURCE_EXHAUSTED, "out of memory"))
    addr = await cluster.node(fake)
    await scheduler.Heartbeat(heartbeat("n1", addr))
    planner = cluster.planner(cluster.scheduler_addr)
    stop = asyncio.Event()
    with caplog.at_level(logging.WARNING, logger="services.placement"):
        loop = asyncio.create_task(planner.run_until(stop, every_s=0.02))
        for _ in range(200):
            if len(fake.loads) >= 3:
                break
            await asyncio.sleep(0.01)
        stop.set()
        await loop
    assert len(fake.loads) >= 3 and set(fake.loads) == {(MODEL, f"{MODEL}@n1")}
    assert caplog.records[0].getMessage() == (
        f"node n1 at {addr}: LoadModel {MODEL} (replica {MODEL}@n1) failed (RESOURCE_EXHAUSTED: "
        f"out of memory); retrying next round"
    )
    assert planner.latest is not None and planner.latest.version == 1


async def test_replan_without_scheduler_is_unavailable_with_the_address(cluster):
    stub = await cluster.placement(cluster.planner("127.0.0.1:1"))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.Replan(placement_pb2.ReplanRequest())
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    assert err.value.details().startswith(
        "the scheduler at 127.0.0.1:1 did not answer (UNAVAILABLE"
    )
    assert err.value.details().endswith("check STRATA_SCHEDULER_ADDR and that the scheduler runs")


async def test_unknown_model_is_reported_unplaced(cluster):
    scheduler = await cluster.scheduler()
    await scheduler.Heartbeat(heartbeat("n1", "127.0.0.1:1"))
    planner = cluster.planner(cluster.scheduler_addr, models=("mystery-7b",))
    plan = await (await cluster.placement(planner)).Replan(placement_pb2.ReplanRequest())
    assert list(plan.unplaced_models) == ["mystery-7b"] and list(plan.assignments) == []


def test_config_from_env(monkeypatch):
    monkeypatch.setenv("STRATA_MODELS", "a, b")
    monkeypatch.setenv("STRATA_REPLICAS", "b=3")
    monkeypatch.setenv("STRATA_MODEL_MEMORY_BYTES", "a=100,b=2000")
    monkeypatch.setenv("STRATA_REPLAN_INTERVAL_S", "2.5")
    monkeypatch.setenv("STRATA_SCHEDULER_ADDR", "scheduler:50052")
    cfg = PlacementConfig.from_env()
    assert (
        cfg.models,
        cfg.replica_counts,
        cfg.memory_overrides,
        cfg.replan_interval_s,
        cfg.scheduler_addr,
    ) == (("a", "b"), {"a": 1, "b": 3}, {"a": 100, "b": 2000}, 2.5, ("scheduler:50052",))
    for var in ("STRATA_MODELS", "STRATA_REPLICAS", "STRATA_MODEL_MEMORY_BYTES"):
        monkeypatch.delenv(var)
    cfg = PlacementConfig.from_env()
    assert (cfg.models, cfg.replica_counts, cfg.memory_overrides) == ((MODEL,), {MODEL: 1}, {})
    monkeypatch.setenv("STRATA_REPLICAS", "c=1")
    with pytest.raises(
        ConfigError,
        match=r"STRATA_REPLICAS names c, which is not in "
        r"STRATA_MODELS",
    ):
        PlacementConfig.from_env()


def test_config_parse_errors_name_the_variable():
    assert parse_replicas("2", ("a", "b")) == {"a": 2, "b": 2}
    with pytest.raises(
        ValueError,
        match=r"STRATA_REPLICAS names c, which is not in "
        r"STRATA_MODELS \(a, b\)",
    ):
        parse_replicas("c=1", ("a", "b"))
    with pytest.raises(ValueError, match="STRATA_REPLICAS needs an integer, got 'x'"):
        parse_replicas("a=x", ("a",))
    with pytest.raises(
        ValueError, match="STRATA_MODEL_MEMORY_BYTES entries must look like name=number, got 'a'"
    ):
        parse_memory_overrides("a")
    with pytest.raises(
        ValueError, match="STRATA_MODEL_MEMORY_BYTES values must be at least 1, got 0"
    ):
        parse_memory_overrides("a=0")
