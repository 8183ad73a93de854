"""The layered report through the Metrics API message and back (nothing lost, None stays
None), and its terminal rendering: layer tables, the modelled-energy label, --compare."""

from strata.core.records import NodeSampleRecord, RequestRecord, RunRecord
from strata.eval.layers import LayerSettings, layered_report
from strata.eval.report_codec import fill_report, from_report
from strata.eval.report_text import compare_text, report_text
from strata.v1 import metrics_pb2

T0 = 1_700_000_000_000


def rows(ttft: float) -> list[RequestRecord]:
    return [
        RequestRecord(
            request_id=f"r{i}",
            trace_id="0" * 32,
            tenant=t,
            model="m",
            start_unix_ms=T0 + 1000 * i,
            ttft_ms=ttft * (i + 1),
            tpot_ms=20.0,
            e2e_ms=500.0,
            queue_ms=None,
            prompt_tokens=100,
            completion_tokens=21,
            cached_tokens=0,
            finish_reason="stop",
            error_code="" if i < 2 else "INTERNAL",
            status_code=0,
            itl_p50_ms=18.0,
            itl_p95_ms=25.0,
            itl_p99_ms=40.0,
            run_id=3,
        )
        for i, t in enumerate(["a", "b", "b"])
    ]


SAMPLES = [
    NodeSampleRecord(
        node_id="node-0",
        unix_ms=T0 + t,
        utilization=0.25,
        batch_tokens=100,
        batch_budget=400,
        energy_joules=t / 10,
        energy_source="nvml",
        prompt_tokens=t,
        prefix_hit_tokens=t // 2,
        kv_blocks_evicted=t // 100,
        block_lifetime_sum_s=t / 100 * 1.5,
        block_lifetime_p50_s=1.25,
        block_lifetime_p99_s=4.0,
    )
    for t in (0, 1000, 2000, 3000, 9000, 10000)
]
RUN = RunRecord(3, "conv x0.5", "replay", T0, T0 + 10_000, '{"rate": 1}', '{"ok": 2}')


def report(ttft: float):
    return layered_report(rows(ttft), SAMPLES, {}, T0, T0 + 10_000, LayerSettings(), RUN)


def test_report_survives_the_message_and_back():
    original = report(100.0)
    message = fill_report(original, metrics_pb2.Report(spans_received=5))
    assert from_report(message) == original
    assert not message.request_layer.overall.HasField("queue_ms")  # None, not zeros
    assert message.run.client_summary_json == '{"ok": 2}'
    assert from_report(metrics_pb2.Report(tenants=[metrics_pb2.TenantReport(tenant="x")])) is None


def test_terminal_report_shows_the_three_layers():
    text = report_text(report(100.0))
    lines = text.splitlines()
    assert lines[0] == "run 3 'conv x0.5' (replay, finished)"
    # a's 21 output tokens against b's 42
    assert "fairness (Jain over tenants, output tokens / weight): 0.900" in lines
    assert "ITL: measured per request at the gateway" in lines
    node = next(line for line in lines if line.startswith("node-0"))
    assert node.split() == [
        "node-0",
        "6",
        "25.0%",
        "25.0%",
        "50.0%",
        "0.0%",
        "0",
        "0.0/0.0/0.0",
        "0.0/0.0/0.0",
        "0/0",
        "100",
        "1.50/1.25/4.00",
        "0",
        "1000.0",
        "100.0",
        "nvml",
    ]
    assert "throughput    0.20 req/s, 4.2 output tok/s, 20.0 input tok/s" in lines
    assert (
        "failures      node-0 down 6.0 s from 2023-11-14 22:13:23 UTC (max recovery 6.0 s)"
    ) in lines
    assert "MODELLED" not in text


def test_compare_puts_figures_side_by_side_with_the_change():
    text = compare_text(report(100.0), report(150.0), "3", "4")
    rows_by_name = {
        line.rsplit(None, 4)[0]: line.rsplit(None, 4)[1:] for line in text.splitlines()[3:]
    }
    assert rows_by_name["ttft p50 ms"] == ["150", "225", "+75", "+50.0%"]
    assert rows_by_name["errors"] == ["1", "1", "+0", "+0.0%"]
    assert rows_by_name["preemptions"] == ["0", "0", "+0", "-"]  # no change of nothing
    assert rows_by_name["blocks evicted"] == ["100", "100", "+0", "+0.0%"]
    assert rows_by_name["queue p99 ms"] == ["-", "-", "-", "-"]
    assert text.splitlines()[0].startswith("A = 3: run 3 'conv x0.5' (replay, finished); window")
