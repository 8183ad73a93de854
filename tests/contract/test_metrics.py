"""Metrics collector contract: spans sent by the real OTel SDK exporter come back as reports and
traces over gRPC; bad trace ids are refused with a reason."""

import json

import grpc
import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Status, StatusCode

from services.metrics.config import MetricsConfig
from services.metrics.servicer import MetricsServicer
from strata.core import defaults
from strata.rpc.server import Registration, channel, start_server
from strata.store.db import create_all, make_engine, session_factory
from strata.store.spans import span_sink
from strata.telemetry import names
from strata.telemetry.receiver import OtlpReceiver
from strata.v1 import metrics_pb2, metrics_pb2_grpc

T0 = 1_700_000_000_000_000_000  # ns
MS = 1_000_000


@pytest.fixture
async def collector(tmp_path):
    engine = make_engine(f"sqlite+aiosqlite:///{tmp_path / 'strata.db'}")
    await create_all(engine)
    sessions = session_factory(engine)
    receiver = OtlpReceiver(span_sink(sessions))
    await receiver.start("127.0.0.1:0")
    servicer = MetricsServicer(sessions, receiver)
    running = await start_server(
        [
            Registration(
                add=lambda s: metrics_pb2_grpc.add_MetricsServicer_to_server(servicer, s),
                service_name=metrics_pb2.DESCRIPTOR.services_by_name["Metrics"].full_name,
            )
        ]
    )
    async with channel(running.address) as ch:
        yield receiver.port, metrics_pb2_grpc.MetricsStub(ch)
    await running.stop(0)
    await receiver.stop()
    await engine.dispose()


def gateway_tracer(otlp_port: int) -> TracerProvider:
    provider = TracerProvider(resource=Resource.create({"service.name": "gateway"}))
    provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=f"127.0.0.1:{otlp_port}", insecure=True))
    )
    return provider


def emit_request(
    tracer,
    n: int,
    tenant: str,
    ttft: float,
    e2e: float,
    prompt: int,
    completion: int,
    error: str = "",
) -> str:
    start = T0 + n * 1000 * MS
    attrs = {
        names.TENANT: tenant,
        names.REQUEST_ID: f"req-{n}",
        names.TTFT_MS: ttft,
        names.TPOT_MS: ttft / 10,
        names.E2E_MS: e2e,
        names.GEN_AI_REQUEST_MODEL: defaults.DEFAULT_MODEL,
        names.GEN_AI_USAGE_INPUT_TOKENS: prompt,
        names.GEN_AI_USAGE_OUTPUT_TOKENS: completion,
        names.GEN_AI_RESPONSE_FINISH_REASONS: ["stop"],
    }
    if error:
        attrs[names.ERROR_CODE] = error
    span = tracer.start_span(names.SPAN_GATEWAY_GENERATE, start_time=start, attributes=attrs)
    route = tracer.start_span(
        names.SPAN_SCHEDULER_ROUTE,
        context=trace.set_span_in_context(span),
        start_time=start + MS,
        attributes={names.NODE_ID: "node-0"},
    )
    route.end(end_time=start + 2 * MS)
    if error:
        span.set_status(Status(StatusCode.ERROR, error))
    span.end(end_time=start + int(e2e * MS))
    return format(span.get_span_context().trace_id, "032x")


async def test_spans_from_the_sdk_exporter_become_a_report_and_a_trace(collector):
    otlp_port, stub = collector
    provider = gateway_tracer(otlp_port)
    tracer = provider.get_tracer("test")
    first = emit_request(tracer, 1, "acme", ttft=10, e2e=100, prompt=11, completion=4)
    emit_request(tracer, 2, "acme", ttft=20, e2e=200, prompt=12, completion=5)
    emit_request(tracer, 3, "acme", ttft=30, e2e=300, prompt=13, completion=6)
    emit_request(tracer, 4, "acme", ttft=40, e2e=400, prompt=14, completion=7)
    emit_request(
        tracer, 5, "beta", ttft=5, e2e=50, prompt=2, completion=0, error="RESOURCE_EXHAUSTED"
    )
    # Blocks this (the event loop's) thread until the receiver answers: the receiver must not
    # need the loop to answer.
    assert provider.force_flush(timeout_millis=10_000) is True
    provider.shutdown()

    report = await stub.GetReport(metrics_pb2.ReportRequest(), timeout=10)
    assert (report.spans_received, report.spans_dropped) == (10, 0)
    acme, beta = report.tenants
    assert (acme.tenant, acme.requests, acme.errors) == ("acme", 4, 0)
    assert (acme.ttft_ms.p50, acme.ttft_ms.mean) == (25.0, 25.0)
    assert acme.ttft_ms.p95 == pytest.approx(38.5, abs=1e-9)
    assert acme.ttft_ms.p99 == pytest.approx(39.7, abs=1e-9)
    assert acme.tpot_ms.p50 == 2.5
    assert (acme.e2e_ms.p50, acme.e2e_ms.mean) == (250.0, 250.0)
    assert (acme.prompt_tokens, acme.completion_tokens) == (50, 22)
    assert (beta.tenant, beta.requests, beta.errors) == ("beta", 1, 1)
    assert not beta.HasField("ttft_ms")  # its one request failed: no latency to report
    assert (beta.prompt_tokens, beta.completion_tokens) == (2, 0)

    only_beta = await stub.GetReport(metrics_pb2.ReportRequest(tenant="beta"), timeout=10)
    assert [t.tenant for t in only_beta.tenants] == ["beta"]
    late = await stub.GetReport(
        metrics_pb2.ReportRequest(since_unix_ms=(T0 + 3000 * MS) // MS), timeout=10
    )
    assert [(t.tenant, t.requests) for t in late.tenants] == [("acme", 2), ("beta", 1)]

    got = await stub.GetTrace(metrics_pb2.GetTraceRequest(trace_id=first.upper()), timeout=10)
    root, route = got.spans
    assert (root.trace_id, root.name, root.service, root.parent_span_id) == (
        first,
        names.SPAN_GATEWAY_GENERATE,
        "gateway",
        "",
    )
    assert (root.start_unix_nano, root.end_unix_nano) == (T0 + 1000 * MS, T0 + 1100 * MS)
    assert json.loads(root.attributes_json)[names.REQUEST_ID] == "req-1"
    assert json.loads(root.attributes_json)[names.GEN_AI_RESPONSE_FINISH_REASONS] == ["stop"]
    assert (route.name, route.parent_span_id) == (names.SPAN_SCHEDULER_ROUTE, root.span_id)
    assert json.loads(route.attributes_json) == {names.NODE_ID: "node-0"}


@pytest.mark.parametrize(
    "bad", ["xyz", "0af7651916cd43dd8448eb211c80319", "0" * 32, "0af7651916cd43dd8448eb211c80319g"]
)
async def test_malformed_trace_id_is_invalid_argument(collector, bad):
    _, stub = collector
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.GetTrace(metrics_pb2.GetTraceRequest(trace_id=bad), timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details() == (
        "trace_id must be 32 hexadecimal characters and not all zero (as Jaeger and the "
        f"traceparent header show it), got {bad!r}"
    )


async def test_unknown_trace_is_not_found(collector):
    _, stub = collector
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.GetTrace(metrics_pb2.GetTraceRequest(trace_id="ab" * 16), timeout=10)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert (
        "no spans stored for trace or request abababababababababababababababab"
        in err.value.details()
    )


async def test_negative_since_is_invalid_argument(collector):
    _, stub = collector
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.GetReport(metrics_pb2.ReportRequest(since_unix_ms=-1), timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "got -1" in err.value.details()


def test_config_does_not_export_own_spans_by_default(monkeypatch, tmp_path):
    monkeypatch.setenv("STRATA_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("STRATA_OTLP_ENDPOINT", "127.0.0.1:4317")
    for name in (
        "STRATA_METRICS_BIND",
        "STRATA_OTLP_BIND",
        "STRATA_DB_URL",
        "STRATA_METRICS_EXPORT_OWN_SPANS",
    ):
        monkeypatch.delenv(name, raising=False)
    cfg = MetricsConfig.from_env()
    assert (cfg.metrics_bind, cfg.otlp_bind) == (defaults.METRICS_ADDR, defaults.OTLP_ADDR)
    assert (
        cfg.database_url(cfg.resolved_data_dir()) == f"sqlite+aiosqlite:///{tmp_path / 'strata.db'}"
    )
    assert cfg.tracing_endpoint == ""
    monkeypatch.setenv("STRATA_METRICS_EXPORT_OWN_SPANS", "true")
    assert MetricsConfig.from_env().tracing_endpoint == "127.0.0.1:4317"
