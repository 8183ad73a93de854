"""Arrivals per model and window aggregated in SQL, identical on every store backend."""

from strata.policy.placement.curves import DAY_S, WindowGrid
from strata.store.arrivals import ModelArrivals, arrivals
from strata.store.spans import SpanRecord, insert_spans
from strata.telemetry import names

pytest_plugins = ["tests.pg"]

T0_S = 1_700_006_400  # a UTC midnight (19676 days after the epoch)


def request(
    n: int, model: str, tenant: str, at_s: float, prompt: int, output: int, error: str = ""
) -> SpanRecord:
    attrs = {
        names.TENANT: tenant,
        names.REQUEST_ID: f"req-{n}",
        names.GEN_AI_REQUEST_MODEL: model,
        names.E2E_MS: 10.0,
        names.GEN_AI_USAGE_INPUT_TOKENS: prompt,
        names.GEN_AI_USAGE_OUTPUT_TOKENS: output,
    }
    if error:
        attrs[names.ERROR_CODE] = error
    start_ns = int(at_s * 1e9)
    return SpanRecord(
        trace_id=f"{n:032x}",
        span_id=f"{n:016x}",
        parent_span_id="",
        name=names.SPAN_GATEWAY_GENERATE,
        service="gateway",
        start_unix_nano=start_ns,
        end_unix_nano=start_ns + 10_000_000,
        attributes=attrs,
    )


async def test_recent_windows_count_every_arrival_and_average_succeeded_tokens(store):
    async with store() as s:
        await insert_spans(
            s,
            [
                request(1, "a", "acme", T0_S + 0.0, 100, 10),
                request(2, "a", "beta", T0_S + 59.999, 300, 30),
                request(3, "a", "acme", T0_S + 60.0, 999, 0, error="DEADLINE_EXCEEDED"),
                request(4, "b", "acme", T0_S + 179.0, 8, 2),
                request(5, "a", "acme", T0_S - 0.001, 1, 1),  # before the span
                request(6, "a", "acme", T0_S + 180.0, 1, 1),  # the end is exclusive
            ],
        )
        got = await arrivals(s, WindowGrid.recent(60, 3, T0_S + 180))
    assert got == [
        ModelArrivals("a", (2, 1, 0), (200.0, 0.0, 0.0), (20.0, 0.0, 0.0), ("acme", "beta")),
        ModelArrivals("b", (0, 0, 1), (0.0, 0.0, 8.0), (0.0, 0.0, 2.0), ("acme",)),
    ]


async def test_daily_windows_fold_days_by_time_of_day(store):
    async with store() as s:
        await insert_spans(
            s,
            [
                request(1, "m", "t", T0_S + 3600, 10, 1),  # day 0, morning
                request(2, "m", "t", T0_S + DAY_S + 7200, 20, 2),  # day 1, morning
                request(3, "m", "t", T0_S + DAY_S + DAY_S / 2 + 5, 30, 3),  # day 1, afternoon
            ],
        )
        [m] = await arrivals(s, WindowGrid(DAY_S / 2, T0_S, T0_S + 2 * DAY_S, daily=True))
    assert (m.requests, m.prompt_mean) == ((2, 1), (15.0, 30.0))


async def test_no_rows_no_curves(store):
    async with store() as s:
        assert await arrivals(s, WindowGrid.recent(60, 2, T0_S)) == []


async def test_burst_slices_counted_in_sql(store):
    async with store() as s:
        await insert_spans(
            s,
            [request(i, "a", "t", T0_S + 1 + i, 10, 1) for i in range(3)]
            + [request(10 + i, "a", "t", T0_S + 31 + i / 10, 10, 1) for i in range(5)]
            + [
                request(20, "a", "t", T0_S + 95, 10, 1, error="UNAVAILABLE"),
                request(21, "b", "t", T0_S + 100, 10, 1),
            ],
        )
        got = await arrivals(s, WindowGrid.recent(60, 2, T0_S + 120), burst_s=15)
        plain = await arrivals(s, WindowGrid.recent(60, 2, T0_S + 120))
    assert [(m.model, m.requests, m.burst_requests) for m in got] == [
        ("a", (8, 1), (5, 1)),
        ("b", (0, 1), (0, 1)),
    ]
    assert all(m.burst_requests == () for m in plain)
