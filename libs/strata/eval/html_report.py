"""A layered report as one self-contained HTML page: tables of the three layers and inline SVG
plots (no scripts, no external files, no plotting library).

Plots, one <svg> each and always present (an empty one says "no data"), in this order:
TTFT, TPOT and E2E latency CDFs per tenant; output throughput over time; KV blocks per tier
over time; hit rates per tier and node; power over time (labelled when modelled).
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from strata.core.stats import Summary
from strata.eval.report_text import MISSING, failures_text, fmt, header, lifetimes, pct
from strata.eval.report_types import LatencyGroup, LayeredReport, Series

WIDTH, HEIGHT = 640, 300
LEFT, RIGHT, TOP, BOTTOM = 64, 150, 34, 40
COLORS = (
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#ff7f0e",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
PLOT_TITLES = (
    "TTFT CDF per tenant",
    "TPOT CDF per tenant",
    "E2E latency CDF per tenant",
    "Output throughput over time",
    "KV blocks per tier over time",
    "Hit rates per tier",
    "Power over time",
)


@dataclass(slots=True)
class Line:
    label: str
    xs: Sequence[float]
    ys: Sequence[float]


def _pretty_json(text: str) -> str:
    """Indented when it parses (the replay client's summary); as stored otherwise."""
    try:
        return json.dumps(json.loads(text), indent=2)
    except ValueError:
        return text


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """About `count` round tick values covering [lo, hi] (1, 2 or 5 times a power of ten)."""
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / count
    step = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if raw <= m * step:
            step *= m
            break
    first, last = math.floor(lo / step), math.ceil(hi / step - 1e-9)
    return [round(i * step, 10) for i in range(first, last + 1)]


def _frame(title: str, body: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{_esc(title)}">'
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>'
        f'<text x="{WIDTH / 2}" y="20" text-anchor="middle" font-size="14" '
        f'font-weight="bold">{_esc(title)}</text>{body}</svg>'
    )


def _empty(title: str) -> str:
    return _frame(
        title,
        f'<text x="{WIDTH / 2}" y="{HEIGHT / 2}" text-anchor="middle" fill="#777">no data</text>',
    )


def _tick_label(v: float, time_axis: bool) -> str:
    return f"{v:g}s" if time_axis else f"{v:g}"


def line_plot(
    title: str,
    lines: Sequence[Line],
    x_label: str,
    y_label: str,
    time_axis: bool = False,
    y_min: float | None = 0.0,
) -> str:
    """Polylines on shared axes with a legend; x in Unix ms (shown as seconds from the first
    point) when time_axis."""
    lines = [ln for ln in lines if len(ln.xs) > 0]
    if not lines:
        return _empty(title)
    if time_axis:  # ticks at round seconds from the first point, not at round Unix times
        t0 = min(x for ln in lines for x in ln.xs)
        lines = [replace(ln, xs=[(x - t0) / 1000 for x in ln.xs]) for ln in lines]
    xs = [x for ln in lines for x in ln.xs]
    ys = [y for ln in lines for y in ln.ys]
    x0, x1 = min(xs), max(xs)
    y0 = min(ys) if y_min is None else min(y_min, min(ys))
    y1 = max(ys)
    xt, yt = nice_ticks(x0, x1), nice_ticks(y0, y1)
    x0, x1, y0, y1 = min(x0, xt[0]), max(x1, xt[-1]), min(y0, yt[0]), max(y1, yt[-1])
    pw, ph = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def px(x: float) -> float:
        return LEFT + (x - x0) / (x1 - x0 or 1) * pw

    def py(y: float) -> float:
        return TOP + ph - (y - y0) / (y1 - y0 or 1) * ph

    parts = [f'<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>']
    for t in xt:
        if x0 <= t <= x1:
            parts.append(
                f'<line x1="{px(t):.1f}" y1="{TOP + ph}" x2="{px(t):.1f}" '
                f'y2="{TOP + ph + 4}" stroke="#999"/><text x="{px(t):.1f}" '
                f'y="{TOP + ph + 16}" text-anchor="middle" font-size="10">'
                f"{_esc(_tick_label(t, time_axis))}</text>"
            )
    for t in yt:
        if y0 <= t <= y1:
            parts.append(
                f'<line x1="{LEFT}" y1="{py(t):.1f}" x2="{LEFT + pw}" '
                f'y2="{py(t):.1f}" stroke="#eee"/><text x="{LEFT - 6}" '
                f'y="{py(t) + 3:.1f}" text-anchor="end" font-size="10">'
                f"{_esc(f'{t:g}')}</text>"
            )
    parts.append(
        f'<text x="{LEFT + pw / 2}" y="{HEIGHT - 6}" text-anchor="middle" '
        f'font-size="11">{_esc(x_label)}</text>'
    )
    parts.append(
        f'<text x="14" y="{TOP + ph / 2}" text-anchor="middle" font-size="11" '
        f'transform="rotate(-90 14 {TOP + ph / 2})">{_esc(y_label)}</text>'
    )
    for i, ln in enumerate(lines):
        color = COLORS[i % len(COLORS)]
        points = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in zip(ln.xs, ln.ys, strict=True))
        parts.append(
            f'<polyline fill="none" stroke="{color}" stroke-width="1.5" '
            f'points="{points}"><title>{_esc(ln.label)}</title></polyline>'
        )
        ly = TOP + 12 + 14 * i
        parts.append(
            f'<line x1="{LEFT + pw + 10}" y1="{ly}" x2="{LEFT + pw + 26}" y2="{ly}" '
            f'stroke="{color}" stroke-width="2"/><text x="{LEFT + pw + 30}" '
            f'y="{ly + 4}" font-size="10">{_esc(ln.label)}</text>'
        )
    return _frame(title, "".join(parts))


def bar_plot(title: str, bars: Sequence[tuple[str, float]], y_label: str) -> str:
    """Vertical bars, one per (label, value); values are fractions shown as percentages."""
    if not bars:
        return _empty(title)
    pw, ph = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    top = max(1.0, max(v for _, v in bars))
    slot = pw / len(bars)
    parts = [
        f'<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>',
        f'<text x="14" y="{TOP + ph / 2}" text-anchor="middle" font-size="11" '
        f'transform="rotate(-90 14 {TOP + ph / 2})">{_esc(y_label)}</text>',
    ]
    for i, (label, value) in enumerate(bars):
        h = value / top * ph
        x = LEFT + i * slot + slot * 0.15
        parts.append(
            f'<rect x="{x:.1f}" y="{TOP + ph - h:.1f}" width="{slot * 0.7:.1f}" '
            f'height="{h:.1f}" fill="{COLORS[i % len(COLORS)]}"><title>{_esc(label)}'
            f'</title></rect><text x="{x + slot * 0.35:.1f}" y="{TOP + ph - h - 4:.1f}"'
            f' text-anchor="middle" font-size="10">{value * 100:.1f}%</text>'
            f'<text x="{x + slot * 0.35:.1f}" y="{TOP + ph + 14}" text-anchor="middle" '
            f'font-size="10">{_esc(label)}</text>'
        )
    return _frame(title, "".join(parts))


def _cdf_plot(r: LayeredReport, metric: str, title: str) -> str:
    qs = [q / 100 for q in r.request.cdf_quantiles]
    lines = [Line(c.group, c.values, qs) for c in r.request.cdfs if c.metric == metric]
    return line_plot(
        title, lines, metric.replace("_ms", " (ms)"), "fraction of requests", y_min=0.0
    )


_SHORT = {
    "kv_blocks_device_used": "device",
    "kv_blocks_host": "host",
    "kv_blocks_disk": "disk",
    "power_watts": "power",
    "output_tokens_per_s": "output tok/s",
}


def _series_lines(series: Sequence[Series], names: Sequence[str]) -> list[Line]:
    # Legends have room for about 20 characters: node id plus a short name.
    return [
        Line(
            f"{s.node_id} {_SHORT.get(s.name, s.name)}"
            if s.node_id
            else _SHORT.get(s.name, s.name),
            s.unix_ms,
            s.values,
        )
        for s in series
        if s.name in names and s.unix_ms
    ]


def plots(r: LayeredReport) -> list[str]:
    """The report's plots as SVG documents, in PLOT_TITLES order."""
    power_title = PLOT_TITLES[6] + (
        f" ({r.cluster.energy_kwh:.6f} kWh{', MODELLED' if r.cluster.energy_modelled else ''})"
    )
    hit_bars = []
    for n in r.node.nodes:
        for label, rate in (("prefix", n.prefix_hit_rate), ("tier", n.tier_hit_rate)):
            if rate is not None:
                hit_bars.append((f"{n.node_id} {label}", rate))
    return [
        _cdf_plot(r, "ttft_ms", PLOT_TITLES[0]),
        _cdf_plot(r, "tpot_ms", PLOT_TITLES[1]),
        _cdf_plot(r, "e2e_ms", PLOT_TITLES[2]),
        line_plot(
            PLOT_TITLES[3],
            _series_lines(r.cluster.series, ["output_tokens_per_s"]),
            "time",
            "output tokens/s",
            time_axis=True,
        ),
        line_plot(
            PLOT_TITLES[4],
            _series_lines(
                r.node.series, ["kv_blocks_device_used", "kv_blocks_host", "kv_blocks_disk"]
            ),
            "time",
            "blocks",
            time_axis=True,
        ),
        bar_plot(PLOT_TITLES[5], hit_bars, "hit tokens / prompt tokens"),
        line_plot(
            power_title,
            _series_lines(r.node.series, ["power_watts"]),
            "time",
            "watts",
            time_axis=True,
        ),
    ]


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{_esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{_esc(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _s(s: Summary | None, q: str) -> str:
    return MISSING if s is None else f"{getattr(s, q):.1f}"


def _group_cells(label: str, g: LatencyGroup) -> list[str]:
    cells = [label, g.sla_class or MISSING, str(g.requests), str(g.errors)]
    for s in (g.ttft_ms, g.tpot_ms, g.itl_ms, g.e2e_ms, g.queue_ms):
        cells += [_s(s, "p50"), _s(s, "p95"), _s(s, "p99")]
    return cells + [pct(g.attainment), fmt(g.goodput_rps, 2), fmt(g.goodput_tokens_per_s)]


def render(r: LayeredReport, title: str = "Strata evaluation report") -> str:
    """The whole page."""
    req, c = r.request, r.cluster
    lat_headers = ["group", "class", "reqs", "errors"]
    for m in ("ttft", "tpot", "itl", "e2e", "queue"):
        lat_headers += [f"{m} p50", f"{m} p95", f"{m} p99"]
    lat_headers += ["sla met", "goodput rps", "goodput tok/s"]
    groups = (
        [_group_cells(f"tenant {g.key}", g) for g in req.tenants]
        + [_group_cells(f"class {g.key}", g) for g in req.sla_classes]
        + [_group_cells("all", req.overall)]
    )
    nodes = [
        [
            n.node_id,
            str(n.samples),
            pct(n.utilization),
            pct(n.batch_utilization),
            pct(n.prefix_hit_rate),
            pct(n.tier_hit_rate),
            str(n.preemptions),
            _s(n.waiting, "p50"),
            _s(n.waiting, "p99"),
            f"{n.kv_blocks_device_used_max}/{n.kv_blocks_device_total}",
            str(n.kv_blocks_evicted),
            lifetimes(n),
            str(n.kv_blocks_host_max),
            fmt(n.energy_joules),
            fmt(n.mean_power_watts),
            "modelled" if n.energy_source == "model" else n.energy_source,
        ]
        for n in r.node.nodes
    ]
    cluster = [
        ["duration", f"{c.duration_s:.1f} s"],
        ["requests", f"{c.requests} ({c.errors} failed)"],
        [
            "throughput",
            f"{c.requests_per_s:.2f} req/s, {c.output_tokens_per_s:.1f} output "
            f"tok/s, {c.input_tokens_per_s:.1f} input tok/s",
        ],
        ["utilization", f"{pct(c.utilization)} over {c.nodes} node(s)"],
        [
            "energy",
            f"{c.energy_kwh:.6f} kWh [{', '.join(c.energy_sources) or 'no samples'}]"
            + (
                " MODELLED (idle + utilization x (TDP - idle)), not measured"
                if c.energy_modelled
                else ""
            ),
        ],
        ["energy per 1M output tokens", f"{fmt(c.kwh_per_1m_output_tokens, 4)} kWh"],
        [
            "cost",
            f"${c.cost_usd:.6f} (${c.price_per_kwh:g}/kWh, ${c.price_per_node_hour:g}"
            f"/node-hour x {c.node_hours:.4f} node-hours)",
        ],
        ["cost per 1M output tokens", f"${fmt(c.cost_per_1m_output_tokens, 4)}"],
        ["failures", failures_text(r)],
    ]
    targets = [[t.name, fmt(t.ttft_ms, 0), fmt(t.tpot_ms, 0)] for t in req.sla_targets]
    figures = "".join(f"<figure>{svg}</figure>" for svg in plots(r))
    run_json = ""
    if r.run is not None and r.run.client_summary_json:
        run_json = (
            f"<h3>Replay client's own summary</h3>"
            f'<pre style="white-space:pre-wrap">'
            f"{_esc(_pretty_json(r.run.client_summary_json))}</pre>"
        )
    return "".join(
        [
            '<!DOCTYPE html><html><head><meta charset="utf-8">',
            f"<title>{_esc(title)}</title><style>body{{font-family:sans-serif;margin:24px}}"
            "table{border-collapse:collapse;font-size:12px;margin:8px 0}"
            "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}"
            "td:first-child,th:first-child{text-align:left}figure{display:inline-block;margin:6px}"
            "</style></head><body>",
            f"<h1>{_esc(title)}</h1><p>{_esc(header(r)).replace(chr(10), '<br>')}</p>",
            "<p>every figure is computed from the stored spans and node samples</p>",
            "<h2>Request layer (ms)</h2>",
            _table(lat_headers, groups),
            f"<p>fairness (Jain over tenants, output tokens / weight): "
            f"{_esc(fmt(req.fairness_jain, 3))}; ITL source: {_esc(req.itl_source)}</p>",
            _table(["SLA class", "TTFT target ms", "TPOT target ms"], targets),
            "<h2>Node layer</h2>",
            _table(
                [
                    "node",
                    "samples",
                    "util",
                    "batch util",
                    "prefix hit",
                    "tier hit",
                    "preempt",
                    "waiting p50",
                    "waiting p99",
                    "kv dev max/total",
                    "blocks evicted",
                    "block lifetime mean/p50/p99 s",
                    "kv host max",
                    "energy J",
                    "power W",
                    "source",
                ],
                nodes,
            )
            if nodes
            else "<p>no node samples in the window</p>",
            "<h2>Cluster layer</h2>",
            _table(["figure", "value"], cluster),
            "<h2>Plots</h2>",
            figures,
            run_json,
            f"<p>spans received {r.spans_received}, dropped {r.spans_dropped}</p></body></html>",
        ]
    )
