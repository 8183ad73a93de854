"""Node manager in-process on port 0 in front of a fake decode worker (test-only, in-process) that
holds each request until the test lets it finish: time slots by the worker's max_seqs, strict
priority and weighted fairness among tenants in the node's queue, urgent requests sent past the
cap with their priority, cancelled callers leaving the queue, per-tenant loads in the status."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

import grpc
import pytest

from services.node.config import NodeConfig
from services.node.servicer import NodeManagerServicer
from strata.core.settings import ConfigError
from strata.node.replicas import Replica, ReplicaSet, State
from strata.node.worker_process import WorkerProcess
from strata.rpc.server import Registration, channel, start_server
from strata.v1 import common_pb2, node_pb2, node_pb2_grpc, worker_pb2, worker_pb2_grpc

MODEL = "dummy-tiny"
FAR = 60_000.0  # a TTFT target no test comes near: nothing turns urgent


class HoldingWorker(worker_pb2_grpc.WorkerServicer):
    """Starts each request and answers one token when the test calls finish(). Test-only."""

    def __init__(self, max_seqs: int) -> None:
        self.started: list[tuple[str, int]] = []  # (request id, priority), in order
        self.stats = worker_pb2.WorkerStats(
            model=MODEL, max_seqs=max_seqs, step_tokens=500, busy_seconds=2.0
        )
        self._gates: dict[str, asyncio.Event] = {}

    def finish(self, request_id: str) -> None:
        self._gates.setdefault(request_id, asyncio.Event()).set()

    async def Generate(self, request, context):
        self.started.append((request.request_id, request.priority))
        await self._gates.setdefault(request.request_id, asyncio.Event()).wait()
        yield common_pb2.GenerationChunk(
            request_id=request.request_id,
            token_ids=[7],
            finish_reason=common_pb2.FINISH_REASON_LENGTH,
            usage=common_pb2.Usage(prompt_tokens=3, completion_tokens=1, queue_ms=1.0),
        )

    async def GetStats(self, request, context):
        return self.stats


@dataclass
class Sub:
    """A Submit call in flight and the task reading its stream."""

    call: grpc.aio.UnaryStreamCall
    task: asyncio.Task


@dataclass
class Env:
    stub: node_pb2_grpc.NodeManagerStub
    worker: HoldingWorker
    servicer: NodeManagerServicer
    calls: list[Sub]

    def submit(
        self,
        rid: str,
        tenant: str,
        sla_class: str = "standard",
        priority: int = 1,
        weight: float = 1.0,
        ttft_ms: float = FAR,
    ) -> Sub:
        call = self.stub.Submit(
            node_pb2.SubmitRequest(
                request_id=rid,
                tenant=tenant,
                replica_id="w0",
                prompt_tokens_estimate=80,
                spec=common_pb2.GenerationSpec(model=MODEL, prompt="x" * 320, max_tokens=40),
                policy=common_pb2.TenantPolicy(
                    tenant=tenant,
                    sla_class=sla_class,
                    priority=priority,
                    ttft_ms=ttft_ms,
                    weight=weight,
                ),
            )
        )

        async def drain():
            return [c async for c in call]

        sub = Sub(call, asyncio.create_task(drain()))
        self.calls.append(sub)
        return sub

    async def queued(self, n: int) -> None:
        await until(lambda: len(self.servicer.dispatcher.queue) == n)

    async def started(self, n: int) -> list[str]:
        await until(lambda: len(self.worker.started) >= n)
        return [rid for rid, _ in self.worker.started]

    async def status(self) -> common_pb2.NodeInfo:
        return await self.stub.GetNodeStatus(node_pb2.GetNodeStatusRequest())


async def until(cond, timeout_s: float = 240.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not cond():
        if loop.time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.005)


@contextlib.asynccontextmanager
async def node_env(max_seqs: int = 1, queue: str = "wfq"):
    worker = HoldingWorker(max_seqs)
    worker_server = await start_server(
        [
            Registration(
                add=lambda s: worker_pb2_grpc.add_WorkerServicer_to_server(worker, s),
                service_name="strata.v1.Worker",
            )
        ]
    )
    cfg = NodeConfig(
        node_id="node-q",
        node_bind="127.0.0.1:0",
        node_advertise="node-q.local:50053",
        internal_auth=False,
        scheduler_addr=(),
        kvstore_addr="",
        otlp_endpoint="",
        node_memory_bytes=8 << 30,
        device="cpu",
        torch_threads=1,
        worker_ready_timeout_s=240.0,
        heartbeat_interval_s=60.0,
        node_queue=queue,
    )
    replicas = ReplicaSet({}, cfg.worker_ready_timeout_s)
    address = worker_server.address
    # A replica whose worker is the in-process fake: no process is ever started for it.
    replica = Replica("w0", MODEL, address, WorkerProcess("w0", address, {}), state=State.READY)
    replica.connect()
    replicas.replicas["w0"] = replica
    await replicas.refresh(replica)
    servicer = NodeManagerServicer(cfg, replicas)
    node_server = await start_server(
        [
            Registration(
                add=lambda s: node_pb2_grpc.add_NodeManagerServicer_to_server(servicer, s),
                service_name="strata.v1.NodeManager",
            )
        ]
    )
    ch = channel(node_server.address)
    env = Env(node_pb2_grpc.NodeManagerStub(ch), worker, servicer, [])
    try:
        yield env
    finally:
        for sub in env.calls:
            sub.call.cancel()
        await asyncio.gather(*(sub.task for sub in env.calls), return_exceptions=True)
        await ch.close()
        await replica._channel.close()
        await node_server.stop(0)
        await worker_server.stop(0)


async def serve_in_turn(env: Env, count: int) -> list[str]:
    """Let the worker finish its one running request `count` times; the order they started."""
    for n in range(1, count + 1):
        order = await env.started(n)
        env.worker.finish(order[-1])
    return await env.started(count)


@pytest.mark.parametrize("queue", ["wfq", "fcfs"])
async def test_a_batch_backlog_does_not_delay_an_interactive_request_under_wfq(queue):
    async with node_env(max_seqs=1, queue=queue) as env:
        env.submit("b0", "bulk", "batch", 0, ttft_ms=0)
        await env.started(1)
        for k in range(1, 5):
            env.submit(f"b{k}", "bulk", "batch", 0, ttft_ms=0)
            await env.queued(k)
        chat = env.submit("i0", "chat", "interactive", 2)
        if queue == "wfq":
            # It displaces the running best-effort b0 at once, before the queued batch.
            assert await env.started(2) == ["b0", "i0"]
            assert len(env.servicer.dispatcher.queue) == 4
            env.worker.finish("i0")
            env.worker.finish("b0")
            for n in range(3, 7):
                order = await env.started(n)
                env.worker.finish(order[-1])
            assert order == ["b0", "i0", "b1", "b2", "b3", "b4"]
            assert dict(env.worker.started) == {
                "b0": 0,
                "i0": 2,
                "b1": 0,
                "b2": 0,
                "b3": 0,
                "b4": 0,
            }
        else:  # the pooled baseline: in arrival order, one priority for the engine
            await env.queued(5)
            order = await serve_in_turn(env, 6)
            assert order == ["b0", "b1", "b2", "b3", "b4", "i0"]
            assert set(dict(env.worker.started).values()) == {0}
        chunks = await chat.task
        assert [list(c.token_ids) for c in chunks] == [[7]]
        if queue == "fcfs":  # the wait for a slot is added to the worker's queueing time
            assert chunks[-1].usage.queue_ms > 1.0


async def test_two_tenants_are_served_one_to_three_by_weight():
    async with node_env(max_seqs=1) as env:
        env.submit("x0", "other")
        await env.started(1)
        # 120 tokens each: a's tags advance 120 a request, b's 40 (weight 3)
        names = ["a0", "b0", "a1", "b1", "a2", "b2", "a3", "b3", "b4", "b5"]
        for k, rid in enumerate(names):
            env.submit(rid, "tenant-" + rid[0], weight=3.0 if rid[0] == "b" else 1.0)
            await env.queued(k + 1)
        order = await serve_in_turn(env, 11)
        assert order[1:] == ["a0", "b0", "b1", "b2", "a1", "b3", "b4", "b5", "a2", "a3"]
        first_eight = order[1:9]  # 1:3 in tokens, as the weights say
        assert [120 * sum(r[0] == t for r in first_eight) for t in "ab"] == [240, 720]


async def test_an_urgent_request_goes_past_the_cap_only_to_displace_a_lower_class():
    async with node_env(max_seqs=1) as env:
        env.submit("b0", "bulk", "batch", 0, ttft_ms=0)
        await env.started(1)
        env.submit("i0", "chat", "interactive", 2, ttft_ms=100.0)
        # urgent after 50 ms (half its target): sent beside b0, with its priority, for the
        # engine to preempt b0
        assert await env.started(2) == ["b0", "i0"]
        assert env.worker.started[1] == ("i0", 2)
        assert env.servicer.dispatcher.beyond_cap == 1
        env.submit("i1", "chat", "interactive", 2, ttft_ms=100.0)
        await env.queued(1)
        await asyncio.sleep(0.3)  # urgent too, but only b0 is below it and i0 took its place
        assert len(env.worker.started) == 2 and len(env.servicer.dispatcher.queue) == 1
        env.worker.finish("i0")
        assert await env.started(3) == ["b0", "i0", "i1"]


async def test_a_class_with_a_target_displaces_best_effort_at_once_and_a_class_only_when_urgent():
    async with node_env(max_seqs=1) as env:
        env.submit("b0", "bulk", "batch", 0, ttft_ms=0)
        await env.started(1)
        # i0's target is far off, so it never turns urgent; b0 is best effort: displaced now.
        env.submit("i0", "chat", "interactive", 2, ttft_ms=FAR)
        assert await env.started(2) == ["b0", "i0"]
        assert env.worker.started[1] == ("i0", 2)
        # A standard request is displaced only by an urgent one: i1 waits for a slot.
        env.worker.finish("i0")
        env.worker.finish("b0")
        env.submit("s0", "api", "standard", 1, ttft_ms=FAR)
        await env.started(3)
        env.submit("i1", "chat", "interactive", 2, ttft_ms=FAR)
        await env.queued(1)
        await asyncio.sleep(0.3)  # the check that nothing moves, not a synchronisation
        assert len(env.worker.started) == 3 and len(env.servicer.dispatcher.queue) == 1
        env.worker.finish("s0")
        assert await env.started(4) == ["b0", "i0", "s0", "i1"]


async def test_a_cancelled_waiting_request_leaves_the_queue_at_once():
    async with node_env(max_seqs=1) as env:
        env.submit("x0", "acme")
        await env.started(1)
        gone = env.submit("w0", "quitter")
        await env.queued(1)
        assert [(t.tenant, t.queued) for t in (await env.status()).tenants] == [
            ("acme", 0),
            ("quitter", 1),
        ]
        gone.call.cancel()
        await env.queued(0)
        assert [t.tenant for t in (await env.status()).tenants] == ["acme"]
        env.submit("y0", "acme")
        await env.queued(1)
        env.worker.finish("x0")
        assert await env.started(2) == ["x0", "y0"]  # w0 never reached the worker
        with pytest.raises(asyncio.CancelledError):
            await gone.task
        assert await gone.call.code() == grpc.StatusCode.CANCELLED


async def test_status_reports_tenant_loads_slots_and_measured_rate():
    async with node_env(max_seqs=1) as env:
        env.submit("x0", "acme")
        await env.started(1)
        env.submit("q0", "bulk", "batch", 0, ttft_ms=0)
        env.submit("q1", "bulk", "batch", 0, ttft_ms=0)
        await env.queued(2)
        info = await env.status()
        assert [(t.tenant, t.priority, t.running, t.queued, t.tokens) for t in info.tenants] == [
            ("acme", 1, 1, 0, 120),
            ("bulk", 0, 0, 2, 240),
        ]
        (replica,) = info.replicas
        assert (replica.max_seqs, replica.tokens_per_s) == (1, 250.0)  # 500 tokens in 2 s
        env.worker.stats.step_tokens, env.worker.stats.busy_seconds = 1500, 4.0
        (replica,) = (await env.status()).replicas
        assert replica.tokens_per_s == 500.0  # 1000 more in 2 s more
        env.worker.finish("x0")
        await env.started(2)
        assert [
            (t.tenant, t.running, t.queued, t.tokens) for t in (await env.status()).tenants
        ] == [("bulk", 1, 1, 240)]


async def test_a_request_id_already_on_the_node_is_refused():
    async with node_env(max_seqs=1) as env:
        env.submit("x0", "acme")
        await env.started(1)
        env.submit("w0", "acme")
        await env.queued(1)
        for rid in ("x0", "w0"):  # running, queued
            again = env.submit(rid, "acme")
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await again.task
            assert (err.value.code(), err.value.details()) == (
                grpc.StatusCode.INVALID_ARGUMENT,
                f"request id {rid!r} is already on this node; ids must be unique",
            )
        env.worker.finish("x0")
        assert await env.started(2) == ["x0", "w0"]


def test_the_queue_policy_is_read_from_the_environment(monkeypatch):
    monkeypatch.setenv("STRATA_NODE_QUEUE", "fcfs")
    assert NodeConfig.from_env().node_queue == "fcfs"
    monkeypatch.delenv("STRATA_NODE_QUEUE")
    assert NodeConfig.from_env().node_queue == "wfq"
    monkeypatch.setenv("STRATA_NODE_QUEUE", "lottery")
    with pytest.raises(
        ConfigError,
        match=r"STRATA_NODE_QUEUE \(--node-queue\): Input should be "
        r"'wfq' or 'fcfs', got 'lottery'",
    ):
        NodeConfig.from_env()


async def test_the_status_reports_what_requests_waited_for_a_first_token_while_others_wait():
    # One slot: b waits behind a, which holds it until the test lets it answer. The fake worker
    # reports no step line, so a prompt's own prefill is priced at 0 and a's whole wait at the
    # node is its delay; the node reports it while b waits for its first token, and 0 once
    # nothing waits (the scheduler's own estimate sees an empty queue).
    async with node_env(max_seqs=1) as env:
        assert (await env.status()).replicas[0].recent_delay_s == 0.0
        a = env.submit("a", "t")
        await env.started(1)
        env.submit("b", "t")
        await env.queued(1)
        await asyncio.sleep(0.3)  # the wait to measure, not a synchronisation
        env.worker.finish("a")
        await a.task
        await env.started(2)
        replica = (await env.status()).replicas[0]
        assert replica.recent_delay_s >= 0.3
        # By class: a's class (priority 1) has the delay; no other class has samples.
        assert [c.priority for c in replica.class_delays] == [1]
        assert replica.class_delays[0].delay_s == replica.recent_delay_s
        env.worker.finish("b")
        await env.calls[1].task
        replica = (await env.status()).replicas[0]
        assert replica.recent_delay_s == 0.0
        assert [(c.priority, c.delay_s) for c in replica.class_delays] == [(1, 0.0)]
