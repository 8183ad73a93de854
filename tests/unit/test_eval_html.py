"""The HTML report: one inline <svg> per plot, the layers' numbers in its tables, escaped
names, the modelled-energy label, and no external resources."""

from html.parser import HTMLParser

from strata.core.records import NodeSampleRecord, RequestRecord
from strata.eval.html_report import PLOT_TITLES, nice_ticks, render
from strata.eval.layers import LayerSettings, layered_report

T0 = 1_700_000_000_000


class Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attrs: list[tuple[str, dict]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def parse(page: str) -> Collect:
    c = Collect()
    c.feed(page)
    c.close()
    return c


def rows() -> list[RequestRecord]:
    out = []
    for i, (tenant, ttft) in enumerate([("a<b>", 100.0), ("a<b>", 300.0), ("c", 900.0)]):
        out.append(
            RequestRecord(
                request_id=f"r{i}",
                trace_id="0" * 32,
                tenant=tenant,
                model="m",
                start_unix_ms=T0 + 1000 * i,
                ttft_ms=ttft,
                tpot_ms=20.0,
                e2e_ms=500.0,
                queue_ms=None,
                prompt_tokens=100,
                completion_tokens=21,
                cached_tokens=0,
                finish_reason="stop",
                error_code="",
                status_code=0,
            )
        )
    return out


def samples(source: str) -> list[NodeSampleRecord]:
    return [
        NodeSampleRecord(
            node_id="node-0",
            unix_ms=T0 + t,
            utilization=0.5,
            kv_blocks_device_used=u,
            kv_blocks_device_total=64,
            kv_blocks_host=2,
            power_watts=150.0,
            energy_joules=150.0 * t / 1000,
            energy_source=source,
            prompt_tokens=100 * t // 1000,
            prefix_hit_tokens=25 * t // 1000,
            tier_hit_tokens=10 * t // 1000,
        )
        for t, u in ((0, 4), (1000, 8), (2000, 16), (3000, 12))
    ]


def test_one_svg_per_plot_and_the_numbers_in_the_tables():
    report = layered_report(
        rows(),
        samples("model"),
        {"c": "interactive"},
        T0,
        T0 + 3000,
        LayerSettings(price_per_kwh=0.5),
    )
    page = render(report)
    doc = parse(page)
    assert doc.tags.count("svg") == len(PLOT_TITLES) == 7
    labels = [a["aria-label"] for tag, a in doc.attrs if tag == "svg"]
    assert labels[:6] == list(PLOT_TITLES[:6])
    assert labels[6] == "Power over time (0.000125 kWh, MODELLED)"  # 450 J
    assert doc.tags.count("polyline") >= 3 + 1 + 2 + 1  # CDF lines, throughput, kv, power
    text = " ".join(doc.text)
    assert "tenant a<b>" in text and "<b>" not in page.replace("<body>", "")  # escaped
    assert "66.7%" in text  # overall SLA attainment: c's 900 ms misses interactive
    assert "25.0%" in text and "10.0%" in text  # prefix and tier hit rates
    assert "0.000125 kWh [model] MODELLED" in text
    assert "no failures in window" in text
    assert "http" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "<script" not in page


def test_empty_report_still_has_every_plot_saying_no_data():
    report = layered_report([], [], {}, T0, T0, LayerSettings())
    doc = parse(render(report))
    assert doc.tags.count("svg") == 7
    assert " ".join(doc.text).count("no data") == 7


def test_nice_ticks_are_round_and_cover_the_range():
    assert nice_ticks(0, 100) == [0, 20, 40, 60, 80, 100]
    assert nice_ticks(3, 47) == [0, 10, 20, 30, 40, 50]
    assert nice_ticks(5, 5) == [5, 5.2, 5.4, 5.6, 5.8, 6.0]


def test_time_axis_ticks_are_round_seconds_from_the_first_point():
    from strata.eval.html_report import Line, line_plot

    t0 = 1_795_955_732_629  # a Unix time in ms: ticks must not be round Unix times
    svg = line_plot(
        "t", [Line("a", [t0, t0 + 30_000, t0 + 60_000], [1, 2, 3])], "time", "y", time_axis=True
    )
    labels = [s.split("<")[0] for s in svg.split('font-size="10">')[1:]]
    assert [x for x in labels if x.endswith("s")] == ["0s", "20s", "40s", "60s"]
