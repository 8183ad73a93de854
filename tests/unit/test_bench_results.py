"""Engine benchmark results: JSON round trips, derived rates, per-rate latency summaries."""

import pytest

from benchmarks.engine.online import summarize_rate
from benchmarks.engine.results import LatencySummary, OfflineResult, RateResult
from benchmarks.engine.runner_cli import check_lengths
from strata.eval.client_metrics import ClientRecord


def test_offline_result_round_trip_and_rate():
    r = OfflineResult(
        system="strata",
        dtype="float32",
        mode="batch",
        requests=2,
        prompt_tokens=256,
        output_tokens=256,
        seconds=2.0,
        setup="s",
        token_ids=[[1], [2]],
    )
    d = r.to_dict()
    assert d["output_tok_s"] == 128.0
    assert OfflineResult.from_dict(d) == r


def test_rate_result_round_trip():
    s = LatencySummary(1.0, 2.0, 3.0, 1.5, 2)
    r = RateResult(
        rate=4.0,
        sent=3,
        completed=2,
        cancelled=1,
        failed=0,
        seconds=4.0,
        output_tokens=40,
        ttft_ms=s,
        tpot_ms=None,
        e2e_ms=s,
    )
    d = r.to_dict()
    assert (d["achieved_req_s"], d["output_tok_s"]) == (0.5, 10.0)
    assert RateResult.from_dict(d) == r


def _rec(index, status, tokens, ttft, e2e):
    return ClientRecord(
        index=index,
        tenant="bench",
        scheduled_s=float(index),
        sent_s=float(index),
        synth_prompt_tokens=10,
        max_tokens=tokens,
        status=status,
        output_tokens=tokens,
        ttft_s=ttft,
        e2e_s=e2e,
    )


def test_summarize_rate_uses_completed_requests_and_counts_the_rest():
    records = [
        _rec(0, "OK", 11, 0.1, 1.1),  # TPOT (1.1 - 0.1) / 10 = 100 ms
        _rec(1, "OK", 5, 0.3, 0.7),  # TPOT 100 ms
        _rec(2, "OK", 1, 0.2, 0.2),  # one token: no TPOT
        _rec(3, "CANCELLED", 7, 0.5, None),  # still streaming when the drain ended
        _rec(4, "UNAVAILABLE", 0, None, None),
        _rec(5, "NOT_SENT", 0, None, None),
    ]
    r = summarize_rate(1.0, records, seconds=8.0)
    assert (r.sent, r.completed, r.cancelled, r.failed) == (6, 3, 1, 1)
    assert r.output_tokens == 24 and r.output_tok_s == 3.0
    assert r.ttft_ms == LatencySummary(p50=200.0, p95=290.0, p99=298.0, mean=200.0, count=3)
    assert r.tpot_ms.count == 2 and r.tpot_ms.p50 == pytest.approx(100.0)
    assert r.e2e_ms.p50 == pytest.approx(700.0) and r.e2e_ms.count == 3


def test_summarize_rate_with_nothing_completed():
    r = summarize_rate(8.0, [_rec(0, "CANCELLED", 3, 0.5, None)], seconds=30.0)
    assert (r.completed, r.ttft_ms, r.tpot_ms, r.e2e_ms) == (0, None, None, None)


def test_short_outputs_are_rejected():
    check_lengths("x", [[1, 2], [3, 4]], 2)
    with pytest.raises(
        RuntimeError,
        match="x: 1 requests did not produce exactly 2 tokens "
        r"\(first: request 1 with 1\)",
    ):
        check_lengths("x", [[1, 2], [3]], 2)
