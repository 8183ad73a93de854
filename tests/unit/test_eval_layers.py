"""Request, node and cluster layers on hand-made rows: exact SLA attainment, goodput, Jain's
index, ITL rules, pro-rated counters and hit rates, energy, cost and failure recovery."""

import pytest

from strata.core.records import NodeSampleRecord, RequestRecord, RunRecord
from strata.core.sla import SlaClass, SlaTable
from strata.eval.layers import (
    LayerSettings,
    cluster_layer,
    jain_index,
    layered_report,
    report_window,
    request_layer,
)
from strata.eval.node_layer import downsample, node_layer, outages

T0 = 1_700_000_000_000


def req(
    n: int,
    tenant: str,
    ttft: float,
    tpot: float,
    completion: int,
    *,
    start: int = 0,
    e2e: float = 1000.0,
    error: str = "",
    itl: tuple | None = None,
    queue: float | None = None,
    prompt: int = 10,
) -> RequestRecord:
    p50, p95, p99 = itl if itl else (None, None, None)
    return RequestRecord(
        request_id=f"r{n}",
        trace_id=f"{n:032x}",
        tenant=tenant,
        model="m",
        start_unix_ms=T0 + start,
        ttft_ms=ttft,
        tpot_ms=tpot,
        e2e_ms=e2e,
        queue_ms=queue,
        prompt_tokens=prompt,
        completion_tokens=completion,
        cached_tokens=0,
        finish_reason="stop",
        error_code=error,
        status_code=0,
        itl_p50_ms=p50,
        itl_p95_ms=p95,
        itl_p99_ms=p99,
    )


CLASSES = {"chat": "interactive", "api": "standard", "bulk": "batch"}
ROWS = [
    req(1, "chat", ttft=100, tpot=50, completion=10),  # attains interactive
    req(2, "chat", ttft=600, tpot=50, completion=10),  # TTFT over 500
    req(3, "chat", ttft=100, tpot=150, completion=10),  # TPOT over 100
    req(4, "chat", ttft=1, tpot=1, completion=0, error="DEADLINE_EXCEEDED"),
    req(5, "api", ttft=1500, tpot=150, completion=20),  # attains standard
    req(6, "api", ttft=2500, tpot=10, completion=20),  # TTFT over 2000
    req(7, "bulk", ttft=9000, tpot=900, completion=30),  # best-effort: attains
    req(8, "bulk", ttft=1, tpot=1, completion=0, error="UNAVAILABLE"),
    req(9, "ghost", ttft=1000, tpot=0.0, completion=1),  # unknown tenant: standard; 1 token
]


def test_jain_index():
    assert jain_index([5.0, 5.0, 5.0]) == 1.0
    assert jain_index([8.0, 0.0, 0.0, 0.0]) == 0.25
    assert jain_index([1.0, 3.0]) == pytest.approx(16 / 20)
    assert jain_index([]) is None
    assert jain_index([0.0, 0.0]) is None


def test_sla_attainment_goodput_and_fairness_per_tenant_and_class():
    settings = LayerSettings(tenant_weights={"chat": 2.0})
    layer = request_layer(ROWS, CLASSES, settings, window_s=10.0)
    o = layer.overall
    assert (o.requests, o.errors, o.attained) == (9, 2, 4)  # r1, r5, r7, r9
    assert o.attainment == pytest.approx(4 / 9)
    assert o.goodput_rps == pytest.approx(0.4)
    assert o.goodput_tokens_per_s == pytest.approx((10 + 20 + 30 + 1) / 10)
    classes = {g.key: (g.requests, g.attained, g.attainment) for g in layer.sla_classes}
    assert classes == {
        "interactive": (4, 1, 0.25),
        "standard": (3, 2, pytest.approx(2 / 3)),
        "batch": (2, 1, 0.5),
    }
    tenants = {g.key: (g.sla_class, g.weight, g.completion_tokens) for g in layer.tenants}
    assert tenants == {
        "api": ("standard", 1.0, 40),
        "bulk": ("batch", 1.0, 30),
        "chat": ("interactive", 2.0, 30),
        "ghost": ("standard", 1.0, 1),
    }
    # x = output tokens / weight = [40, 30, 15, 1]
    assert layer.fairness_jain == pytest.approx(86**2 / (4 * (1600 + 900 + 225 + 1)))
    chat = next(g for g in layer.tenants if g.key == "chat")
    assert (chat.ttft_ms.p50, chat.ttft_ms.count) == (100.0, 3)  # failures excluded
    assert chat.ttft_ms.p95 == pytest.approx(550.0)
    # Unknown classes are listed with the default's targets.
    assert [(t.name, t.ttft_ms, t.tpot_ms) for t in layer.sla_targets] == [
        ("interactive", 500.0, 100.0),
        ("standard", 2000.0, 200.0),
        ("batch", None, None),
    ]


def test_custom_sla_table_changes_who_attains():
    table = SlaTable([SlaClass("standard", 700.0, None)])
    layer = request_layer(ROWS, {}, LayerSettings(sla=table), window_s=9.0)
    # Everyone is standard now: TTFT <= 700 and no TPOT target: r1, r2, r3 (r9: 1000 ms).
    assert layer.overall.attained == 3
    assert [g.key for g in layer.sla_classes] == ["standard"]


def test_one_token_answers_have_no_tpot_or_itl():
    layer = request_layer([ROWS[8]], {}, LayerSettings(), window_s=1.0)
    assert layer.overall.tpot_ms is None and layer.overall.itl_ms is None
    assert layer.itl_source == "none"
    assert layer.overall.attained == 1


def test_itl_takes_rank_matched_percentiles_and_tpot_stands_in_when_missing():
    rows = [
        req(1, "a", 10, 7, 5, itl=(5.0, 8.0, 20.0)),
        req(2, "a", 10, 9, 5, itl=(6.0, 9.0, 30.0)),
        req(3, "a", 10, 150, 5),
    ]
    layer = request_layer(rows, {}, LayerSettings(), window_s=1.0)
    itl = layer.overall.itl_ms
    assert itl.p50 == 6.0  # P50 of [5, 6, 150]
    assert itl.p95 == pytest.approx(9 + 0.9 * 141)  # P95 of [8, 9, 150]
    assert itl.p99 == pytest.approx(30 + 0.98 * 120)  # P99 of [20, 30, 150]
    assert itl.mean == pytest.approx((5 + 6 + 150) / 3)
    assert layer.itl_source == "mixed"
    assert request_layer(rows[:2], {}, LayerSettings(), 1.0).itl_source == "gateway"
    assert request_layer(rows[2:], {}, LayerSettings(), 1.0).itl_source == "tpot"


def test_queue_time_and_cdfs_per_tenant():
    rows = [req(i, "a", ttft=10 * i, tpot=1, completion=3, queue=float(i)) for i in range(1, 6)]
    layer = request_layer(rows, {}, LayerSettings(), window_s=1.0)
    assert layer.overall.queue_ms.p50 == 3.0
    ttft = next(c for c in layer.cdfs if c.metric == "ttft_ms")
    assert (ttft.group, ttft.values[0], ttft.values[25], ttft.values[-1]) == ("a", 10, 30, 50)
    assert len(ttft.values) == len(layer.cdf_quantiles) == 51
    assert {c.metric for c in layer.cdfs} == {"ttft_ms", "tpot_ms", "e2e_ms"}


def sample(node: str, t: int, **fields) -> NodeSampleRecord:
    return NodeSampleRecord(node_id=node, unix_ms=T0 + t, **fields)


NODE0 = [
    sample(
        "node-0",
        0,
        prompt_tokens=0,
        prefix_hit_tokens=0,
        tier_hit_tokens=0,
        energy_joules=0,
        preemptions=0,
        utilization=0.9,
        batch_tokens=10,
        batch_budget=10,
    ),
    sample(
        "node-0",
        2000,
        prompt_tokens=100,
        prefix_hit_tokens=50,
        tier_hit_tokens=0,
        energy_joules=200,
        preemptions=2,
        utilization=0.4,
        batch_tokens=1000,
        batch_budget=2000,
        kv_blocks_device_used=10,
        kv_blocks_device_total=64,
        kv_blocks_host=5,
        waiting=1,
        running=2,
        power_watts=100,
        energy_source="rapl",
    ),
    sample(
        "node-0",
        4000,
        prompt_tokens=300,
        prefix_hit_tokens=150,
        tier_hit_tokens=100,
        energy_joules=400,
        preemptions=3,
        utilization=0.8,
        batch_tokens=1500,
        batch_budget=2000,
        kv_blocks_device_used=30,
        kv_blocks_device_total=64,
        kv_blocks_host=9,
        waiting=3,
        running=4,
        power_watts=100,
        energy_source="rapl",
    ),
    sample(
        "node-0",
        6000,
        prompt_tokens=600,
        prefix_hit_tokens=150,
        tier_hit_tokens=200,
        energy_joules=600,
        preemptions=3,
        utilization=0.2,
        batch_tokens=500,
        batch_budget=2000,
        kv_blocks_device_used=20,
        kv_blocks_device_total=64,
        kv_blocks_host=7,
        waiting=5,
        running=6,
        power_watts=100,
        energy_source="rapl",
    ),
]


def test_node_figures_pro_rate_the_interval_that_crosses_the_window_start():
    (n,), series = (lambda layer: (layer.nodes, layer.series))(
        node_layer(NODE0, T0 + 1000, T0 + 6000)
    )
    assert n.samples == 3
    assert n.prompt_tokens == 50 + 200 + 300  # half of the first interval
    assert n.prefix_hit_tokens == 25 + 100 + 0
    assert n.tier_hit_tokens == 0 + 100 + 100
    assert n.prefix_hit_rate == pytest.approx(125 / 550)
    assert n.tier_hit_rate == pytest.approx(200 / 550)
    assert (n.batch_tokens, n.batch_budget) == (500 + 1500 + 500, 1000 + 2000 + 2000)
    assert n.batch_utilization == 0.5
    assert n.utilization == pytest.approx((1 * 0.4 + 2 * 0.8 + 2 * 0.2) / 5)
    assert n.preemptions == 1 + 1 + 0
    assert n.energy_joules == 500.0
    assert n.mean_power_watts == 100.0
    assert (n.kv_blocks_device_used_max, n.kv_blocks_device_used_mean) == (30, 20.0)
    assert (n.kv_blocks_device_total, n.kv_blocks_host_max) == (64, 9)
    assert (n.waiting.p50, n.running.p99) == (3.0, pytest.approx(5.96))
    assert n.energy_source == "rapl"
    kv = next(s for s in series if s.name == "kv_blocks_device_used")
    assert (kv.node_id, kv.unix_ms, kv.values) == (
        "node-0",
        [T0 + 2000, T0 + 4000, T0 + 6000],
        [10.0, 30.0, 20.0],
    )


def test_a_counter_that_went_down_restarted_from_zero():
    samples = [
        sample("n", t, prompt_tokens=v, energy_joules=float(v), energy_source="model")
        for t, v in ((0, 500), (1000, 700), (2000, 100), (3000, 300))
    ]
    (n,) = node_layer(samples, T0, T0 + 3000).nodes
    assert n.prompt_tokens == 200 + 100 + 200
    assert n.energy_joules == 500.0
    assert n.prefix_hit_rate == 0.0


def test_block_lifetime_mean_is_lifetime_growth_over_evictions_across_a_restart():
    samples = [
        sample(
            "n",
            t,
            kv_blocks_evicted=c,
            block_lifetime_sum_s=total,
            block_lifetime_p50_s=p50,
            block_lifetime_p99_s=p99,
        )
        for t, c, total, p50, p99 in (
            (0, 0, 0.0, 0.0, 0.0),
            (1000, 10, 20.0, 1.5, 3.0),
            (2000, 30, 100.0, 2.5, 6.0),
            (3000, 4, 2.0, 0.5, 0.75),
        )
    ]  # restarted
    (n,) = node_layer(samples, T0 + 500, T0 + 3000).nodes
    assert n.kv_blocks_evicted == 5 + 20 + 4  # half of the first interval
    assert n.block_lifetime_mean_s == (10.0 + 80.0 + 2.0) / 29
    assert (n.block_lifetime_p50_s, n.block_lifetime_p99_s) == (0.5, 0.75)  # the last sample's
    # Nothing evicted in the window: no lifetime, even though older percentiles exist.
    (quiet,) = node_layer(
        samples[1:2]
        + [
            sample(
                "n", 5000, kv_blocks_evicted=10, block_lifetime_sum_s=20.0, block_lifetime_p50_s=1.5
            )
        ],
        T0 + 1000,
        T0 + 5000,
    ).nodes
    assert quiet.kv_blocks_evicted == 0
    assert (
        quiet.block_lifetime_mean_s,
        quiet.block_lifetime_p50_s,
        quiet.block_lifetime_p99_s,
    ) == (None, None, None)


def test_cluster_throughput_energy_cost_and_no_failures():
    rows = [
        req(1, "a", 10, 1, 100, start=1000, e2e=500, prompt=40),
        req(2, "a", 10, 1, 300, start=2000, e2e=500, prompt=60),
        req(3, "a", 10, 1, 0, start=3000, e2e=10, error="INTERNAL"),
    ]
    settings = LayerSettings(price_per_kwh=0.2, price_per_node_hour=3.6)
    start, end = T0 + 1000, T0 + 6000
    node = node_layer(NODE0, start, end)
    c = cluster_layer(rows, node, NODE0, start, end, settings)
    assert (c.duration_s, c.requests, c.errors) == (5.0, 3, 1)
    assert c.requests_per_s == 0.4
    assert (c.output_tokens_per_s, c.input_tokens_per_s) == (80.0, 20.0)
    assert c.energy_kwh == pytest.approx(500 / 3.6e6)
    assert (c.energy_sources, c.energy_modelled) == (["rapl"], False)
    assert c.node_hours == pytest.approx(5 / 3600)
    cost = 500 / 3.6e6 * 0.2 + 5 / 3600 * 3.6
    assert c.cost_usd == pytest.approx(cost)
    assert c.cost_per_1m_output_tokens == pytest.approx(cost / 400 * 1e6)
    assert c.kwh_per_1m_output_tokens == pytest.approx(500 / 3.6e6 / 400 * 1e6)
    assert c.utilization == pytest.approx(0.48)
    assert (c.outages, c.max_recovery_s) == ([], None)
    rps = next(s for s in c.series if s.name == "requests_per_s")
    assert len(rps.values) == 5 and sum(rps.values) == 2.0  # 1 s buckets, 2 successes


def test_failure_recovery_time_from_sample_gaps():
    samples = [sample("a", t) for t in (0, 2000, 4000, 14000, 16000, 18000)]
    samples += [sample("b", t) for t in (0, 2000, 4000, 6000)]
    samples += [sample("gone", t) for t in (-9000, -7000, -5000)]  # before the window
    found = outages(samples, T0, T0 + 18000, gap_factor=3.0)
    assert [
        (o.node_id, o.last_sample_unix_ms - T0, o.next_sample_unix_ms, o.recovery_s) for o in found
    ] == [("a", 4000, T0 + 14000, 10.0), ("b", 6000, 0, None)]
    c = cluster_layer(
        [], node_layer(samples, T0, T0 + 18000), samples, T0, T0 + 18000, LayerSettings()
    )
    assert c.max_recovery_s == 10.0


def test_modelled_energy_is_flagged():
    samples = [
        sample("n", 0, energy_source="model"),
        sample("n", 1000, energy_joules=50.0, energy_source="model"),
    ]
    report = layered_report([], samples, {}, T0, T0 + 1000, LayerSettings())
    assert report.cluster.energy_modelled is True
    assert report.cluster.energy_kwh == pytest.approx(50 / 3.6e6)
    assert report.cluster.cost_per_1m_output_tokens is None  # no tokens to divide by


def test_report_window_rules():
    run = RunRecord(7, "r", "replay", T0, None, "{}", None)
    assert report_window(run, [], 0, None, now_unix_ms=T0 + 50) == (T0, T0 + 50)
    run.finished_unix_ms = T0 + 30
    assert report_window(run, ROWS, 0, None, now_unix_ms=T0 + 50) == (T0, T0 + 30)
    rows = [req(1, "a", 1, 1, 2, start=100, e2e=50.2), req(2, "a", 1, 1, 2, start=300, e2e=20)]
    assert report_window(None, rows, 0, None, T0 + 999) == (T0 + 100, T0 + 320)
    assert report_window(None, rows, T0 + 50, None, T0 + 999) == (T0 + 50, T0 + 320)
    assert report_window(None, [], 0, (T0 + 5, T0 + 9), T0 + 999) == (T0 + 5, T0 + 9)
    assert report_window(None, [], 0, None, T0 + 999) == (T0 + 999, T0 + 999)


def test_tenant_filter_narrows_the_request_layer_only():
    report = layered_report(ROWS, [], CLASSES, T0, T0 + 10_000, LayerSettings(), tenant="api")
    assert [g.key for g in report.request.tenants] == ["api"]
    assert report.request.overall.requests == 2
    assert report.cluster.requests == 9


def test_downsample_averages_runs():
    assert downsample([0, 1, 2, 3], [1, 3, 5, 7], 2) == ([0, 2], [2.0, 6.0])
    assert downsample([0, 1], [1, 2], 5) == ([0, 1], [1.0, 2.0])
