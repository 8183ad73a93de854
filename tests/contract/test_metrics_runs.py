"""Metrics collector contract for evaluation: runs (start, finish, list, errors), node samples
(stored, refused with a reason), and a per-run layered report over gRPC built from spans sent
by the real OTel exporter and from the stored samples."""

import json

import grpc
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from services.metrics.servicer import MetricsServicer
from strata.eval.layers import LayerSettings
from strata.eval.report_codec import from_report
from strata.rpc.server import Registration, channel, start_server
from strata.store.db import create_all, make_engine, session_factory
from strata.store.spans import span_sink
from strata.store.tenants import create_tenant
from strata.telemetry import names
from strata.telemetry.receiver import OtlpReceiver
from strata.v1 import metrics_pb2, metrics_pb2_grpc

T0_MS = 1_700_000_000_000
MS = 1_000_000


class Clock:
    def __init__(self) -> None:
        self.ms = T0_MS

    def __call__(self) -> int:
        return self.ms


@pytest.fixture
async def collector(tmp_path):
    engine = make_engine(f"sqlite+aiosqlite:///{tmp_path / 'strata.db'}")
    await create_all(engine)
    sessions = session_factory(engine)
    async with sessions() as session:
        await create_tenant(session, "chat", sla_class="interactive")
    receiver = OtlpReceiver(span_sink(sessions))
    await receiver.start("127.0.0.1:0")
    clock = Clock()
    servicer = MetricsServicer(
        sessions,
        receiver,
        LayerSettings(price_per_kwh=0.3, price_per_node_hour=1.8),
        clock_ms=clock,
    )
    running = await start_server(
        [
            Registration(
                add=lambda s: metrics_pb2_grpc.add_MetricsServicer_to_server(servicer, s),
                service_name=metrics_pb2.DESCRIPTOR.services_by_name["Metrics"].full_name,
            )
        ]
    )
    async with channel(running.address) as ch:
        yield receiver.port, metrics_pb2_grpc.MetricsStub(ch), clock
    await running.stop(0)
    await receiver.stop()
    await engine.dispose()


async def rpc_error(call) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call
    return err.value


async def test_runs_start_finish_and_list(collector):
    _, stub, clock = collector
    run = await stub.StartRun(
        metrics_pb2.StartRunRequest(
            name="azure-conv x0.5", kind="replay", params_json='{"time_scale": 0.5}'
        ),
        timeout=5,
    )
    assert (run.run_id, run.name, run.kind, run.started_unix_ms, run.finished_unix_ms) == (
        1,
        "azure-conv x0.5",
        "replay",
        T0_MS,
        0,
    )
    clock.ms += 60_000
    done = await stub.FinishRun(
        metrics_pb2.FinishRunRequest(run_id=run.run_id, client_summary_json='{"requests": 3}'),
        timeout=5,
    )
    assert (done.finished_unix_ms, done.client_summary_json) == (T0_MS + 60_000, '{"requests": 3}')
    manual = await stub.StartRun(metrics_pb2.StartRunRequest(), timeout=5)
    listed = await stub.ListRuns(metrics_pb2.ListRunsRequest(), timeout=5)
    assert [(r.run_id, r.name, r.kind, r.finished_unix_ms) for r in listed.runs] == [
        (1, "azure-conv x0.5", "replay", T0_MS + 60_000),
        (manual.run_id, "manual 2023-11-14 22:14:20 UTC", "manual", 0),
    ]


@pytest.mark.parametrize(
    "call, code, message",
    [
        (
            lambda s: s.StartRun(metrics_pb2.StartRunRequest(name="x", kind="soak")),
            grpc.StatusCode.INVALID_ARGUMENT,
            "kind must be one of replay, benchmark, manual, got 'soak'",
        ),
        (
            lambda s: s.StartRun(metrics_pb2.StartRunRequest(name="n" * 300)),
            grpc.StatusCode.INVALID_ARGUMENT,
            "a run name must be at most 256 characters, got 300",
        ),
        (
            lambda s: s.StartRun(metrics_pb2.StartRunRequest(name="x", params_json="{")),
            grpc.StatusCode.INVALID_ARGUMENT,
            "params_json must be a JSON object, got invalid JSON",
        ),
        (
            lambda s: s.FinishRun(metrics_pb2.FinishRunRequest(run_id=0)),
            grpc.StatusCode.INVALID_ARGUMENT,
            "run_id must be the positive id StartRun returned, got 0",
        ),
        (
            lambda s: s.FinishRun(metrics_pb2.FinishRunRequest(run_id=42)),
            grpc.StatusCode.NOT_FOUND,
            "no run 42; StartRun creates one",
        ),
        (
            lambda s: s.GetReport(metrics_pb2.ReportRequest(run_id=42)),
            grpc.StatusCode.NOT_FOUND,
            "no run 42",
        ),
        (
            lambda s: s.GetReport(metrics_pb2.ReportRequest(run_id=-1)),
            grpc.StatusCode.INVALID_ARGUMENT,
            "run_id must be 0 (every request) or an id from StartRun",
        ),
    ],
)
async def test_bad_run_calls_are_refused_with_a_reason(collector, call, code, message):
    _, stub, _ = collector
    err = await rpc_error(call(stub))
    assert err.code() == code
    assert message in err.details()


def node_sample(t_ms: int, **fields) -> metrics_pb2.NodeSample:
    base = dict(
        node_id="node-0", unix_ms=T0_MS + t_ms, energy_source="rapl", kv_blocks_device_total=64
    )
    base.update(fields)
    return metrics_pb2.NodeSample(**base)


async def test_bad_samples_are_refused_and_none_of_the_call_is_stored(collector):
    _, stub, clock = collector
    err = await rpc_error(
        stub.RecordNodeSamples(
            metrics_pb2.NodeSamplesRequest(
                samples=[node_sample(0), node_sample(1000, utilization=1.2)]
            )
        )
    )
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.details() == (
        "sample of node 'node-0' at 1700000001000: utilization is a "
        "fraction of time, at most 1, got 1.2; no sample of this call was "
        "stored"
    )
    clock.ms = T0_MS + 5000
    report = await stub.GetReport(metrics_pb2.ReportRequest(), timeout=5)
    assert len(report.node_layer.nodes) == 0


def emit(
    tracer, n: int, tenant: str, ttft: float, completion: int, run_id=None, error: str = ""
) -> None:
    start = (T0_MS + 1000 + n * 1000) * MS
    attrs = {
        names.TENANT: tenant,
        names.REQUEST_ID: f"req-{n}",
        names.TTFT_MS: ttft,
        names.TPOT_MS: 20.0,
        names.E2E_MS: 500.0,
        names.GEN_AI_USAGE_INPUT_TOKENS: 100,
        names.GEN_AI_USAGE_OUTPUT_TOKENS: completion,
        names.ITL_P50_MS: 18.0,
        names.ITL_P95_MS: 22.0,
        names.ITL_P99_MS: 30.0,
    }
    if run_id is not None:
        attrs[names.RUN_ID] = run_id
    if error:
        attrs[names.ERROR_CODE] = error
    span = tracer.start_span(names.SPAN_GATEWAY_GENERATE, start_time=start, attributes=attrs)
    span.end(end_time=start + 500 * MS)


async def test_per_run_report_from_spans_and_samples(collector):
    otlp_port, stub, clock = collector
    run = await stub.StartRun(metrics_pb2.StartRunRequest(name="replay", kind="replay"), timeout=5)
    provider = TracerProvider(resource=Resource.create({"service.name": "gateway"}))
    provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=f"127.0.0.1:{otlp_port}", insecure=True))
    )
    tracer = provider.get_tracer("test")
    emit(tracer, 1, "chat", ttft=200.0, completion=10, run_id=run.run_id)  # attains
    emit(tracer, 2, "chat", ttft=800.0, completion=10, run_id=run.run_id)  # TTFT > 500
    emit(tracer, 3, "api", ttft=900.0, completion=30, run_id=str(run.run_id))
    emit(tracer, 4, "api", ttft=5.0, completion=0, run_id=run.run_id, error="INTERNAL")
    emit(tracer, 5, "api", ttft=1.0, completion=99)  # another run
    assert provider.force_flush(timeout_millis=10_000) is True
    provider.shutdown()
    # 10 s of samples every 2 s: 2 J/s of energy, 100 prompt tokens/s, 25 of them cached.
    samples = [
        node_sample(
            t,
            utilization=0.5,
            energy_joules=2.0 * t / 1000,
            power_watts=2.0,
            prompt_tokens=t // 10,
            prefix_hit_tokens=t // 40,
            batch_tokens=50,
            batch_budget=200,
            kv_blocks_device_used=t // 1000,
            waiting=t // 2000,
        )
        for t in range(0, 12_001, 2000)
    ]
    stored = await stub.RecordNodeSamples(metrics_pb2.NodeSamplesRequest(samples=samples))
    again = await stub.RecordNodeSamples(metrics_pb2.NodeSamplesRequest(samples=samples[:2]))
    assert (stored.stored, again.stored) == (7, 2)
    clock.ms = T0_MS + 10_000
    await stub.FinishRun(metrics_pb2.FinishRunRequest(run_id=run.run_id), timeout=5)

    reply = await stub.GetReport(metrics_pb2.ReportRequest(run_id=run.run_id), timeout=10)
    assert [(t.tenant, t.requests, t.errors) for t in reply.tenants] == [
        ("api", 2, 1),
        ("chat", 2, 0),
    ]
    r = from_report(reply)
    assert (r.run.run_id, r.window_start_unix_ms, r.window_end_unix_ms) == (
        run.run_id,
        T0_MS,
        T0_MS + 10_000,
    )
    o = r.request.overall
    assert (o.requests, o.errors, o.attained) == (4, 1, 2)  # req-1 and req-3 (standard)
    assert (o.goodput_rps, o.goodput_tokens_per_s) == (0.2, 4.0)
    assert {g.key: g.attainment for g in r.request.sla_classes} == {
        "interactive": 0.5,
        "standard": 0.5,
    }
    assert r.request.fairness_jain == pytest.approx(50**2 / (2 * (30**2 + 20**2)))
    assert r.request.itl_source == "gateway"
    assert o.itl_ms.p50 == 18.0 and o.itl_ms.p99 == 30.0
    (node,) = r.node.nodes
    assert (node.node_id, node.samples) == ("node-0", 6)  # 0..10 s
    assert node.utilization == 0.5 and node.batch_utilization == 0.25
    assert (node.prompt_tokens, node.prefix_hit_tokens) == (1000, 250)
    assert node.prefix_hit_rate == 0.25 and node.tier_hit_rate == 0.0
    assert node.energy_joules == 20.0 and node.mean_power_watts == 2.0
    assert (node.kv_blocks_device_used_max, node.waiting.p50) == (10, 2.5)
    c = r.cluster
    assert (c.duration_s, c.requests, c.errors) == (10.0, 4, 1)
    assert (c.requests_per_s, c.output_tokens_per_s) == (0.3, 5.0)
    assert c.energy_kwh == pytest.approx(20 / 3.6e6)
    assert (c.energy_sources, c.energy_modelled) == (["rapl"], False)
    cost = 20 / 3.6e6 * 0.3 + 10 / 3600 * 1.8
    assert c.cost_usd == pytest.approx(cost)
    assert c.cost_per_1m_output_tokens == pytest.approx(cost / 50 * 1e6)
    assert (c.outages, c.max_recovery_s) == ([], None)
    assert json.loads(reply.run.params_json) == {}

    everything = from_report(await stub.GetReport(metrics_pb2.ReportRequest(), timeout=10))
    assert everything.request.overall.requests == 5
    assert everything.run is None
    assert (everything.window_start_unix_ms, everything.window_end_unix_ms) == (
        T0_MS + 2000,
        T0_MS + 6500,
    )  # the requests' own span
