"""Multiplexed calls (strata.rpc.mux_client / mux_server) behave as direct calls do: the same
responses, statuses and trailers through a generated stub; cancels and deadlines reach the
server's handler; the cluster token is checked per call; a broken stream fails its calls with
UNAVAILABLE and the next call opens a new one; a server without the service gets direct calls."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import grpc
import pytest

from strata.rpc.mux_client import MuxChannel
from strata.rpc.server import Registration, start_server
from strata.security.identity import TOKEN_METADATA, ClusterIdentity
from strata.v1 import common_pb2, worker_pb2, worker_pb2_grpc

WAIT_S = 240.0  # generous: a busy 2-core machine
TOKEN = "cluster-token"


class FakeWorker(worker_pb2_grpc.WorkerServicer):
    """Generate streams spec.max_tokens chunks; request ids steer the other cases."""

    def __init__(self) -> None:
        self.cancelled: dict[str, asyncio.Event] = {}
        self.started: dict[str, asyncio.Event] = {}
        self.metadata: dict[str, dict[str, str]] = {}

    async def Generate(self, request, context):
        rid = request.request_id
        self.metadata[rid] = {k: v for k, v in context.invocation_metadata()}
        if rid == "bad":
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                "max_tokens must be positive",
                (("retry-after-ms", "250"),),
            )
        if rid == "boom":
            raise RuntimeError("a servicer bug")
        if rid.startswith("hang"):
            self.cancelled[rid] = asyncio.Event()
            self.started.setdefault(rid, asyncio.Event()).set()
            try:
                yield common_pb2.GenerationChunk(request_id=rid, token_ids=[1])
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled[rid].set()
                raise
        for i in range(request.spec.max_tokens):
            yield common_pb2.GenerationChunk(request_id=rid, token_ids=[i], text=f"t{i}")

    async def GetStats(self, request, context):
        return worker_pb2.WorkerStats(model="fake", running_requests=3)


async def _serve(worker: FakeWorker, identity=None, multiplex=True, bind="127.0.0.1:0"):
    return await start_server(
        [
            Registration(
                add=lambda s: worker_pb2_grpc.add_WorkerServicer_to_server(worker, s),
                service_name=worker_pb2.DESCRIPTOR.services_by_name["Worker"].full_name,
            )
        ],
        bind=bind,
        identity=identity,
        multiplex=multiplex,
    )


def _request(rid: str, n: int = 3) -> worker_pb2.WorkerGenerateRequest:
    return worker_pb2.WorkerGenerateRequest(
        request_id=rid, spec=common_pb2.GenerationSpec(model="fake", max_tokens=n)
    )


async def _tokens(call) -> list[int]:
    return [t async for c in call for t in c.token_ids]


@dataclass
class Muxed:
    worker: FakeWorker
    running: object
    mux: MuxChannel
    stub: worker_pb2_grpc.WorkerStub


@pytest.fixture
async def muxed():
    """A fake worker served with Multiplex, and a stub over a MuxChannel to it."""
    worker = FakeWorker()
    running = await _serve(worker)
    mux = MuxChannel(grpc.aio.insecure_channel(running.address))
    try:
        yield Muxed(worker, running, mux, worker_pb2_grpc.WorkerStub(mux))
    finally:
        await mux.close()
        await running.stop(0)


async def test_streams_and_unary_calls_match_direct_calls(muxed):
    muxed_stub = muxed.stub
    async with grpc.aio.insecure_channel(muxed.running.address) as direct_ch:
        direct = worker_pb2_grpc.WorkerStub(direct_ch)
        # Many calls at once share the stream; each sees its own responses in order.
        calls = [muxed_stub.Generate(_request(f"r{i}", i)) for i in range(8)]
        got = await asyncio.gather(*(_tokens(c) for c in calls))
        assert got == [list(range(i)) for i in range(8)]
        assert await _tokens(muxed_stub.Generate(_request("x", 5))) == await _tokens(
            direct.Generate(_request("x", 5))
        )
    stats = await muxed_stub.GetStats(worker_pb2.GetStatsRequest(), timeout=WAIT_S)
    assert (stats.model, stats.running_requests) == ("fake", 3)
    call = muxed_stub.Generate(_request("read", 2))
    assert [(await call.read()).token_ids[0], (await call.read()).token_ids[0]] == [0, 1]
    assert await call.read() is grpc.aio.EOF
    assert await call.code() is grpc.StatusCode.OK
    assert not muxed.mux.direct


async def test_large_requests_at_once_travel_in_several_batches(muxed):
    # 24 of them make 72 MB at once: over the 64 MiB message limit unless cut into batches
    prompt = "p" * 3_000_000
    requests = [_request(f"big{i}", 2) for i in range(24)]
    for r in requests:
        r.spec.prompt = prompt
    got = await asyncio.gather(*(_tokens(muxed.stub.Generate(r)) for r in requests))
    assert got == [[0, 1]] * 24


async def test_errors_carry_code_details_and_trailers(muxed):
    stub = muxed.stub
    with pytest.raises(grpc.aio.AioRpcError) as bad:
        await _tokens(stub.Generate(_request("bad")))
    assert bad.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert bad.value.details() == "max_tokens must be positive"
    assert ("retry-after-ms", "250") in list(bad.value.trailing_metadata())
    # A servicer exception becomes INTERNAL with a reference, as the guard answers directly.
    with pytest.raises(grpc.aio.AioRpcError) as boom:
        await _tokens(stub.Generate(_request("boom")))
    assert boom.value.code() is grpc.StatusCode.INTERNAL
    assert "reference" in boom.value.details()
    # The stream outlives failed calls.
    assert await _tokens(stub.Generate(_request("after", 2))) == [0, 1]


async def test_cancel_and_deadline_reach_the_handler(muxed):
    stub, worker = muxed.stub, muxed.worker
    call = stub.Generate(_request("hang-cancel"))
    first = await asyncio.wait_for(call.read(), WAIT_S)
    assert list(first.token_ids) == [1]
    assert call.cancel()
    assert call.done() and await call.code() is grpc.StatusCode.CANCELLED
    await asyncio.wait_for(worker.cancelled["hang-cancel"].wait(), WAIT_S)

    late = stub.Generate(_request("hang-deadline"), timeout=2.0)
    with pytest.raises(grpc.aio.AioRpcError) as expired:
        await asyncio.wait_for(_tokens(late), WAIT_S)
    assert expired.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
    if "hang-deadline" in worker.started:  # else the deadline passed before the handler ran
        await asyncio.wait_for(worker.cancelled["hang-deadline"].wait(), WAIT_S)


async def test_the_token_is_checked_per_call_and_metadata_reaches_the_handler():
    worker = FakeWorker()
    running = await _serve(worker, identity=ClusterIdentity("worker", TOKEN))
    good = MuxChannel(grpc.aio.insecure_channel(running.address), [(TOKEN_METADATA, TOKEN)])
    try:
        stub = worker_pb2_grpc.WorkerStub(good)
        assert await _tokens(stub.Generate(_request("ok", 2), metadata=[("x-probe", "1")])) == [
            0,
            1,
        ]
        assert worker.metadata["ok"]["x-probe"] == "1"
        # A stream opened with the token does not let a call without it through.
        bare = worker_pb2_grpc.WorkerStub(good)
        good._metadata = ()  # noqa: SLF001 - the calls that follow carry no token
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await _tokens(bare.Generate(_request("no-token")))
        assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED
        assert "no-token" not in worker.metadata
    finally:
        await good.close()
        await running.stop(0)


async def test_a_broken_stream_fails_its_calls_and_the_next_call_reconnects():
    worker = FakeWorker()
    running = await _serve(worker)
    port = running.port
    mux = MuxChannel(grpc.aio.insecure_channel(f"127.0.0.1:{port}"))
    stub = worker_pb2_grpc.WorkerStub(mux)
    try:
        call = stub.Generate(_request("hang-break"))
        await asyncio.wait_for(call.read(), WAIT_S)
        await running.stop(0)
        with pytest.raises(grpc.aio.AioRpcError) as broke:
            await asyncio.wait_for(_tokens(call), WAIT_S)
        assert broke.value.code() is grpc.StatusCode.UNAVAILABLE
        running = await _serve(worker, bind=f"127.0.0.1:{port}")
        await asyncio.wait_for(mux.channel_ready(), WAIT_S)  # reconnected, after its backoff
        assert await _tokens(stub.Generate(_request("again", 2))) == [0, 1]
    finally:
        await mux.close()
        await running.stop(0)


async def test_a_server_without_the_service_gets_direct_calls():
    worker = FakeWorker()
    running = await _serve(worker, multiplex=False)
    mux = MuxChannel(grpc.aio.insecure_channel(running.address))
    stub = worker_pb2_grpc.WorkerStub(mux)
    try:
        with pytest.raises(grpc.aio.AioRpcError) as first:
            await _tokens(stub.Generate(_request("first", 2)))
        assert first.value.code() is grpc.StatusCode.UNAVAILABLE
        assert mux.direct
        assert await _tokens(stub.Generate(_request("second", 2))) == [0, 1]
    finally:
        await mux.close()
        await running.stop(0)


async def test_direct_mode_makes_plain_calls():
    worker = FakeWorker()
    running = await _serve(worker, multiplex=False)
    mux = MuxChannel(grpc.aio.insecure_channel(running.address), direct=True)
    try:
        stub = worker_pb2_grpc.WorkerStub(mux)
        assert await _tokens(stub.Generate(_request("plain", 3))) == [0, 1, 2]
        assert (await stub.GetStats(worker_pb2.GetStatsRequest())).model == "fake"
    finally:
        await mux.close()
        await running.stop(0)


async def test_a_stopping_server_finishes_running_calls_then_ends_idle_streams():
    worker = FakeWorker()
    running = await _serve(worker)
    mux = MuxChannel(grpc.aio.insecure_channel(running.address))
    stub = worker_pb2_grpc.WorkerStub(mux)
    try:
        assert await _tokens(stub.Generate(_request("warm", 1))) == [0]  # the stream is open
        call = stub.Generate(_request("hang-drain"))
        await asyncio.wait_for(call.read(), WAIT_S)
        # The stream stays open in the caller's hands; the running call is the only thing the
        # stop waits for, so it returns long before the grace period once that call ends.
        stop = asyncio.create_task(running.stop(grace=WAIT_S * 2))
        await asyncio.sleep(0)
        assert not stop.done()
        call.cancel()
        await asyncio.wait_for(stop, WAIT_S)
    finally:
        await mux.close()
        await running.stop(0)
