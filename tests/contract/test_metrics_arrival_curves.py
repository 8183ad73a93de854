"""Metrics.GetArrivalCurves in-process on port 0: per-model arrivals per window (and each
window's busiest slice) from stored request rows, the tightest SLA targets of each model's
tenants, refused requests, and the placement planner's client of it (MetricsCurves)."""

import grpc
import pytest

from services.metrics.servicer import MetricsServicer
from services.placement.curves_source import MetricsCurves
from strata.core.sla import parse_classes
from strata.eval.layers import LayerSettings
from strata.rpc.server import Registration, channel, start_server
from strata.store.db import create_all, make_engine, session_factory
from strata.store.spans import SpanRecord, insert_spans, span_sink
from strata.store.tenants import create_tenant
from strata.telemetry import names
from strata.telemetry.receiver import OtlpReceiver
from strata.v1 import metrics_pb2, metrics_pb2_grpc

NOW_MS = 1_700_006_400_000 + 3_600_000  # 01:00 UTC


def row(
    n: int, model: str, tenant: str, at_ms: int, prompt: int, output: int, error: str = ""
) -> SpanRecord:
    attrs = {
        names.TENANT: tenant,
        names.REQUEST_ID: f"req-{n}",
        names.GEN_AI_REQUEST_MODEL: model,
        names.E2E_MS: 5.0,
        names.GEN_AI_USAGE_INPUT_TOKENS: prompt,
        names.GEN_AI_USAGE_OUTPUT_TOKENS: output,
    }
    if error:
        attrs[names.ERROR_CODE] = error
    return SpanRecord(
        trace_id=f"{n:032x}",
        span_id=f"{n:016x}",
        parent_span_id="",
        name=names.SPAN_GATEWAY_GENERATE,
        service="gateway",
        start_unix_nano=at_ms * 1_000_000,
        end_unix_nano=(at_ms + 5) * 1_000_000,
        attributes=attrs,
    )


@pytest.fixture
async def metrics(tmp_path):
    engine = make_engine(f"sqlite+aiosqlite:///{tmp_path / 'strata.db'}")
    await create_all(engine)
    sessions = session_factory(engine)
    async with sessions() as s:
        await create_tenant(s, "chat", "interactive")
        await create_tenant(s, "api", "standard")
        await create_tenant(s, "jobs", "batch")
        await insert_spans(
            s,
            [
                row(1, "a", "chat", NOW_MS - 150_000, 100, 10),  # window 0 of [-180 s, now)
                row(2, "a", "api", NOW_MS - 100_000, 300, 30),  # window 1
                row(3, "a", "api", NOW_MS - 90_000, 50, 0, error="UNAVAILABLE"),
                row(4, "b", "jobs", NOW_MS - 1_000, 7, 3),  # window 2
                row(5, "b", "jobs", NOW_MS - 200_000, 7, 3),  # before the span
            ],
        )
    receiver = OtlpReceiver(span_sink(sessions))
    settings = LayerSettings(
        sla=parse_classes("interactive=300/50,standard=2000/40,batch=best-effort")
    )
    servicer = MetricsServicer(sessions, receiver, settings, clock_ms=lambda: NOW_MS)
    running = await start_server(
        [
            Registration(
                add=lambda s: metrics_pb2_grpc.add_MetricsServicer_to_server(servicer, s),
                service_name=metrics_pb2.DESCRIPTOR.services_by_name["Metrics"].full_name,
            )
        ]
    )
    async with channel(running.address) as ch:
        yield metrics_pb2_grpc.MetricsStub(ch)
    await running.stop(0)
    await engine.dispose()


async def test_recent_windows_per_model_with_the_tightest_targets(metrics):
    reply = await metrics.GetArrivalCurves(metrics_pb2.ArrivalCurvesRequest(window_s=60, windows=3))
    assert (reply.window_s, reply.start_unix_ms, reply.end_unix_ms) == (
        60.0,
        NOW_MS - 180_000,
        NOW_MS,
    )
    assert list(reply.observed_s) == [60.0, 60.0, 60.0]
    a, b = reply.curves
    assert (a.model, list(a.requests), list(a.prompt_tokens_mean), list(a.output_tokens_mean)) == (
        "a",
        [1, 2, 0],
        [100.0, 300.0, 0.0],
        [10.0, 30.0, 0.0],
    )
    # chat is interactive (300/50), api standard (2000/40): the smaller of each target.
    assert (a.sla.sla_class, a.sla.ttft_ms, a.sla.tpot_ms) == ("interactive+standard", 300.0, 40.0)
    assert (b.model, list(b.requests)) == ("b", [0, 0, 1])
    assert b.sla.sla_class == "batch"
    assert not b.sla.HasField("ttft_ms") and not b.sla.HasField("tpot_ms")


async def test_daily_windows_fold_by_time_of_day(metrics):
    reply = await metrics.GetArrivalCurves(
        metrics_pb2.ArrivalCurvesRequest(window_s=3600, days=1, end_unix_ms=NOW_MS)
    )
    assert len(reply.observed_s) == 24 and set(reply.observed_s) == {3600.0}
    a = next(c for c in reply.curves if c.model == "a")
    b = next(c for c in reply.curves if c.model == "b")
    assert list(a.requests)[0] == 3 and sum(a.requests) == 3  # 00:57-00:58 UTC
    assert list(b.requests)[0] == 2 and sum(b.requests) == 2


async def test_burst_slices_count_each_windows_busiest_slice(metrics):
    reply = await metrics.GetArrivalCurves(
        metrics_pb2.ArrivalCurvesRequest(window_s=60, windows=3, burst_s=20)
    )
    assert reply.burst_s == 20.0
    a, b = reply.curves
    # a: one arrival in window 0; two (one failed) 10 s apart in one slice of window 1.
    assert (list(a.burst_requests), list(b.burst_requests)) == ([1, 2, 0], [0, 0, 1])
    plain = await metrics.GetArrivalCurves(metrics_pb2.ArrivalCurvesRequest(window_s=60, windows=3))
    assert plain.burst_s == 0.0 and all(not c.burst_requests for c in plain.curves)


@pytest.mark.parametrize(
    "request_fields, message",
    [
        (
            dict(window_s=60, windows=3, burst_s=25),
            "burst_s must divide the window: 25 s does not divide 60 s (try 6 or 12)",
        ),
        (
            dict(window_s=60, windows=3, burst_s=-1),
            "burst_s must be 0 (window means only) or a "
            "positive number of seconds that divides "
            "window_s, got -1.0",
        ),
        (dict(window_s=0, windows=3), "window_s must be between 0 and 86400 seconds, got 0.0"),
        (dict(window_s=60, windows=0), "windows must be between 1 and 10080, got 0"),
        (
            dict(window_s=7000, days=1),
            "with days > 0 the day is cut into windows of window_s, so "
            "it must divide 86400 s; 7000 s does not (try 300, 900, 3600)",
        ),
        (
            dict(window_s=60, windows=3, end_unix_ms=-1),
            "end_unix_ms must be 0 (now) or a Unix time in milliseconds, got -1",
        ),
    ],
)
async def test_impossible_grids_are_refused_with_the_reason(metrics, request_fields, message):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await metrics.GetArrivalCurves(metrics_pb2.ArrivalCurvesRequest(**request_fields))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details() == message


async def test_the_planners_client_asks_for_burst_slices_and_fills_silent_models(metrics):
    curves = MetricsCurves(
        metrics, "in-process", window_s=60, windows=3, days=0, timeout_s=5, burst_s=20
    )
    got = await curves.fetch(["a", "c"])
    assert curves.problem == "" and sorted(got.curves) == ["a", "c"]
    a = got.curves["a"]
    assert (a.requests, a.burst_s, a.burst_rates) == ((1, 2, 0), 20.0, (0.05, 0.1, 0.0))
    assert got.curves["c"].requests == (0, 0, 0)
    assert got.sla["a"].ttft_ms == 300.0


async def test_the_planners_client_says_why_when_the_collector_does_not_answer():
    async with channel("127.0.0.1:1") as ch:
        curves = MetricsCurves(
            metrics_pb2_grpc.MetricsStub(ch),
            "127.0.0.1:1",
            window_s=60,
            windows=3,
            days=0,
            timeout_s=2,
            burst_s=20,
        )
        assert await curves.fetch(["a"]) is None
    assert curves.problem.startswith(
        "the metrics collector at 127.0.0.1:1 did not answer GetArrivalCurves ("
    )
    assert curves.problem.endswith("planning without arrival curves and without optional moves")
