"""Isolation figures: per-tenant tails and attainment, refusals, Jain over served fractions,
victims' P99 inflation inside the aggressor's bursts, utilization."""

from __future__ import annotations

import pytest

from strata.core.records import NodeSampleRecord, RequestRecord
from strata.core.sla import SlaTable
from strata.eval.isolation import isolation_figures, utilization


def row(
    tenant: str,
    start_ms: int,
    ttft: float | None,
    e2e: float,
    tokens: int = 10,
    error: str = "",
    tpot: float | None = 10.0,
) -> RequestRecord:
    return RequestRecord(
        request_id=f"{tenant}{start_ms}",
        trace_id="",
        tenant=tenant,
        model="m",
        start_unix_ms=start_ms,
        ttft_ms=ttft,
        tpot_ms=tpot,
        e2e_ms=e2e,
        queue_ms=0.0,
        prompt_tokens=5,
        completion_tokens=0 if error else tokens,
        cached_tokens=0,
        finish_reason="" if error else "length",
        error_code=error,
        status_code=0,
    )


def test_figures_of_a_run_with_an_aggressor_burst():
    rows = [
        row("chat", 100, 100.0, 300.0),
        row("chat", 200, 120.0, 320.0),
        row("chat", 1100, 300.0, 900.0),  # inside the burst
        row("agg", 1050, 50.0, 200.0),
        row("agg", 1060, None, 0.0, error="RESOURCE_EXHAUSTED"),
        row("agg", 1070, None, 5.0, error="UNAVAILABLE"),
    ]
    samples = [
        NodeSampleRecord("g0", 0, utilization=0.8),
        NodeSampleRecord("g0", 1, utilization=1.0),
        NodeSampleRecord("g1", 0, utilization=0.6),
    ]
    f = isolation_figures(
        rows,
        samples,
        {"chat": "interactive", "agg": "standard"},
        {"chat": 30, "agg": 40},
        SlaTable(),
        "agg",
        [(1000.0, 2000.0)],
    )
    chat, agg = f.tenant("chat"), f.tenant("agg")
    assert (chat.requests, chat.refused, chat.failed, agg.refused, agg.failed) == (3, 0, 0, 1, 1)
    assert chat.ttft_p99_ms == pytest.approx(296.4)  # of 100, 120, 300
    assert chat.attainment == 1.0 and agg.attainment == pytest.approx(1 / 3)
    assert (chat.served_fraction, agg.served_fraction) == (1.0, 0.25)
    assert f.jain == pytest.approx((1.25**2) / (2 * (1 + 0.0625)))
    assert f.worst_ttft_p99_ms == pytest.approx(296.4)
    # chat inside the burst: 300 / P99(100, 120) = 300 / 119.8
    assert f.victim_ttft_inflation == pytest.approx(300 / 119.8)
    assert f.victim_e2e_inflation == pytest.approx(900 / 319.8)
    assert f.utilization == pytest.approx((0.9 + 0.6) / 2)


def test_no_samples_or_no_quiet_requests_give_none():
    assert utilization([]) is None
    f = isolation_figures(
        [row("chat", 1500, 10.0, 20.0)], [], {}, {}, SlaTable(), "agg", [(1000.0, 2000.0)]
    )
    assert (f.victim_ttft_inflation, f.utilization) == (None, None)


def test_best_effort_tenants_absorb_bursts_without_counting_as_victims():
    rows = [
        row("chat", 100, 100.0, 300.0),
        row("chat", 1100, 110.0, 330.0),
        row("bulk", 200, 50.0, 100.0),
        row("bulk", 1200, 5000.0, 9000.0),
    ]
    f = isolation_figures(
        rows,
        [],
        {"chat": "interactive", "bulk": "batch"},
        {},
        SlaTable(),
        "agg",
        [(1000.0, 2000.0)],
    )
    assert f.victim_ttft_inflation == pytest.approx(1.1)
    assert f.tenant("bulk").ttft_inflation == pytest.approx(100.0)  # reported, not judged
    assert f.worst_ttft_p99_ms == pytest.approx(109.9)  # best effort: not judged
