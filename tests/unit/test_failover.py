"""strata.node.failover over scripted worker calls: a worker that dies mid-stream hands the
request to the replica that took over, with the tokens already passed on as resume_output_ids;
with no takeover the caller gets WorkerLost and how far it got; errors of a live worker, a
deadline, and the caller's own cancel never fail over."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import grpc
import pytest

from strata.node import failover
from strata.node.failover import WorkerLost, generate_with_failover
from strata.node.replicas import Replica, ReplicaSet, State
from strata.node.worker_process import WorkerProcess
from strata.v1 import common_pb2, worker_pb2

MODEL = "m"


def chunk(token: int, last: bool = False) -> common_pb2.GenerationChunk:
    c = common_pb2.GenerationChunk(request_id="r1", text=chr(token), token_ids=[token])
    if last:
        c.finish_reason = common_pb2.FINISH_REASON_LENGTH
    return c


def rpc_error(code: grpc.StatusCode) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), "Socket closed")


class Call:
    """A scripted streaming call: chunks, then an error, a hang, or the end."""

    def __init__(self, chunks, error=None, hang=False, before_error=lambda: None):
        self.chunks, self.error, self.hang, self.before_error = chunks, error, hang, before_error
        self.cancelled = self.finished = False

    def __aiter__(self):
        return self._run()

    async def _run(self):
        for c in self.chunks:
            yield c
            await asyncio.sleep(0)
        if self.hang:
            await asyncio.Event().wait()
        self.finished = True
        if self.error is not None:
            self.before_error()
            raise self.error

    def done(self) -> bool:
        return self.finished or self.cancelled

    def cancel(self) -> None:
        self.cancelled = True


class Stub:
    def __init__(self, *calls: Call):
        self.calls = list(calls)
        self.requests: list[tuple[worker_pb2.WorkerGenerateRequest, float | None]] = []

    def Generate(self, request, timeout=None):  # noqa: N802 - the gRPC method's name
        self.requests.append((request, timeout))
        return self.calls.pop(0)


def replica(address: str, stub: Stub, alive: bool = True) -> Replica:
    process = WorkerProcess("a", address, {})
    process.proc = SimpleNamespace(returncode=None if alive else -9)
    return Replica("a", MODEL, address, process, state=State.READY, stub=stub)


def request() -> worker_pb2.WorkerGenerateRequest:
    return worker_pb2.WorkerGenerateRequest(
        request_id="r1",
        tenant="acme",
        priority=2,
        spec=common_pb2.GenerationSpec(model=MODEL, prompt="hi", max_tokens=5),
    )


async def tokens(stream) -> list[int]:
    return [t async for c in stream for t in c.token_ids]


async def test_a_dead_worker_resumes_on_the_replica_that_took_over():
    replicas = ReplicaSet({})
    standby = replica("127.0.0.1:2", Stub(Call([chunk(13), chunk(14, last=True)])))

    def die_and_promote():  # what the node does when it sees the worker's exit
        dead.state, dead.process.proc.returncode = State.FAILED, -9
        replicas.replicas["a"] = standby

    dead = replica(
        "127.0.0.1:1",
        Stub(
            Call(
                [chunk(10), chunk(11), chunk(12)],
                rpc_error(grpc.StatusCode.UNAVAILABLE),
                before_error=die_and_promote,
            )
        ),
    )
    dead.in_flight = 1  # the caller's count
    replicas.replicas["a"] = dead
    out = await tokens(generate_with_failover(replicas, dead, request(), 30.0, node_id="n1"))
    assert out == [10, 11, 12, 13, 14]
    ((first, _),) = dead.stub.requests
    assert first == request() and list(first.resume_output_ids) == []
    ((resumed, timeout),) = standby.stub.requests
    want = request()
    want.resume_output_ids.extend([10, 11, 12])
    assert resumed == want and 0 < timeout <= 30.0
    assert (dead.in_flight, standby.in_flight) == (1, 0)


async def test_with_no_takeover_the_caller_learns_how_far_it_got():
    replicas = ReplicaSet({})
    dead = replica(
        "127.0.0.1:1",
        Stub(Call([chunk(10), chunk(11)], rpc_error(grpc.StatusCode.UNAVAILABLE))),
        alive=False,
    )
    replicas.replicas["a"] = dead
    got = []
    with pytest.raises(WorkerLost) as err:
        async for c in generate_with_failover(
            replicas, dead, request(), None, node_id="n1", takeover_wait_s=0.2
        ):
            got.extend(c.token_ids)
    assert got == [10, 11]
    assert str(err.value) == (
        "worker a of node n1 failed after 2 tokens and no replica took over within 0.2 s; retry"
    )


@pytest.mark.parametrize(
    "code,alive",
    [
        (grpc.StatusCode.INTERNAL, True),
        (grpc.StatusCode.DEADLINE_EXCEEDED, False),
        (grpc.StatusCode.INVALID_ARGUMENT, False),
    ],
)
async def test_errors_of_a_live_worker_or_of_the_request_pass_through(monkeypatch, code, alive):
    monkeypatch.setattr(failover, "EXIT_GRACE_S", 0.05)
    replicas = ReplicaSet({})
    worker = replica("127.0.0.1:1", Stub(Call([chunk(10)], rpc_error(code))), alive=alive)
    other = replica("127.0.0.1:2", Stub())
    other.replica_id = "b"
    replicas.replicas.update(a=worker, b=other)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await tokens(generate_with_failover(replicas, worker, request(), None))
    assert err.value.code() == code
    assert other.stub.requests == []


async def test_the_callers_cancel_never_fails_over():
    replicas = ReplicaSet({})
    call = Call([chunk(10), chunk(11)], hang=True)
    worker = replica("127.0.0.1:1", Stub(call))
    other = replica("127.0.0.1:2", Stub())
    other.replica_id = "b"
    replicas.replicas.update(a=worker, b=other)
    got = []

    async def consume():
        async for c in generate_with_failover(replicas, worker, request(), None):
            got.extend(c.token_ids)

    task = asyncio.create_task(consume())
    while len(got) < 2:
        await asyncio.sleep(0)
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert call.cancelled and got == [10, 11]
    assert other.stub.requests == []
