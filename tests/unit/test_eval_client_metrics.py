"""Client-side metrics math: TPOT per request, pooled ITLs, percentiles, throughput, errors."""

from __future__ import annotations

import pytest

from strata.core.stats import Summary
from strata.eval.client_metrics import ClientRecord, format_summary, summarize_run


def record(index: int, **kw) -> ClientRecord:
    base = dict(
        index=index,
        tenant="demo",
        scheduled_s=float(index),
        sent_s=float(index),
        synth_prompt_tokens=10,
        max_tokens=5,
    )
    return ClientRecord(**{**base, **kw})


RECORDS = [
    record(
        0,
        ttft_s=0.1,
        e2e_s=0.5,
        itl_s=[0.1, 0.1, 0.1, 0.1],
        output_tokens=5,
        prompt_tokens=10,
        cached_tokens=4,
        finished_s=0.5,
    ),
    record(
        1,
        sent_s=1.02,
        ttft_s=0.3,
        e2e_s=0.9,
        itl_s=[0.2, 0.4],
        output_tokens=4,
        prompt_tokens=11,
        finished_s=1.92,
    ),
    record(2, ttft_s=0.2, e2e_s=0.2, output_tokens=1, prompt_tokens=10, finished_s=2.2),
    record(3, sent_s=3.005, status="DEADLINE_EXCEEDED", error="deadline", finished_s=4.0),
    record(4, status="UNAVAILABLE", ttft_s=0.1, output_tokens=2, finished_s=4.5),
]


def test_tpot_needs_two_tokens_and_success():
    assert RECORDS[0].tpot_s == pytest.approx(0.1)  # (0.5 - 0.1) / 4
    assert RECORDS[1].tpot_s == pytest.approx(0.2)  # (0.9 - 0.3) / 3
    assert RECORDS[2].tpot_s is None  # one token: no per-token time
    assert RECORDS[4].tpot_s is None
    assert RECORDS[1].late_s == pytest.approx(0.02)


def test_summary_of_a_run():
    s = summarize_run(RECORDS, duration_s=5.0)
    assert (s.requests, s.succeeded, s.failed) == (5, 3, 2)
    assert s.errors == {"DEADLINE_EXCEEDED": 1, "UNAVAILABLE": 1}
    assert (s.prompt_tokens, s.output_tokens, s.cached_tokens) == (31, 10, 4)
    assert s.request_throughput == pytest.approx(0.6)
    assert s.output_throughput == pytest.approx(2.0)
    assert s.total_token_throughput == pytest.approx(8.2)
    assert (s.late_starts, s.max_late_s) == (1, pytest.approx(0.02))
    assert s.prompt_token_mismatches == 1  # the server counted 11, not 10
    assert s.ttft_ms == Summary(
        p50=pytest.approx(200.0),
        p95=pytest.approx(290.0),
        p99=pytest.approx(298.0),
        mean=pytest.approx(200.0),
        count=3,
    )
    assert s.tpot_ms == Summary(
        p50=pytest.approx(150.0),
        p95=pytest.approx(195.0),
        p99=pytest.approx(199.0),
        mean=pytest.approx(150.0),
        count=2,
    )
    # ITLs of successful requests pooled: [100 x4, 200, 400]
    assert s.itl_ms == Summary(
        p50=pytest.approx(100.0),
        p95=pytest.approx(350.0),
        p99=pytest.approx(390.0),
        mean=pytest.approx(1000.0 / 6),
        count=6,
    )
    assert s.e2e_ms.p50 == pytest.approx(500.0) and s.e2e_ms.count == 3
    assert s.to_json()["failed"] == 2
    assert s.to_json()["ttft_ms"]["count"] == 3


def test_summary_with_no_success_has_no_latencies():
    s = summarize_run([RECORDS[3]], duration_s=0.0)
    assert (s.succeeded, s.request_throughput, s.ttft_ms, s.itl_ms) == (0, 0.0, None, None)
    assert format_summary(s).splitlines()[0] == (
        "requests    1 sent, 0 ok, 1 failed (DEADLINE_EXCEEDED 1)"
    )
    assert format_summary(s).splitlines()[-1] == (
        "e2e            -         -         -         -       0"
    )


def test_table():
    assert format_summary(summarize_run(RECORDS[:2], duration_s=2.0)) == "\n".join(
        [
            "requests    2 sent, 2 ok, 0 failed",
            "duration    2.00 s",
            "throughput  1.00 req/s, 4.5 output tok/s, 15.0 total tok/s",
            "tokens      21 prompt (4 cached), 9 output; the server counted 1 prompt(s) at another "
            "length than synthesized",
            "late starts 1 (> 10 ms; max 20.0 ms)",
            "",
            "ms           p50       p95       p99      mean       n",
            "ttft       200.0     290.0     298.0     200.0       2",
            "tpot       150.0     195.0     199.0     150.0       2",
            "itl        100.0     350.0     390.0     166.7       6",
            "e2e        700.0     880.0     896.0     700.0       2",
        ]
    )
