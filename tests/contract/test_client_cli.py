"""The SDK and the `strata` CLI against in-process fake Gateway and Metrics servers on port 0.

The fakes stand in for the real services only here; they check the bearer key and answer fixed
chunks, so the assertions are about what the client sends and prints.
"""

from __future__ import annotations

import asyncio
import io
import sys

import grpc
import pytest

from strata.client import AsyncClient, Client, cli
from strata.rpc.server import Registration, start_server
from strata.v1 import (
    common_pb2,
    gateway_pb2,
    gateway_pb2_grpc,
    metrics_pb2,
    metrics_pb2_grpc,
)

KEY = "tenant-key-1"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PIECES = ["The capital", " of France", " is Paris."]
T0 = 1_700_000_000_000_000_000
UNAUTHENTICATED_DETAILS = "API key not recognised: use a key issued for your tenant"


class FakeGateway(gateway_pb2_grpc.GatewayServicer):
    def __init__(self) -> None:
        self.requests: list[gateway_pb2.GenerateRequest] = []
        self.cancelled = asyncio.Event()

    async def _authenticate(self, context: grpc.aio.ServicerContext) -> None:
        if dict(context.invocation_metadata()).get("authorization") != f"Bearer {KEY}":
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, UNAUTHENTICATED_DETAILS)

    async def Generate(self, request, context):
        await self._authenticate(context)
        self.requests.append(request)
        if request.model == "endless":
            try:
                while True:
                    yield gateway_pb2.GenerateResponse(request_id="r", text="x")
                    await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
        for i, piece in enumerate(PIECES):
            yield gateway_pb2.GenerateResponse(
                request_id="r", text=piece, trace_id=TRACE_ID if i == 0 else ""
            )
            if request.model == "flaky":
                await context.abort(
                    grpc.StatusCode.UNAVAILABLE, "node n1 stopped answering; retry the request"
                )
        yield gateway_pb2.GenerateResponse(
            request_id="r",
            finish_reason=common_pb2.FINISH_REASON_STOP,
            trace_id=TRACE_ID,
            usage=common_pb2.Usage(prompt_tokens=14, completion_tokens=8, cached_prompt_tokens=6),
        )

    async def ListModels(self, request, context):
        await self._authenticate(context)
        return common_pb2.ListModelsResponse(
            models=[
                common_pb2.ModelInfo(
                    name="smollm2-135m-instruct", context_length=8192, memory_bytes=300 * 2**20
                )
            ]
        )


class FakeMetrics(metrics_pb2_grpc.MetricsServicer):
    def __init__(self) -> None:
        self.report_requests: list[metrics_pb2.ReportRequest] = []

    async def GetReport(self, request, context):
        self.report_requests.append(request)
        p = metrics_pb2.Percentiles
        return metrics_pb2.Report(
            tenants=[
                metrics_pb2.TenantReport(
                    tenant="demo",
                    requests=4,
                    errors=1,
                    ttft_ms=p(p50=30, p95=50, p99=70),
                    tpot_ms=p(p50=20, p95=21, p99=22),
                    e2e_ms=p(p50=200, p95=300, p99=400),
                )
            ],
            spans_received=40,
        )

    async def GetTrace(self, request, context):
        if request.trace_id != TRACE_ID:
            await context.abort(
                grpc.StatusCode.NOT_FOUND, f"no spans recorded for trace {request.trace_id}"
            )
        span = metrics_pb2.SpanRecord
        return metrics_pb2.Trace(
            spans=[
                span(
                    trace_id=TRACE_ID,
                    span_id="a",
                    name="strata.gateway.generate",
                    service="gateway",
                    start_unix_nano=T0,
                    end_unix_nano=T0 + 50_000_000,
                ),
                span(
                    trace_id=TRACE_ID,
                    span_id="b",
                    parent_span_id="a",
                    name="strata.node.submit",
                    service="node",
                    start_unix_nano=T0 + 2_000_000,
                    end_unix_nano=T0 + 49_000_000,
                ),
            ]
        )


class StdoutRecorder:
    """Records each write separately, to show that text is written as chunks arrive."""

    def __init__(self) -> None:
        self.writes: list[str] = []

    def write(self, text: str) -> int:
        self.writes.append(text)
        return len(text)

    def flush(self) -> None:
        pass


@pytest.fixture
async def fakes(monkeypatch, tmp_path):
    gateway, metrics = FakeGateway(), FakeMetrics()
    running = await start_server(
        [
            Registration(
                add=lambda s: gateway_pb2_grpc.add_GatewayServicer_to_server(gateway, s),
                service_name=gateway_pb2.DESCRIPTOR.services_by_name["Gateway"].full_name,
            ),
            Registration(
                add=lambda s: metrics_pb2_grpc.add_MetricsServicer_to_server(metrics, s),
                service_name=metrics_pb2.DESCRIPTOR.services_by_name["Metrics"].full_name,
            ),
        ]
    )
    monkeypatch.setenv("STRATA_GATEWAY_ADDR", running.address)
    monkeypatch.setenv("STRATA_METRICS_ADDR", running.address)
    monkeypatch.setenv("STRATA_API_KEY", KEY)
    monkeypatch.setenv("STRATA_DATA_DIR", str(tmp_path))
    yield gateway, metrics
    await running.stop(0)


async def run_cli(argv: list[str]) -> int:
    # main() runs its own event loop (asyncio.run), so it needs a thread of its own.
    return await asyncio.to_thread(cli.main, argv)


async def test_generate_streams_each_chunk_then_prints_usage_and_trace_id(
    fakes, monkeypatch, capsys
):
    gateway, _ = fakes
    out = StdoutRecorder()
    monkeypatch.setattr(sys, "stdout", out)
    code = await run_cli(
        [
            "generate",
            "--model",
            "smollm2-135m-instruct",
            "--max-tokens",
            "16",
            "--temperature",
            "0.5",
            "--seed",
            "7",
            "--stop",
            "\n\n",
            "--stop",
            "END",
            "What is the capital of France?",
        ]
    )
    assert code == 0
    assert out.writes == [*PIECES, "\n"]
    assert capsys.readouterr().err == (
        "usage: prompt_tokens=14 cached_prompt_tokens=6 completion_tokens=8 "
        f"finish_reason=stop\ntrace_id: {TRACE_ID}\n"
    )
    [request] = gateway.requests
    assert (request.model, request.prompt, request.max_tokens, list(request.stop)) == (
        "smollm2-135m-instruct",
        "What is the capital of France?",
        16,
        ["\n\n", "END"],
    )
    assert (request.sampling.temperature, request.sampling.seed) == (0.5, 7)
    assert list(request.messages) == []


async def test_chat_flag_sends_one_user_message_with_the_demo_key_file(
    fakes, monkeypatch, tmp_path, capsys
):
    gateway, _ = fakes
    monkeypatch.delenv("STRATA_API_KEY")
    (tmp_path / "demo_api_key").write_text(f"{KEY}\n")
    assert await run_cli(["generate", "--chat", "Capital of France?"]) == 0
    assert capsys.readouterr().out == "The capital of France is Paris.\n"
    [request] = gateway.requests
    assert [(m.role, m.content) for m in request.messages] == [("user", "Capital of France?")]
    assert request.prompt == ""


async def test_unauthenticated_prints_code_and_details_and_exits_2(fakes, monkeypatch, capsys):
    gateway, _ = fakes
    monkeypatch.setenv("STRATA_API_KEY", "wrong-key")
    assert await run_cli(["generate", "hello"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"error: UNAUTHENTICATED: {UNAUTHENTICATED_DETAILS}\n"
    assert gateway.requests == []


async def test_missing_key_fails_before_connecting(fakes, monkeypatch, capsys):
    monkeypatch.delenv("STRATA_API_KEY")
    assert await run_cli(["models"]) == 2
    assert capsys.readouterr().err.startswith("error: no API key: set STRATA_API_KEY")


async def test_error_mid_stream_keeps_the_text_so_far_and_exits_2(fakes, capsys):
    assert await run_cli(["generate", "--model", "flaky", "hello"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "The capital\n"
    assert captured.err == "error: UNAVAILABLE: node n1 stopped answering; retry the request\n"


async def test_models_lists_the_gateway_models(fakes, capsys):
    assert await run_cli(["models"]) == 0
    assert capsys.readouterr().out == (
        "model                  context  memory_mib\nsmollm2-135m-instruct     8192       300.0\n"
    )


async def test_report_asks_for_the_tenant_and_prints_the_table(fakes, capsys):
    _, metrics = fakes
    assert await run_cli(["report", "--tenant", "demo"]) == 0
    assert [r.tenant for r in metrics.report_requests] == ["demo"]
    assert capsys.readouterr().out == (
        "tenant  requests  errors  ttft_p50  ttft_p95  ttft_p99  tpot_p50  tpot_p95  tpot_p99  "
        "e2e_p50  e2e_p95  e2e_p99\n"
        "demo           4       1      30.0      50.0      70.0      20.0      21.0      22.0    "
        "200.0    300.0    400.0\n"
        "latencies in ms; spans received 40, dropped 0\n"
    )


async def test_trace_prints_the_span_tree(fakes, capsys):
    assert await run_cli(["trace", TRACE_ID.upper()]) == 0
    assert capsys.readouterr().out == (
        f"trace {TRACE_ID}: 2 spans, 50.0 ms\n"
        " start  duration  span\n"
        "0.0 ms   50.0 ms  strata.gateway.generate [gateway]\n"
        "2.0 ms   47.0 ms    strata.node.submit [node]\n"
    )


async def test_trace_errors_exit_2_with_the_server_or_argument_message(fakes, capsys):
    unknown = "0" * 32
    assert await run_cli(["trace", unknown]) == 2
    assert capsys.readouterr().err == f"error: NOT_FOUND: no spans recorded for trace {unknown}\n"
    assert await run_cli(["trace", "xyz"]) == 2
    assert capsys.readouterr().err == "error: a trace id is 32 hex characters, got 'xyz'\n"


async def test_async_client_streams_and_lists_models(fakes):
    async with AsyncClient() as client:
        chunks = [c async for c in client.generate("m", prompt="hi", max_tokens=4)]
        models = await client.list_models()
    assert [c.text for c in chunks] == [*PIECES, ""]
    assert chunks[-1].finish_reason == common_pb2.FINISH_REASON_STOP
    assert [m.name for m in models] == ["smollm2-135m-instruct"]


async def test_stopping_early_cancels_the_generation_on_the_server(fakes):
    gateway, _ = fakes
    async with AsyncClient() as client:
        async for chunk in client.generate("endless", prompt="hi"):
            assert chunk.text == "x"
            break
        await asyncio.wait_for(gateway.cancelled.wait(), timeout=5)


async def test_sync_client_streams_the_same_chunks(fakes):
    def collect() -> list[str]:
        with Client() as client:
            return [c.text for c in client.generate("m", messages=[("user", "hi")])]

    assert await asyncio.to_thread(collect) == [*PIECES, ""]
    assert [m.role for m in fakes[0].requests[0].messages] == ["user"]


async def test_dash_reads_the_prompt_from_stdin(fakes, monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO("a prompt\nover two lines\n"))
    assert await run_cli(["generate", "-"]) == 0
    assert fakes[0].requests[0].prompt == "a prompt\nover two lines\n"
