"""Evaluation runs and run-tagged request rows, identical on every store backend; an older
store gains the new columns on start."""

import pytest
from sqlalchemy import inspect, text

from strata.store.db import create_all, make_engine
from strata.store.report import request_rows, tenant_reports, tenant_sla_classes
from strata.store.runs import create_run, finish_run, get_run, list_runs
from strata.store.spans import SpanRecord, insert_spans, request_from_span
from strata.store.tenants import create_tenant
from strata.telemetry import names

pytest_plugins = ["tests.pg"]

T0_MS = 1_700_000_000_000


def span(n: int, tenant: str, run_id=None, **extra) -> SpanRecord:
    attrs = {
        names.TENANT: tenant,
        names.REQUEST_ID: f"req-{n}",
        names.TTFT_MS: 10.0 * n,
        names.TPOT_MS: 2.0,
        names.E2E_MS: 100.0,
        names.GEN_AI_USAGE_INPUT_TOKENS: 5,
        names.GEN_AI_USAGE_OUTPUT_TOKENS: 7,
        **extra,
    }
    if run_id is not None:
        attrs[names.RUN_ID] = run_id
    start = (T0_MS + n * 1000) * 1_000_000
    return SpanRecord(
        trace_id=f"{n:032x}",
        span_id=f"{n:016x}",
        parent_span_id="",
        name=names.SPAN_GATEWAY_GENERATE,
        service="gateway",
        start_unix_nano=start,
        end_unix_nano=start + 100_000_000,
        attributes=attrs,
    )


def test_run_id_and_itl_come_from_span_attributes():
    assert request_from_span(span(1, "a", 7)).run_id == 7
    assert request_from_span(span(1, "a", "12")).run_id == 12  # copied metadata text
    for bad in ("x", -3, 0, True, 2.5):
        assert request_from_span(span(1, "a", bad)).run_id is None
    assert request_from_span(span(1, "a")).run_id is None
    req = request_from_span(
        span(1, "a", **{names.ITL_P50_MS: 4.0, names.ITL_P95_MS: 6.5, names.ITL_P99_MS: 9.0})
    )
    assert (req.itl_p50_ms, req.itl_p95_ms, req.itl_p99_ms) == (4.0, 6.5, 9.0)


async def test_runs_are_created_finished_once_and_listed(store):
    async with store() as s:
        first = await create_run(s, "azure-conv x0.5", "replay", '{"rate": 2}', T0_MS)
        second = await create_run(s, "sweep", "", "", T0_MS + 5)
        assert (first.run_id, first.kind, first.finished_unix_ms) == (1, "replay", None)
        assert (second.kind, second.params_json) == ("manual", "{}")
        done = await finish_run(s, first.run_id, '{"ttft_p50_ms": 12}', T0_MS + 9000)
        again = await finish_run(s, first.run_id, '{"other": 1}', T0_MS + 99_000)
        assert await finish_run(s, 99, "", T0_MS) is None
        runs = await list_runs(s)
        assert await get_run(s, 42) is None
    assert (done.finished_unix_ms, done.client_summary_json) == (
        T0_MS + 9000,
        '{"ttft_p50_ms": 12}',
    )
    assert again == done  # a retried FinishRun changes nothing
    assert [(r.run_id, r.name, r.finished_unix_ms) for r in runs] == [
        (1, "azure-conv x0.5", T0_MS + 9000),
        (2, "sweep", None),
    ]


async def test_bad_run_input_is_refused_with_a_reason(store):
    async with store() as s:
        unnamed = await create_run(s, " ", "replay", "{}", T0_MS)
        assert unnamed.name == "replay 2023-11-14 22:13:20 UTC"
        with pytest.raises(ValueError, match="a run name must be at most 256 characters"):
            await create_run(s, "x" * 257, "replay", "{}", T0_MS)
        with pytest.raises(ValueError, match="kind must be one of replay, benchmark, manual"):
            await create_run(s, "x", "bench", "{}", T0_MS)
        with pytest.raises(ValueError, match="params_json must be a JSON object, got a list"):
            await create_run(s, "x", "replay", "[1]", T0_MS)
        run = await create_run(s, "x", "replay", "{}", T0_MS)
        with pytest.raises(ValueError, match="client_summary_json must be a JSON object"):
            await finish_run(s, run.run_id, "{not json", T0_MS)


async def test_request_rows_and_reports_filter_by_run(store):
    async with store() as s:
        await create_tenant(s, "a", sla_class="interactive")
        await insert_spans(s, [span(1, "a", 1), span(2, "a", 1), span(3, "b", 2), span(4, "b")])
        rows = await request_rows(s, run_id=1)
        late = await request_rows(s, since_unix_ms=T0_MS + 3000)
        every = await request_rows(s)
        per_tenant = await tenant_reports(s, run_id=2)
        classes = await tenant_sla_classes(s)
    assert [(r.request_id, r.run_id, r.ttft_ms) for r in rows] == [
        ("req-1", 1, 10.0),
        ("req-2", 1, 20.0),
    ]
    assert [r.request_id for r in late] == ["req-3", "req-4"]
    assert [r.run_id for r in every] == [1, 1, 2, None]
    assert [(t.tenant, t.requests) for t in per_tenant] == [("b", 1)]
    assert classes == {"a": "interactive"}


async def test_an_older_store_gains_the_new_columns_and_keeps_its_rows(store_url):
    engine = make_engine(store_url)
    try:
        async with engine.begin() as conn:
            await conn.execute(text("DROP TABLE IF EXISTS requests"))
            await conn.execute(text("DROP TABLE IF EXISTS runs"))
            await conn.execute(
                text(
                    "CREATE TABLE runs (id INTEGER PRIMARY KEY, name VARCHAR(256), "
                    "kind VARCHAR(64),"
                    " started_unix_ms BIGINT, finished_unix_ms BIGINT, params_json TEXT)"
                )
            )
            await conn.execute(text("INSERT INTO runs VALUES (5, 'old', 'manual', 1, NULL, '{}')"))
        await create_all(engine)
        await create_all(engine)  # a second start finds nothing to add
        async with engine.connect() as conn:
            columns = await conn.run_sync(
                lambda c: {col["name"] for col in inspect(c).get_columns("runs")}
            )
            indexes = await conn.run_sync(
                lambda c: {i["name"] for i in inspect(c).get_indexes("requests")}
            )
            old = (await conn.execute(text("SELECT name, client_summary_json FROM runs"))).all()
    finally:
        await engine.dispose()
    assert "client_summary_json" in columns
    assert "ix_requests_run_id" in indexes
    assert [tuple(r) for r in old] == [("old", None)]
