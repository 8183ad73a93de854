"""Exact text of what the `strata` CLI prints, from fixed replies."""

from __future__ import annotations

from strata.client.format import (
    format_models,
    format_report,
    format_summary,
    format_trace,
    table,
)
from strata.v1 import common_pb2, metrics_pb2

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
T0 = 1_700_000_000_000_000_000


def span(
    span_id: str,
    parent: str,
    name: str,
    service: str,
    start_ms: float,
    end_ms: float,
    status: int = 0,
) -> metrics_pb2.SpanRecord:
    return metrics_pb2.SpanRecord(
        trace_id=TRACE_ID,
        span_id=span_id,
        parent_span_id=parent,
        name=name,
        service=service,
        start_unix_nano=T0 + int(start_ms * 1e6),
        end_unix_nano=T0 + int(end_ms * 1e6),
        status_code=status,
    )


def test_table_left_aligns_the_first_column_and_right_aligns_the_rest() -> None:
    assert table(["name", "n"], [["a", "10"], ["long-name", "7"]]) == (
        "name        n\na          10\nlong-name   7"
    )


def test_report_prints_one_row_per_tenant_with_three_percentiles_per_latency() -> None:
    p = metrics_pb2.Percentiles
    report = metrics_pb2.Report(
        tenants=[
            metrics_pb2.TenantReport(
                tenant="demo",
                requests=12,
                errors=1,
                ttft_ms=p(p50=35.25, p95=80.0, p99=120.75),
                tpot_ms=p(p50=20.0, p95=25.5, p99=30.0),
                e2e_ms=p(p50=400.0, p95=1200.5, p99=2500.0),
            ),
            metrics_pb2.TenantReport(
                tenant="acme-batch",
                requests=3,
                errors=0,
                ttft_ms=p(p50=5, p95=6, p99=7),
                tpot_ms=p(p50=1, p95=2, p99=3),
                e2e_ms=p(p50=10, p95=20, p99=30),
            ),
        ],
        spans_received=150,
        spans_dropped=2,
    )
    assert format_report(report) == (
        "tenant      requests  errors  ttft_p50  ttft_p95  ttft_p99  tpot_p50  tpot_p95  "
        "tpot_p99  e2e_p50  e2e_p95  e2e_p99\n"
        "demo              12       1      35.2      80.0     120.8      20.0      25.5      "
        "30.0    400.0   1200.5   2500.0\n"
        "acme-batch         3       0       5.0       6.0       7.0       1.0       2.0       "
        "3.0     10.0     20.0     30.0\n"
        "latencies in ms; spans received 150, dropped 2"
    )


def test_empty_report_says_so_and_still_counts_spans() -> None:
    assert format_report(metrics_pb2.Report(spans_received=9)) == (
        "no finished requests recorded\nlatencies in ms; spans received 9, dropped 0"
    )


def test_trace_is_a_tree_in_start_order_with_offsets_durations_and_services() -> None:
    trace = metrics_pb2.Trace(
        spans=[
            span("b", "a", "strata.scheduler.route", "scheduler", 1.0, 3.5),
            span("c", "a", "strata.node.submit", "node", 4.0, 41.0),
            span("a", "", "strata.gateway.generate", "gateway", 0.0, 42.0),
            span("d", "c", "strata.worker.generate", "worker", 5.0, 40.0, status=2),
            span("e", "c", "strata.node.queue", "node", 4.5, 5.0),
        ]
    )
    assert format_trace(trace) == (
        f"trace {TRACE_ID}: 5 spans, 42.0 ms\n"
        " start  duration  span\n"
        "0.0 ms   42.0 ms  strata.gateway.generate [gateway]\n"
        "1.0 ms    2.5 ms    strata.scheduler.route [scheduler]\n"
        "4.0 ms   37.0 ms    strata.node.submit [node]\n"
        "4.5 ms    0.5 ms      strata.node.queue [node]\n"
        "5.0 ms   35.0 ms      strata.worker.generate [worker] ERROR"
    )


def test_span_whose_parent_was_not_recorded_is_shown_as_a_root() -> None:
    trace = metrics_pb2.Trace(
        spans=[
            span("a", "client-span", "strata.gateway.generate", "gateway", 0.0, 10.0),
            span("k", "lost", "strata.kv.load", "kvstore", 2.0, 2.25),
        ]
    )
    assert format_trace(trace) == (
        f"trace {TRACE_ID}: 2 spans, 10.0 ms\n"
        " start  duration  span\n"
        "0.0 ms   10.0 ms  strata.gateway.generate [gateway]\n"
        "2.0 ms    0.2 ms  strata.kv.load [kvstore]"
    )


def test_spans_in_a_parent_cycle_are_each_printed_once() -> None:
    trace = metrics_pb2.Trace(
        spans=[
            span("x", "y", "one", "svc", 0.0, 1.0),
            span("y", "x", "two", "svc", 0.5, 1.0),
        ]
    )
    assert format_trace(trace).splitlines()[2:] == [
        "0.0 ms    1.0 ms  one [svc]",
        "0.5 ms    0.5 ms    two [svc]",
    ]


def test_models_table_shows_context_and_memory_in_mib() -> None:
    models = [
        common_pb2.ModelInfo(
            name="smollm2-135m-instruct", context_length=8192, memory_bytes=150 * 2**20
        )
    ]
    assert format_models(models) == (
        "model                  context  memory_mib\nsmollm2-135m-instruct     8192       150.0"
    )
    assert format_models([]) == (
        "no models are loaded (the placement planner loads them; see STRATA_MODELS)"
    )


def test_summary_names_usage_finish_reason_and_trace_id() -> None:
    usage = common_pb2.Usage(prompt_tokens=12, completion_tokens=8, cached_prompt_tokens=4)
    assert format_summary(usage, common_pb2.FINISH_REASON_LENGTH, TRACE_ID) == (
        "usage: prompt_tokens=12 cached_prompt_tokens=4 completion_tokens=8 "
        "finish_reason=length\n"
        f"trace_id: {TRACE_ID}"
    )
    assert format_summary(common_pb2.Usage(), common_pb2.FINISH_REASON_STOP, "").endswith(
        "finish_reason=stop\ntrace_id: none"
    )
