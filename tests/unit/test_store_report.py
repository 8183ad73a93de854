"""Per-tenant report over request rows, identical on every store backend."""

import pytest

from strata.core.stats import Summary
from strata.store.report import tenant_reports
from strata.store.spans import SpanRecord, insert_spans
from strata.telemetry import names

pytest_plugins = ["tests.pg"]

T0_MS = 1_700_000_000_000


def request_span(
    n: int,
    tenant: str,
    start_ms: int,
    ttft: float,
    tpot: float,
    e2e: float,
    prompt: int,
    completion: int,
    error: str = "",
) -> SpanRecord:
    attrs = {
        names.TENANT: tenant,
        names.REQUEST_ID: f"req-{n}",
        names.TTFT_MS: ttft,
        names.TPOT_MS: tpot,
        names.E2E_MS: e2e,
        names.GEN_AI_USAGE_INPUT_TOKENS: prompt,
        names.GEN_AI_USAGE_OUTPUT_TOKENS: completion,
        names.CACHED_TOKENS: 8,
    }
    if error:
        attrs[names.ERROR_CODE] = error
    start_ns = (T0_MS + start_ms) * 1_000_000
    return SpanRecord(
        trace_id=f"{n:032x}",
        span_id=f"{n:016x}",
        parent_span_id="",
        name=names.SPAN_GATEWAY_GENERATE,
        service="gateway",
        start_unix_nano=start_ns,
        end_unix_nano=start_ns + int(e2e * 1e6),
        attributes=attrs,
    )


@pytest.fixture
async def filled(store):
    spans = [
        request_span(1, "acme", 0, ttft=10, tpot=1.0, e2e=100, prompt=10, completion=5),
        request_span(2, "acme", 1000, ttft=20, tpot=2.0, e2e=200, prompt=20, completion=6),
        request_span(3, "acme", 2000, ttft=30, tpot=3.0, e2e=300, prompt=30, completion=7),
        request_span(4, "acme", 3000, ttft=40, tpot=4.0, e2e=400, prompt=40, completion=8),
        request_span(
            5,
            "acme",
            4000,
            ttft=999,
            tpot=999,
            e2e=999,
            prompt=50,
            completion=0,
            error="DEADLINE_EXCEEDED",
        ),
        request_span(6, "beta", 500, ttft=7, tpot=0.5, e2e=70, prompt=3, completion=2),
    ]
    async with store() as s:
        await insert_spans(s, spans)
    return store


async def test_report_per_tenant_with_errors_outside_latency(filled):
    async with filled() as s:
        acme, beta = await tenant_reports(s)
    assert (acme.tenant, acme.requests, acme.errors) == ("acme", 5, 1)
    # Latency over the 4 successful requests; tokens over all 5.
    assert acme.ttft_ms.p50 == 25.0
    assert acme.ttft_ms.p95 == pytest.approx(38.5, abs=1e-9)
    assert acme.ttft_ms.p99 == pytest.approx(39.7, abs=1e-9)
    assert acme.ttft_ms.mean == 25.0
    assert acme.tpot_ms.p50 == 2.5
    assert acme.e2e_ms.p50 == 250.0 and acme.e2e_ms.count == 4
    assert (acme.prompt_tokens, acme.completion_tokens, acme.cached_tokens) == (150, 26, 40)
    assert beta.requests == 1 and beta.errors == 0
    assert beta.ttft_ms == Summary(p50=7.0, p95=7.0, p99=7.0, mean=7.0, count=1)


async def test_report_filters_by_tenant_and_start_time(filled):
    async with filled() as s:
        only_beta = await tenant_reports(s, tenant="beta")
        late = await tenant_reports(s, since_unix_ms=T0_MS + 2000)
        nobody = await tenant_reports(s, tenant="ghost")
    assert [r.tenant for r in only_beta] == ["beta"]
    assert [(r.tenant, r.requests, r.errors) for r in late] == [("acme", 3, 1)]
    assert late[0].ttft_ms.p50 == 35.0
    assert nobody == []


async def test_tenant_whose_requests_all_failed_has_no_latency(store):
    async with store() as s:
        await insert_spans(
            s,
            [
                request_span(
                    9, "gamma", 0, ttft=1, tpot=1, e2e=5, prompt=4, completion=0, error="INTERNAL"
                )
            ],
        )
        (gamma,) = await tenant_reports(s)
    assert (gamma.requests, gamma.errors, gamma.prompt_tokens) == (1, 1, 4)
    assert gamma.ttft_ms is None and gamma.tpot_ms is None and gamma.e2e_ms is None
