"""Span storage and the request rows derived from gateway spans, on every store backend."""

from sqlalchemy import func, select

from strata.store.models import Request, Span
from strata.store.spans import SpanRecord, get_trace, insert_spans, request_from_span
from strata.telemetry import names

pytest_plugins = ["tests.pg"]

TRACE = "0af7651916cd43dd8448eb211c80319c"
T0 = 1_700_000_000_000_000_000  # ns


def gateway_span(**attrs) -> SpanRecord:
    base = {
        names.TENANT: "acme",
        names.REQUEST_ID: "req-1",
        names.GEN_AI_REQUEST_MODEL: "tiny",
        names.TTFT_MS: 12.5,
        names.TPOT_MS: 3.25,
        names.E2E_MS: 80.0,
        names.QUEUE_MS: 1.5,
        names.GEN_AI_USAGE_INPUT_TOKENS: 100,
        names.GEN_AI_USAGE_OUTPUT_TOKENS: 20,
        names.CACHED_TOKENS: 64,
        names.GEN_AI_RESPONSE_FINISH_REASONS: ["stop"],
    }
    base.update(attrs)
    return SpanRecord(
        trace_id=TRACE,
        span_id="b7ad6b7169203331",
        parent_span_id="",
        name=names.SPAN_GATEWAY_GENERATE,
        service="gateway",
        start_unix_nano=T0 + 1_234_567,
        end_unix_nano=T0 + 91_234_567,
        attributes={k: v for k, v in base.items() if v is not None},
    )


def child_span(span_id: str, name: str, start: int) -> SpanRecord:
    return SpanRecord(
        trace_id=TRACE,
        span_id=span_id,
        parent_span_id="b7ad6b7169203331",
        name=name,
        service="worker",
        start_unix_nano=T0 + start,
        end_unix_nano=T0 + start + 1000,
        attributes={names.KV_BLOCKS: 3},
    )


def test_gateway_span_becomes_a_request_row():
    req = request_from_span(gateway_span())
    assert (req.request_id, req.trace_id, req.tenant, req.model) == ("req-1", TRACE, "acme", "tiny")
    assert req.start_unix_ms == 1_700_000_000_001
    assert (req.ttft_ms, req.tpot_ms, req.e2e_ms, req.queue_ms) == (12.5, 3.25, 80.0, 1.5)
    assert (req.prompt_tokens, req.completion_tokens, req.cached_tokens) == (100, 20, 64)
    assert (req.finish_reason, req.error_code, req.status_code) == ("stop", "", 0)
    assert req.is_error is False


def test_error_code_or_error_status_marks_a_failed_request():
    failed = request_from_span(
        gateway_span(**{names.ERROR_CODE: "RESOURCE_EXHAUSTED", names.TTFT_MS: None})
    )
    assert (failed.error_code, failed.ttft_ms, failed.is_error) == (
        "RESOURCE_EXHAUSTED",
        None,
        True,
    )
    span = gateway_span()
    span.status_code = 2
    assert request_from_span(span).is_error is True


def test_missing_figures_fall_back_or_stay_empty():
    span = gateway_span(
        **{
            names.E2E_MS: None,
            names.REQUEST_ID: None,
            names.TPOT_MS: "fast",
            names.GEN_AI_USAGE_OUTPUT_TOKENS: float("nan"),
        }
    )
    req = request_from_span(span)
    assert req.e2e_ms == 90.0  # the span's own duration
    assert req.request_id == "b7ad6b7169203331"
    assert req.tpot_ms is None  # not a number: dropped, not the batch
    assert req.completion_tokens == 0


def test_only_tenant_gateway_spans_are_requests():
    assert request_from_span(child_span("00f067aa0ba902b7", names.SPAN_WORKER_GENERATE, 0)) is None
    assert request_from_span(gateway_span(**{names.TENANT: None})) is None


async def test_spans_stored_once_and_trace_read_back_in_start_order(store):
    spans = [
        child_span("00f067aa0ba902b8", names.SPAN_WORKER_PREFILL, 5_000_000),
        gateway_span(),
        child_span("00f067aa0ba902b7", names.SPAN_WORKER_GENERATE, 2_000_000),
    ]
    async with store() as s:
        assert await insert_spans(s, spans) == 1
        # An exporter retry: the same spans again, in this batch and the next.
        assert await insert_spans(s, [spans[1], spans[1]]) == 1
        span_count = (await s.execute(select(func.count()).select_from(Span))).scalar_one()
        requests = (await s.execute(select(Request))).scalars().all()
    assert span_count == 3
    assert [(r.request_id, r.tenant, r.ttft_ms, r.cached_tokens) for r in requests] == [
        ("req-1", "acme", 12.5, 64)
    ]
    async with store() as s:
        trace = await get_trace(s, TRACE)
        assert await get_trace(s, "f" * 32) == []
    assert [t.span_id for t in trace] == [
        "b7ad6b7169203331",
        "00f067aa0ba902b7",
        "00f067aa0ba902b8",
    ]
    assert trace[0] == spans[1]
    assert trace[1].attributes == {names.KV_BLOCKS: 3}
    assert trace[1].parent_span_id == "b7ad6b7169203331"
