"""Node manager in-process on port 0, spawning real decode workers (`python -m services.worker`)
for dummy-tiny: load until READY, Submit through a worker, unload, and a worker that cannot load
or is killed shows up FAILED."""

from __future__ import annotations

import asyncio
import os
import random
import signal
from dataclasses import dataclass

import grpc
import pytest
import torch

from services.node.config import NodeConfig
from services.node.heartbeat import heartbeat_loop
from services.node.servicer import NodeManagerServicer
from services.scheduler.servicer import SchedulerServicer
from strata.engine.dummy import load_dummy
from strata.engine.engine import EngineConfig, EngineRequest, LLMEngine
from strata.engine.sequence import SamplingParams
from strata.node.dispatcher import Dispatcher
from strata.node.replicas import ReplicaSet, State
from strata.policy.clock import WallClock
from strata.policy.registry import NodeRegistry
from strata.policy.routing import Router
from strata.rpc.server import Registration, channel, start_server
from strata.telemetry import names
from strata.v1 import (
    common_pb2,
    node_pb2,
    node_pb2_grpc,
    scheduler_pb2,
    scheduler_pb2_grpc,
)
from tests.contract.helpers import global_spans, spans_named
from tests.engine_helpers import run_to_end

MODEL = "dummy-tiny"
NODE = "node-t"
LOADING = common_pb2.REPLICA_STATE_LOADING
READY = common_pb2.REPLICA_STATE_READY
FAILED = common_pb2.REPLICA_STATE_FAILED
NO_REPLICA = (
    f"node {NODE} has no ready replica of {MODEL!r}; retry, the scheduler will route elsewhere"
)


@dataclass
class Node:
    stub: node_pb2_grpc.NodeManagerStub
    replicas: ReplicaSet
    cfg: NodeConfig
    scheduler: scheduler_pb2_grpc.SchedulerStub
    dispatcher: Dispatcher


@pytest.fixture
async def node():
    # A long interval: each heartbeat in these tests is one the test asked for.
    scheduler = SchedulerServicer(
        NodeRegistry(clock=WallClock()), Router(rng=random.Random(0)), heartbeat_interval_s=60.0
    )
    scheduler_server = await start_server(
        [
            Registration(
                add=lambda s: scheduler_pb2_grpc.add_SchedulerServicer_to_server(scheduler, s),
                service_name="strata.v1.Scheduler",
            )
        ]
    )
    cfg = NodeConfig(
        node_id=NODE,
        node_bind="127.0.0.1:0",
        node_advertise="node-t.local:50053",
        internal_auth=False,
        scheduler_addr=(scheduler_server.address,),
        kvstore_addr="",
        otlp_endpoint="",
        node_memory_bytes=8 << 30,
        device="cpu",
        torch_threads=1,
        # three workers load at once: on a busy 2-core machine that takes a while
        worker_ready_timeout_s=300.0,
        heartbeat_interval_s=60.0,
    )
    replicas = ReplicaSet(
        {**cfg.worker_settings(), "kv_blocks": 64, "block_size": 16}, cfg.worker_ready_timeout_s
    )
    servicer = NodeManagerServicer(cfg, replicas)
    running = await start_server(
        [
            Registration(
                add=lambda s: node_pb2_grpc.add_NodeManagerServicer_to_server(servicer, s),
                service_name=node_pb2.DESCRIPTOR.services_by_name["NodeManager"].full_name,
            )
        ]
    )
    ch, scheduler_ch = channel(running.address), channel(scheduler_server.address)
    try:
        yield Node(
            node_pb2_grpc.NodeManagerStub(ch),
            replicas,
            cfg,
            scheduler_pb2_grpc.SchedulerStub(scheduler_ch),
            servicer.dispatcher,
        )
    finally:
        await replicas.stop_all()
        await ch.close()
        await scheduler_ch.close()
        await running.stop(0)
        await scheduler_server.stop(0)


async def one_heartbeat(node: Node) -> scheduler_pb2.ListNodesResponse:
    """Run the node's heartbeat loop until the scheduler has heard from it once, then stop it."""
    stop = asyncio.Event()
    beats = asyncio.create_task(heartbeat_loop(node.cfg, node.replicas, stop))
    try:
        for _ in range(100):
            listed = await node.scheduler.ListNodes(scheduler_pb2.ListNodesRequest())
            if listed.nodes:
                return listed
            await asyncio.sleep(0.05)
        raise AssertionError("the scheduler never received a heartbeat")
    finally:
        stop.set()
        await beats


def submit(max_tokens: int = 8, replica_id: str = "") -> node_pb2.SubmitRequest:
    return node_pb2.SubmitRequest(
        request_id="req-1",
        tenant="acme",
        replica_id=replica_id,
        spec=common_pb2.GenerationSpec(model=MODEL, prompt="Hello, world", max_tokens=max_tokens),
    )


async def status(stub) -> common_pb2.NodeInfo:
    return await stub.GetNodeStatus(node_pb2.GetNodeStatusRequest())


async def wait_states(stub, want: dict[str, int], timeout_s: float = 240.0) -> dict[str, int]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        states = {r.replica_id: r.state for r in (await status(stub)).replicas}
        if states == want or loop.time() > deadline:
            return states
        await asyncio.sleep(0.1)


def reference_engine() -> LLMEngine:
    """An engine with the workers' settings: what they generate and what they weigh."""
    torch.set_num_threads(1)
    return LLMEngine(load_dummy(MODEL), EngineConfig(block_size=16, num_blocks=64))


def reference_tokens(prompt: str, max_tokens: int) -> list[int]:
    engine = reference_engine()
    engine.add_request(
        EngineRequest("ref", engine.tokenizer.encode(prompt), SamplingParams(max_tokens=max_tokens))
    )
    return run_to_end(engine)["ref"]


def worker_memory_bytes() -> int:
    e = reference_engine()
    return (
        sum(t.numel() * t.element_size() for t in e.model.state_dict().values())
        + e.kv.numel() * e.kv.element_size()
    )


async def rpc_error(coro) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await coro
    return err.value


async def drain(call) -> list[common_pb2.GenerationChunk]:
    return [c async for c in call]


async def test_status_and_errors_without_workers(node):
    stub = node.stub
    info = await status(stub)
    assert (info.node_id, info.address, info.memory_bytes, info.device, list(info.replicas)) == (
        NODE,
        "node-t.local:50053",
        8 << 30,
        "cpu",
        [],
    )
    refused = submit()
    refused.route_id = "sched-1"
    err = await rpc_error(drain(stub.Submit(refused)))
    assert (err.code(), err.details()) == (grpc.StatusCode.UNAVAILABLE, NO_REPLICA)
    # Refused, but it reached the node: its route is listed for the scheduler all the same.
    assert node.dispatcher.arrivals.recent(node.dispatcher.clock.now()) == ("sched-1",)
    refused.route_id = "x" * 65
    err = await rpc_error(drain(stub.Submit(refused)))
    assert (err.code(), err.details()) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "route_id has 65 characters, more than 64: pass the RouteResponse.route_id unchanged",
    )
    for call in (
        stub.LoadModel(node_pb2.LoadModelRequest()),
        stub.UnloadModel(node_pb2.UnloadModelRequest(replica_id="x")),
    ):
        err = await rpc_error(call)
        assert (err.code(), err.details()) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            "model is required",
        )


async def test_worker_lifecycle_load_submit_unload_and_a_killed_worker(node):
    stub, replicas = node.stub, node.replicas
    exporter = global_spans()
    loaded = [
        (await stub.LoadModel(node_pb2.LoadModelRequest(model=MODEL, replica_id=rid))).replica
        for rid in ("a", "b")
    ]
    assert [(r.model, r.replica_id, r.state) for r in loaded] == [
        (MODEL, "a", LOADING),
        (MODEL, "b", LOADING),
    ]
    assert loaded[0].worker_address.startswith("127.0.0.1:")
    again = (await stub.LoadModel(node_pb2.LoadModelRequest(model=MODEL, replica_id="a"))).replica
    assert again.worker_address == loaded[0].worker_address  # same replica, no new process
    err = await rpc_error(drain(stub.Submit(submit())))  # still loading
    assert (err.code(), err.details()) == (grpc.StatusCode.UNAVAILABLE, NO_REPLICA)
    await stub.LoadModel(node_pb2.LoadModelRequest(model="no-such-model", replica_id="bad"))

    want = {"a": READY, "b": READY, "bad": FAILED}
    assert await wait_states(stub, want) == want
    assert replicas.replicas["bad"].error == "worker bad exited with code 1 while loading"

    # The heartbeat reports every replica, FAILED ones once (then forgets them), and the models
    # of READY replicas with the worker's own context length and memory.
    (reported,) = (await one_heartbeat(node)).nodes
    assert (reported.node_id, reported.address, reported.memory_bytes, reported.device) == (
        NODE,
        "node-t.local:50053",
        8 << 30,
        "cpu",
    )
    assert [(r.replica_id, r.state, r.kv_blocks_total) for r in reported.replicas] == [
        ("a", READY, 64),
        ("b", READY, 64),
        ("bad", FAILED, 0),
    ]
    models = (await node.scheduler.ListModels(common_pb2.ListModelsRequest())).models
    assert [(m.name, m.context_length, m.memory_bytes) for m in models] == [
        (MODEL, 2048, worker_memory_bytes())
    ]
    assert sorted(replicas.replicas) == ["a", "b"]
    info = await status(stub)
    assert [
        (r.replica_id, r.kv_blocks_total, r.kv_blocks_free, r.running_requests)
        for r in info.replicas
    ] == [("a", 64, 64, 0), ("b", 64, 64, 0)]

    chunks = await drain(stub.Submit(submit(replica_id="a")))
    assert [t for c in chunks for t in c.token_ids] == reference_tokens("Hello, world", 8)
    assert [len(c.token_ids) for c in chunks] == [1] * 8
    assert {c.request_id for c in chunks} == {"req-1"}
    assert chunks[-1].finish_reason == common_pb2.FINISH_REASON_LENGTH
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (12, 8)
    (span,) = spans_named(exporter, names.SPAN_NODE_SUBMIT)
    assert dict(span.attributes) == {
        names.NODE_ID: NODE,
        names.REPLICA_ID: "a",
        names.TENANT: "acme",
    }
    # a request the worker refuses keeps its code; the sentence names worker and node
    err = await rpc_error(drain(stub.Submit(submit(max_tokens=0, replica_id="a"))))
    assert (err.code(), err.details()) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        f"worker a on node {NODE}: max_tokens must be at least 1, got 0",
    )

    process_b = replicas.replicas["b"].process.proc
    unloading = asyncio.ensure_future(
        stub.UnloadModel(
            node_pb2.UnloadModelRequest(model=MODEL, replica_id="b", drain_timeout_ms=2000)
        )
    )
    await asyncio.sleep(0.2)
    # draining, but within its routing grace: a request the scheduler routed to b by an older
    # heartbeat is still served by b, not refused
    assert replicas.replicas["b"].state is State.DRAINING
    assert len(await drain(stub.Submit(submit(max_tokens=2, replica_id="b")))) == 2
    reply = await unloading
    assert reply.unloaded == 1
    assert process_b.returncode == 0  # SIGTERM: the worker stopped gracefully
    assert [r.replica_id for r in (await status(stub)).replicas] == ["a"]
    # with b gone, a request naming b goes to the ready replica a
    assert len(await drain(stub.Submit(submit(max_tokens=2, replica_id="b")))) == 2

    os.kill(replicas.replicas["a"].process.proc.pid, signal.SIGKILL)
    assert await wait_states(stub, {"a": FAILED}) == {"a": FAILED}
    assert replicas.replicas["a"].error == "worker process exited with code -9"
    err = await rpc_error(drain(stub.Submit(submit())))
    assert (err.code(), err.details()) == (grpc.StatusCode.UNAVAILABLE, NO_REPLICA)
