"""The guard every server runs: a body that does not parse is INVALID_ARGUMENT with a sentence, a
servicer's unexpected exception is INTERNAL with a reference id (never UNKNOWN with Python's
exception text), such calls are logged once per interval with a count, and a public server
refuses a body larger than the largest valid request before parsing it."""

from __future__ import annotations

import logging

import grpc
import pytest

from strata.gateway.validation import MAX_PROMPT_CHARS, max_request_bytes
from strata.rpc.server import Registration, start_server
from strata.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc


class _Servicer(gateway_pb2_grpc.GatewayServicer):
    async def ListModels(self, request, context):
        raise KeyError("a bug in the servicer")

    async def Generate(self, request, context):
        yield gateway_pb2.GenerateResponse(text="first")
        if request.prompt == "abort":
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "its own sentence")
        raise ValueError("a bug after the first chunk")


@pytest.fixture
async def server():
    servicer = _Servicer()
    running = await start_server(
        [
            Registration(
                add=lambda s: gateway_pb2_grpc.add_GatewayServicer_to_server(servicer, s),
                service_name="strata.v1.Gateway",
            )
        ],
        max_receive_bytes=max_request_bytes(),
    )
    yield running
    await running.stop(0)


async def _call(address, method, body, streaming):
    async with grpc.aio.insecure_channel(address) as ch:
        if streaming:
            return [x async for x in ch.unary_stream(method)(body)]
        return await ch.unary_unary(method)(body)


@pytest.mark.parametrize(
    ("method", "streaming", "message"),
    [
        ("/strata.v1.Gateway/ListModels", False, "strata.v1.ListModelsRequest"),
        ("/strata.v1.Gateway/Generate", True, "strata.v1.GenerateRequest"),
    ],
)
async def test_a_malformed_body_is_invalid_argument_logged_once_with_a_count(
    server, caplog, method, streaming, message
):
    caplog.set_level(logging.WARNING, logger="strata.rpc.guard")
    for _ in range(5):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await _call(server.address, method, b"\xff\xff\xff\x0f not protobuf", streaming)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert caught.value.details() == (
            f"the request body is not a valid {message} message; "
            f"send the message this method's .proto declares"
        )
    lines = [r for r in caplog.records if r.name == "strata.rpc.guard"]
    assert len(lines) == 1 and lines[0].exc_info is None  # once per interval, no traceback


async def test_an_unexpected_exception_is_internal_with_a_reference(server, caplog):
    caplog.set_level(logging.ERROR, logger="strata.rpc.guard")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await _call(
            server.address,
            "/strata.v1.Gateway/ListModels",
            common_pb2.ListModelsRequest().SerializeToString(),
            False,
        )
    err = caught.value
    assert err.code() == grpc.StatusCode.INTERNAL
    assert "KeyError" not in err.details() and "a bug" not in err.details()
    ref = err.details().split("reference ")[1].split(")")[0]
    assert any(ref in r.getMessage() for r in caplog.records)


async def test_a_stream_that_fails_midway_ends_internal_and_abort_passes_through(server):
    async with grpc.aio.insecure_channel(server.address) as ch:
        stub = gateway_pb2_grpc.GatewayStub(ch)
        got = []
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async for chunk in stub.Generate(gateway_pb2.GenerateRequest(prompt="x")):
                got.append(chunk.text)
        assert got == ["first"] and caught.value.code() == grpc.StatusCode.INTERNAL
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async for _ in stub.Generate(gateway_pb2.GenerateRequest(prompt="abort")):
                pass
        assert (caught.value.code(), caught.value.details()) == (
            grpc.StatusCode.FAILED_PRECONDITION,
            "its own sentence",
        )


async def test_the_largest_valid_request_fits_and_a_larger_body_is_refused_unparsed(server):
    largest = gateway_pb2.GenerateRequest(
        model="m" * 256,
        prompt="\U0001f600" * MAX_PROMPT_CHARS,
        stop=["\U0001f600" * 1000] * 8,
        max_tokens=1,
    )
    assert largest.ByteSize() <= max_request_bytes()
    async with grpc.aio.insecure_channel(server.address) as ch:
        stub = gateway_pb2_grpc.GatewayStub(ch)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async for _ in stub.Generate(largest):
                pass
        assert caught.value.code() == grpc.StatusCode.INTERNAL  # reached the servicer
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async for _ in stub.Generate(
                gateway_pb2.GenerateRequest(prompt="x" * (max_request_bytes() + 1))
            ):
                pass
        assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
