"""Node manager in-process on port 0 in front of a fake decode worker (test-only, in-process):
the route's KV source reaches the worker, and the worker's memory wait reaches the scheduler."""

from __future__ import annotations

import asyncio
import random

import pytest

from services.node.config import NodeConfig
from services.node.heartbeat import heartbeat_loop
from services.node.servicer import NodeManagerServicer
from services.scheduler.servicer import SchedulerServicer
from strata.node.replicas import Replica, ReplicaSet, State
from strata.node.worker_process import WorkerProcess
from strata.policy.clock import WallClock
from strata.policy.registry import NodeRegistry
from strata.policy.routing import Router
from strata.rpc.server import Registration, channel, start_server
from strata.v1 import (
    common_pb2,
    node_pb2,
    node_pb2_grpc,
    scheduler_pb2,
    scheduler_pb2_grpc,
    worker_pb2,
    worker_pb2_grpc,
)

MODEL = "dummy-tiny"


class FakeWorker(worker_pb2_grpc.WorkerServicer):
    """Answers one token and reports two requests waiting for memory, and its queued tokens
    split by class. Test-only."""

    def __init__(self) -> None:
        self.requests: list[worker_pb2.WorkerGenerateRequest] = []

    async def Generate(self, request, context):
        self.requests.append(request)
        yield common_pb2.GenerationChunk(
            request_id=request.request_id,
            text="x",
            token_ids=[7],
            finish_reason=common_pb2.FINISH_REASON_LENGTH,
        )

    async def GetStats(self, request, context):
        return worker_pb2.WorkerStats(
            model=MODEL,
            kv_blocks_total=64,
            kv_blocks_free=3,
            queued_tokens=40,
            queued_by_class=[
                common_pb2.ClassTokens(priority=0, tokens=30),
                common_pb2.ClassTokens(priority=2, tokens=10),
            ],
            waiting_for_memory=2,
            step_allowance_ms=240.0,
        )


@pytest.fixture
async def env():
    worker = FakeWorker()
    servers = [
        await start_server(
            [
                Registration(
                    add=lambda s: worker_pb2_grpc.add_WorkerServicer_to_server(worker, s),
                    service_name="strata.v1.Worker",
                )
            ]
        )
    ]
    scheduler = SchedulerServicer(
        NodeRegistry(clock=WallClock()), Router(rng=random.Random(0)), heartbeat_interval_s=60.0
    )
    servers.append(
        await start_server(
            [
                Registration(
                    add=lambda s: scheduler_pb2_grpc.add_SchedulerServicer_to_server(scheduler, s),
                    service_name="strata.v1.Scheduler",
                )
            ]
        )
    )
    cfg = NodeConfig(
        node_id="node-k",
        node_bind="127.0.0.1:0",
        node_advertise="node-k.local:50053",
        internal_auth=False,
        scheduler_addr=(servers[1].address,),
        kvstore_addr="",
        otlp_endpoint="",
        node_memory_bytes=8 << 30,
        device="cpu",
        torch_threads=1,
        worker_ready_timeout_s=240.0,
        heartbeat_interval_s=60.0,
    )
    replicas = ReplicaSet({}, cfg.worker_ready_timeout_s)
    address = servers[0].address
    # A replica whose worker is the in-process fake: no process is ever started for it.
    replica = Replica("w0", MODEL, address, WorkerProcess("w0", address, {}), state=State.READY)
    replica.connect()
    replicas.replicas["w0"] = replica
    servers.append(
        await start_server(
            [
                Registration(
                    add=lambda s: node_pb2_grpc.add_NodeManagerServicer_to_server(
                        NodeManagerServicer(cfg, replicas), s
                    ),
                    service_name="strata.v1.NodeManager",
                )
            ]
        )
    )
    channels = [channel(servers[2].address), channel(servers[1].address)]
    yield (
        node_pb2_grpc.NodeManagerStub(channels[0]),
        scheduler_pb2_grpc.SchedulerStub(channels[1]),
        worker,
        cfg,
        replicas,
    )
    for ch in (*channels, replica._channel):
        await ch.close()
    for running in reversed(servers):
        await running.stop(0)


async def test_submit_passes_the_kv_source_on_to_the_worker(env):
    node, _, worker, *_ = env
    spec = common_pb2.GenerationSpec(model=MODEL, prompt="Hello", max_tokens=1)
    chunks = [
        c
        async for c in node.Submit(
            node_pb2.SubmitRequest(
                request_id="r1",
                tenant="acme",
                priority=2,
                spec=spec,
                replica_id="w0",
                kv_source_address="node-b.local:50057",
            )
        )
    ]
    assert [list(c.token_ids) for c in chunks] == [[7]]
    assert worker.requests == [
        worker_pb2.WorkerGenerateRequest(
            request_id="r1",
            tenant="acme",
            priority=2,
            spec=spec,
            kv_source_address="node-b.local:50057",
            tpot_ms=200.0,  # the class's TPOT target travels to the worker's step budget
            ttft_ms=2000.0,  # and its TTFT target, to the worker's step cap
        )
    ]


async def test_memory_wait_reaches_the_node_status_and_the_scheduler(env):
    node, scheduler, _, cfg, replicas = env
    info = await node.GetNodeStatus(node_pb2.GetNodeStatusRequest())
    assert [
        (r.replica_id, r.kv_blocks_free, r.queued_tokens, r.waiting_for_memory)
        for r in info.replicas
    ] == [("w0", 3, 40, 2)]
    stop = asyncio.Event()
    beats = asyncio.create_task(heartbeat_loop(cfg, replicas, stop))
    try:
        for _ in range(100):
            listed = (await scheduler.ListNodes(scheduler_pb2.ListNodesRequest())).nodes
            if listed:
                break
            await asyncio.sleep(0.05)
    finally:
        stop.set()
        await beats
    assert [(r.replica_id, r.waiting_for_memory) for n in listed for r in n.replicas] == [("w0", 2)]
    # The queued tokens' split by class travels with them, for the scheduler's TTFT check.
    assert [
        [(c.priority, c.tokens) for c in r.queued_by_class] for n in listed for r in n.replicas
    ] == [[(0, 30), (2, 10)]]
    # So does what its running decodes lend a prefill beside them.
    assert [r.step_allowance_ms for n in listed for r in n.replicas] == [240.0]
