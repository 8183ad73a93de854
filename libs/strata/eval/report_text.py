"""Terminal rendering of a layered report (`strata report`) and of two side by side
(`strata report --compare A B`). Pure functions of LayeredReport values.

A figure that could not be computed prints as "-", never as 0.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from strata.core.stats import Summary
from strata.eval.report_types import LatencyGroup, LayeredReport, NodeFigures
from strata.eval.tables import table

MISSING = "-"


def fmt(value: float | None, digits: int = 1) -> str:
    return MISSING if value is None else f"{value:.{digits}f}"


def pct(value: float | None) -> str:
    return MISSING if value is None else f"{value * 100:.1f}%"


def utc(unix_ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(unix_ms / 1000)) + " UTC"


def _triple(s: Summary | None) -> str:
    return MISSING if s is None else f"{s.p50:.1f}/{s.p95:.1f}/{s.p99:.1f}"


def lifetimes(n: NodeFigures) -> str:
    """Block lifetime mean/p50/p99 in seconds; sub-second lives are common, hence 2 digits."""
    return "/".join(
        fmt(v, 2) for v in (n.block_lifetime_mean_s, n.block_lifetime_p50_s, n.block_lifetime_p99_s)
    )


def header(r: LayeredReport) -> str:
    seconds = (r.window_end_unix_ms - r.window_start_unix_ms) / 1000
    window = (
        f"window {utc(r.window_start_unix_ms)} -> {utc(r.window_end_unix_ms)} ({seconds:.1f} s)"
    )
    if r.run is None:
        return window
    state = "running" if r.run.finished_unix_ms is None else "finished"
    return f"run {r.run.run_id} {r.run.name!r} ({r.run.kind}, {state})\n{window}"


def _group_row(label: str, g: LatencyGroup) -> list[str]:
    return [
        label,
        g.sla_class or MISSING,
        str(g.requests),
        str(g.errors),
        _triple(g.ttft_ms),
        _triple(g.tpot_ms),
        _triple(g.itl_ms),
        _triple(g.e2e_ms),
        _triple(g.queue_ms),
        pct(g.attainment),
        fmt(g.goodput_rps, 2),
        fmt(g.goodput_tokens_per_s, 1),
    ]


def request_text(r: LayeredReport) -> str:
    req = r.request
    rows = [_group_row(f"tenant {g.key}", g) for g in req.tenants]
    rows += [_group_row(f"class {g.key}", g) for g in req.sla_classes]
    rows.append(_group_row("all", req.overall))
    headers = [
        "group",
        "class",
        "reqs",
        "errors",
        "ttft p50/95/99",
        "tpot p50/95/99",
        "itl p50/95/99",
        "e2e p50/95/99",
        "queue p50/95/99",
        "sla met",
        "goodput rps",
        "goodput tok/s",
    ]
    targets = "; ".join(
        f"{c.name} best-effort"
        if c.ttft_ms is None and c.tpot_ms is None
        else f"{c.name} TTFT<={fmt(c.ttft_ms, 0)} TPOT<={fmt(c.tpot_ms, 0)}"
        for c in req.sla_targets
    )
    itl_note = {
        "gateway": "measured per request at the gateway",
        "tpot": "not measured: TPOT stands in",
        "mixed": "TPOT stands in for some",
        "none": "no request of two tokens or more",
    }.get(req.itl_source, req.itl_source)
    return "\n".join(
        [
            "REQUEST LAYER (latencies in ms)",
            table(headers, rows),
            f"fairness (Jain over tenants, output tokens / weight): {fmt(req.fairness_jain, 3)}",
            f"ITL: {itl_note}",
            f"SLA targets (ms): {targets}",
        ]
    )


def node_text(r: LayeredReport) -> str:
    if not r.node.nodes:
        return "NODE LAYER\nno node samples in the window"
    headers = [
        "node",
        "samples",
        "util",
        "batch util",
        "prefix hit",
        "tier hit",
        "preempt",
        "waiting p50/95/99",
        "running p50/95/99",
        "kv dev max/total",
        "blocks evicted",
        "block lifetime mean/p50/p99 s",
        "kv host max",
        "energy J",
        "power W",
        "source",
    ]
    rows = [
        [
            n.node_id,
            str(n.samples),
            pct(n.utilization),
            pct(n.batch_utilization),
            pct(n.prefix_hit_rate),
            pct(n.tier_hit_rate),
            str(n.preemptions),
            _triple(n.waiting),
            _triple(n.running),
            f"{n.kv_blocks_device_used_max}/{n.kv_blocks_device_total}",
            str(n.kv_blocks_evicted),
            lifetimes(n),
            str(n.kv_blocks_host_max),
            fmt(n.energy_joules, 1),
            fmt(n.mean_power_watts, 1),
            "modelled" if n.energy_source == "model" else n.energy_source,
        ]
        for n in r.node.nodes
    ]
    return "NODE LAYER\n" + table(headers, rows)


def failures_text(r: LayeredReport) -> str:
    c = r.cluster
    if not c.outages:
        return "no failures in window"
    parts = []
    for o in c.outages:
        if o.recovery_s is None:
            parts.append(f"{o.node_id} silent since {utc(o.last_sample_unix_ms)} (not back)")
        else:
            parts.append(f"{o.node_id} down {o.recovery_s:.1f} s from {utc(o.last_sample_unix_ms)}")
    return "; ".join(parts) + f" (max recovery {fmt(c.max_recovery_s)} s)"


def cluster_text(r: LayeredReport) -> str:
    c = r.cluster
    label = (
        " (MODELLED: no energy counter, idle + utilization x (TDP - idle))"
        if c.energy_modelled
        else ""
    )
    sources = ", ".join(c.energy_sources) or "no samples"
    return "\n".join(
        [
            "CLUSTER LAYER",
            f"duration      {c.duration_s:.1f} s, {c.requests} requests, {c.errors} failed",
            f"throughput    {c.requests_per_s:.2f} req/s, "
            f"{c.output_tokens_per_s:.1f} output tok/s, {c.input_tokens_per_s:.1f} input tok/s",
            f"utilization   {pct(c.utilization)} over {c.nodes} node(s), "
            f"{c.node_hours:.4f} node-hours",
            f"energy        {c.energy_kwh:.6f} kWh [{sources}]{label}, "
            f"{fmt(c.kwh_per_1m_output_tokens, 4)} kWh per 1M output tokens",
            f"cost          ${c.cost_usd:.6f} at ${c.price_per_kwh:g}/kWh + "
            f"${c.price_per_node_hour:g}/node-hour; "
            f"${fmt(c.cost_per_1m_output_tokens, 4)} per 1M output tokens",
            f"failures      {failures_text(r)}",
        ]
    )


def report_text(r: LayeredReport) -> str:
    """What `strata report` prints for a layered report."""
    return "\n\n".join(
        [
            header(r),
            request_text(r),
            node_text(r),
            cluster_text(r),
            f"spans received {r.spans_received}, dropped {r.spans_dropped}",
        ]
    )


def _sum_or_none(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def _node_rate(r: LayeredReport, hits: Callable) -> float | None:
    prompt = sum(n.prompt_tokens for n in r.node.nodes)
    return sum(hits(n) for n in r.node.nodes) / prompt if prompt else None


def key_figures(r: LayeredReport) -> list[tuple[str, float | None]]:
    """The figures --compare puts side by side, in print order."""
    o, c = r.request.overall, r.cluster
    out: list[tuple[str, float | None]] = [("requests", o.requests), ("errors", o.errors)]
    for name in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "queue_ms"):
        s = getattr(o, name)
        for q in ("p50", "p95", "p99"):
            out.append((f"{name.removesuffix('_ms')} {q} ms", None if s is None else getattr(s, q)))
    out += [
        ("sla attainment %", None if o.attainment is None else o.attainment * 100),
        ("goodput req/s", o.goodput_rps),
        ("goodput tok/s", o.goodput_tokens_per_s),
        ("fairness (Jain)", r.request.fairness_jain),
    ]
    for g in r.request.sla_classes:
        out.append(
            (
                f"class {g.key} sla attainment %",
                None if g.attainment is None else g.attainment * 100,
            )
        )
    for g in r.request.tenants:
        out.append((f"tenant {g.key} ttft p99 ms", None if g.ttft_ms is None else g.ttft_ms.p99))
    batch = sum(n.batch_budget for n in r.node.nodes)
    out += [
        ("throughput req/s", c.requests_per_s),
        ("output tok/s", c.output_tokens_per_s),
        ("utilization %", None if c.utilization is None else c.utilization * 100),
        (
            "batch utilization %",
            sum(n.batch_tokens for n in r.node.nodes) / batch * 100 if batch else None,
        ),
        ("prefix hit rate %", _pct_or_none(_node_rate(r, lambda n: n.prefix_hit_tokens))),
        ("tier hit rate %", _pct_or_none(_node_rate(r, lambda n: n.tier_hit_tokens))),
        ("preemptions", _sum_or_none([n.preemptions for n in r.node.nodes])),
        ("blocks evicted", _sum_or_none([n.kv_blocks_evicted for n in r.node.nodes])),
        ("energy kWh", c.energy_kwh),
        ("kWh per 1M output tok", c.kwh_per_1m_output_tokens),
        ("cost $ per 1M output tok", c.cost_per_1m_output_tokens),
        ("max recovery s", c.max_recovery_s),
    ]
    return out


def _pct_or_none(v: float | None) -> float | None:
    return None if v is None else v * 100


def _num(v: float | None) -> str:
    if v is None:
        return MISSING
    return str(int(v)) if float(v).is_integer() and abs(v) < 1e15 else f"{v:.4g}"


def compare_text(a: LayeredReport, b: LayeredReport, label_a: str, label_b: str) -> str:
    """Two reports' key figures side by side with B - A and its percentage of A."""
    fa, fb = dict(key_figures(a)), dict(key_figures(b))
    names = [n for n, _ in key_figures(a)] + [n for n, _ in key_figures(b) if n not in fa]
    rows = []
    for name in names:
        va, vb = fa.get(name), fb.get(name)
        delta = None if va is None or vb is None else vb - va
        rel = MISSING if delta is None or not va else f"{delta / va * 100:+.1f}%"
        rows.append(
            [
                name,
                _num(va),
                _num(vb),
                MISSING if delta is None else ("+" if delta >= 0 else "") + _num(delta),
                rel,
            ]
        )
    energy = []
    for label, r in ((label_a, a), (label_b, b)):
        if r.cluster.energy_modelled:
            energy.append(f"{label}: energy modelled, not measured")
    lines = [
        f"A = {label_a}: {header(a)}".replace("\n", "; "),
        f"B = {label_b}: {header(b)}".replace("\n", "; "),
        table(["figure", "A", "B", "B - A", "change"], rows),
    ]
    return "\n".join(lines + energy)
