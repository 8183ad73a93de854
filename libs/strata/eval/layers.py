"""Layered evaluation: request, node and cluster figures of one window, from stored rows only.

Pure functions: the input is the request rows derived from gateway spans and the node samples
(strata.store), the output a LayeredReport. No I/O, no clock.

Request layer (successful requests; counts include failures):
    TTFT, TPOT, E2E, queueing time: P50/P95/P99/mean over requests, per tenant, per SLA class
    and overall. TPOT and ITL only for answers of two tokens or more.
    ITL: the gateway measures each request's own gap percentiles (a chunk carrying several
    tokens is one gap, as the replay client counts it). The layer's ITL P50/P95/P99 are the
    P50 of the requests' P50s, the P95 of their P95s and the P99 of their P99s, and the mean is
    the mean of their P50s; pooling every gap of every request (the client's figure) needs the
    gaps themselves, which spans do not carry. A request without ITL figures counts its TPOT
    for all three, and itl_source says which happened (gateway | tpot | mixed | none).
    SLA attainment: requests that succeeded within their class's targets (strata.eval.sla)
    over all requests; goodput: those requests, and their output tokens, per window second.
    Fairness: Jain's index (sum x)^2 / (n * sum x^2) over tenants, x = output tokens / weight.

Node layer (per node, over the window):
    Interval figures (utilization, step tokens and budget) and cumulative counters (prompt
    tokens, prefix and tier hit tokens, preemptions, energy) are taken pair by pair between
    consecutive samples and pro-rated by how much of each pair's interval lies in the window,
    so a sample just outside the window still bounds it. A counter that went down restarted
    from zero (its node manager restarted): the later value is the growth. Instant figures
    (KV blocks, queue lengths) use the samples inside the window.

Cluster layer:
    Throughput over the window: successful requests and their tokens per second.
    Energy: the nodes' energy; cost = kWh x price_per_kwh + node-hours x price_per_node_hour,
    per 1M output tokens. A node's hours are the part of the window its samples cover.
    Failure recovery: a node whose samples stop for more than gap_factor x its median interval
    was down; recovery time runs from its last sample before the gap to its first after.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from strata.eval.report_types import (CDF_METRICS, CDF_QUANTILES, ClusterLayer, LatencyCdf,
                                      LatencyGroup, LayeredReport, NodeFigures, NodeLayer,
                                      Outage, RequestLayer, Series)
from strata.eval.sla import SlaTable
from strata.eval.stats import Summary, percentile, percentiles, summarize
from strata.store.runs import RunRecord
from strata.store.samples import NodeSampleRecord
from strata.store.spans import RequestRecord

ALL = "all"
J_PER_KWH = 3.6e6


@dataclass(slots=True, frozen=True)
class LayerSettings:
    sla: SlaTable = field(default_factory=SlaTable)
    tenant_weights: Mapping[str, float] = field(default_factory=dict)   # absent: weight 1
    price_per_kwh: float = 0.0
    price_per_node_hour: float = 0.0
    gap_factor: float = 3.0
    series_points: int = 120    # at most this many points per plotted series

    def weight(self, tenant: str) -> float:
        return self.tenant_weights.get(tenant, 1.0)


def jain_index(values: Sequence[float]) -> float | None:
    """Jain's fairness index: 1 when all equal, 1/n when one takes everything; None when there
    is nothing to share (no values, or all zero)."""
    square_sum = math.fsum(v * v for v in values)
    if not values or square_sum == 0:
        return None
    return math.fsum(values) ** 2 / (len(values) * square_sum)


def report_window(run: RunRecord | None, rows: Sequence[RequestRecord], since_unix_ms: int,
                  sample_range: tuple[int, int] | None, now_unix_ms: int) -> tuple[int, int]:
    """The window a report covers: a run's start to its finish (now while it runs); otherwise
    the requests' first start (or since_unix_ms) to their last end, or the samples' span when
    there are no requests."""
    if run is not None:
        return run.started_unix_ms, run.finished_unix_ms or now_unix_ms
    if rows:
        start = since_unix_ms or min(r.start_unix_ms for r in rows)
        return start, max(r.start_unix_ms + math.ceil(r.e2e_ms) for r in rows)
    if sample_range is not None:
        return max(since_unix_ms, sample_range[0]), sample_range[1]
    return since_unix_ms or now_unix_ms, now_unix_ms


# -- request layer -------------------------------------------------------------------------


def _tpot(r: RequestRecord) -> float | None:
    return r.tpot_ms if r.completion_tokens >= 2 else None


def _itl_triple(r: RequestRecord) -> tuple[float, float, float] | None:
    if r.completion_tokens < 2:
        return None
    if None not in (r.itl_p50_ms, r.itl_p95_ms, r.itl_p99_ms):
        return r.itl_p50_ms, r.itl_p95_ms, r.itl_p99_ms
    return None if r.tpot_ms is None else (r.tpot_ms, r.tpot_ms, r.tpot_ms)


def _itl_summary(ok: Sequence[RequestRecord]) -> Summary | None:
    triples = [t for r in ok if (t := _itl_triple(r)) is not None]
    if not triples:
        return None
    p50s, p95s, p99s = zip(*triples, strict=True)
    return Summary(p50=percentile(p50s, 50), p95=percentile(p95s, 95),
                   p99=percentile(p99s, 99), mean=math.fsum(p50s) / len(p50s),
                   count=len(triples))


def _itl_source(rows: Sequence[RequestRecord]) -> str:
    eligible = [r for r in rows if not r.is_error and _itl_triple(r) is not None]
    measured = sum(1 for r in eligible if r.itl_p50_ms is not None)
    if not eligible:
        return "none"
    if measured == len(eligible):
        return "gateway"
    return "tpot" if measured == 0 else "mixed"


_CDF_VALUE: dict[str, Callable[[RequestRecord], float | None]] = {
    "ttft_ms": lambda r: r.ttft_ms, "tpot_ms": _tpot, "e2e_ms": lambda r: r.e2e_ms}


def _group(key: str, sla_class: str, rows: Sequence[RequestRecord],
           attained: Callable[[RequestRecord], bool], window_s: float,
           weight: float = 0.0) -> LatencyGroup:
    ok = [r for r in rows if not r.is_error]
    good = [r for r in rows if attained(r)]
    return LatencyGroup(
        key=key, sla_class=sla_class, requests=len(rows), errors=len(rows) - len(ok),
        ttft_ms=summarize([r.ttft_ms for r in ok if r.ttft_ms is not None]),
        tpot_ms=summarize([t for r in ok if (t := _tpot(r)) is not None]),
        itl_ms=_itl_summary(ok),
        e2e_ms=summarize([r.e2e_ms for r in ok]),
        queue_ms=summarize([r.queue_ms for r in ok if r.queue_ms is not None]),
        prompt_tokens=sum(r.prompt_tokens for r in rows),
        completion_tokens=sum(r.completion_tokens for r in rows),
        attained=len(good), attainment=len(good) / len(rows) if rows else None,
        goodput_rps=len(good) / window_s if window_s > 0 else 0.0,
        goodput_tokens_per_s=(sum(r.completion_tokens for r in good) / window_s
                              if window_s > 0 else 0.0),
        weight=weight)


def request_layer(rows: Sequence[RequestRecord], tenant_classes: Mapping[str, str],
                  settings: LayerSettings, window_s: float) -> RequestLayer:
    """The request layer of rows; a tenant missing from tenant_classes is in the default
    class."""
    def class_of(tenant: str) -> str:
        return tenant_classes.get(tenant, settings.sla.default)

    def attained(r: RequestRecord) -> bool:
        return settings.sla.lookup(class_of(r.tenant)).attained(r.is_error, r.ttft_ms, _tpot(r))

    by_tenant: dict[str, list[RequestRecord]] = defaultdict(list)
    by_class: dict[str, list[RequestRecord]] = defaultdict(list)
    for r in rows:
        by_tenant[r.tenant].append(r)
        by_class[class_of(r.tenant)].append(r)
    tenants = [_group(t, class_of(t), by_tenant[t], attained, window_s, settings.weight(t))
               for t in sorted(by_tenant)]
    classes = [_group(c, c, by_class[c], attained, window_s) for c in sorted(by_class)]
    fairness = jain_index([g.completion_tokens / g.weight for g in tenants if g.weight > 0])
    targets = list(settings.sla.classes.values())
    targets += [settings.sla.lookup(c) for c in sorted(by_class) if c not in settings.sla.classes]
    cdfs = []
    for t in sorted(by_tenant):
        ok = [r for r in by_tenant[t] if not r.is_error]
        for metric in CDF_METRICS:
            values = [v for r in ok if (v := _CDF_VALUE[metric](r)) is not None]
            if values:
                cdfs.append(LatencyCdf(t, metric, percentiles(values, CDF_QUANTILES)))
    return RequestLayer(
        tenants=tenants, sla_classes=classes,
        overall=_group(ALL, "", rows, attained, window_s), fairness_jain=fairness,
        itl_source=_itl_source(rows), sla_targets=targets, cdf_quantiles=list(CDF_QUANTILES),
        cdfs=cdfs)


# -- node layer ----------------------------------------------------------------------------


def _overlap(a0: float, a1: float, b0: float, b1: float) -> float:
    return max(0.0, min(a1, b1) - max(a0, b0))


def _pairs(samples: Sequence[NodeSampleRecord], start: int, end: int):
    """(previous, sample, share): consecutive samples and the share of their interval inside
    [start, end]; pairs wholly outside are skipped."""
    for prev, cur in zip(samples, samples[1:]):
        span = cur.unix_ms - prev.unix_ms
        if span <= 0:
            continue
        share = _overlap(prev.unix_ms, cur.unix_ms, start, end) / span
        if share > 0:
            yield prev, cur, share


def _growth(samples: Sequence[NodeSampleRecord], start: int, end: int,
            value: Callable[[NodeSampleRecord], float]) -> float:
    total = 0.0
    for prev, cur, share in _pairs(samples, start, end):
        a, b = value(prev), value(cur)
        total += share * (b - a if b >= a else b)
    return total


def _interval_sum(samples: Sequence[NodeSampleRecord], start: int, end: int,
                  value: Callable[[NodeSampleRecord], float]) -> float:
    # An interval figure describes (previous sample, this sample]: pro-rate it like a counter.
    return math.fsum(share * value(cur) for _, cur, share in _pairs(samples, start, end))


def _covered_ms(samples: Sequence[NodeSampleRecord], start: int, end: int) -> float:
    if not samples:
        return 0.0
    return _overlap(samples[0].unix_ms, samples[-1].unix_ms, start, end)


def _node_figures(node_id: str, samples: Sequence[NodeSampleRecord], start: int,
                  end: int) -> NodeFigures:
    inside = [s for s in samples if start <= s.unix_ms <= end]
    covered_s = sum(share * (cur.unix_ms - prev.unix_ms)
                    for prev, cur, share in _pairs(samples, start, end)) / 1000
    util_weighted = sum(share * (cur.unix_ms - prev.unix_ms) * cur.utilization
                        for prev, cur, share in _pairs(samples, start, end)) / 1000
    batch_tokens = round(_interval_sum(samples, start, end, lambda s: s.batch_tokens))
    batch_budget = round(_interval_sum(samples, start, end, lambda s: s.batch_budget))
    prompt = round(_growth(samples, start, end, lambda s: s.prompt_tokens))
    prefix = round(_growth(samples, start, end, lambda s: s.prefix_hit_tokens))
    tier = round(_growth(samples, start, end, lambda s: s.tier_hit_tokens))
    energy = _growth(samples, start, end, lambda s: s.energy_joules)
    used = [s.kv_blocks_device_used for s in inside]
    latest = inside[-1] if inside else samples[-1]
    return NodeFigures(
        node_id=node_id, samples=len(inside),
        utilization=util_weighted / covered_s if covered_s > 0 else None,
        batch_utilization=batch_tokens / batch_budget if batch_budget > 0 else None,
        batch_tokens=batch_tokens, batch_budget=batch_budget, prompt_tokens=prompt,
        prefix_hit_tokens=prefix, tier_hit_tokens=tier,
        prefix_hit_rate=prefix / prompt if prompt > 0 else None,
        tier_hit_rate=tier / prompt if prompt > 0 else None,
        preemptions=round(_growth(samples, start, end, lambda s: s.preemptions)),
        waiting=summarize([s.waiting for s in inside]),
        running=summarize([s.running for s in inside]),
        kv_blocks_device_total=max((s.kv_blocks_device_total for s in inside), default=0),
        kv_blocks_device_used_max=max(used, default=0),
        kv_blocks_device_used_mean=math.fsum(used) / len(used) if used else 0.0,
        kv_blocks_host_max=max((s.kv_blocks_host for s in inside), default=0),
        kv_blocks_disk_max=max((s.kv_blocks_disk for s in inside), default=0),
        energy_joules=energy, mean_power_watts=energy / covered_s if covered_s > 0 else None,
        energy_source=latest.energy_source)


NODE_SERIES: dict[str, Callable[[NodeSampleRecord], float]] = {
    "kv_blocks_device_used": lambda s: s.kv_blocks_device_used,
    "kv_blocks_host": lambda s: s.kv_blocks_host,
    "kv_blocks_disk": lambda s: s.kv_blocks_disk,
    "running": lambda s: s.running,
    "waiting": lambda s: s.waiting,
    "utilization": lambda s: s.utilization,
    "batch_utilization": lambda s: s.batch_tokens / s.batch_budget if s.batch_budget else 0.0,
    "power_watts": lambda s: s.power_watts,
}


def downsample(unix_ms: Sequence[int], values: Sequence[float], points: int
               ) -> tuple[list[int], list[float]]:
    """At most `points` points: consecutive runs averaged (time and value), order kept."""
    n = len(values)
    if n <= points:
        return list(unix_ms), [float(v) for v in values]
    out_t, out_v = [], []
    for i in range(points):
        lo, hi = i * n // points, (i + 1) * n // points
        out_t.append(round(math.fsum(unix_ms[lo:hi]) / (hi - lo)))
        out_v.append(math.fsum(values[lo:hi]) / (hi - lo))
    return out_t, out_v


def _by_node(samples: Sequence[NodeSampleRecord]) -> dict[str, list[NodeSampleRecord]]:
    nodes: dict[str, list[NodeSampleRecord]] = defaultdict(list)
    for s in sorted(samples, key=lambda s: (s.node_id, s.unix_ms)):
        nodes[s.node_id].append(s)
    return dict(nodes)


def node_layer(samples: Sequence[NodeSampleRecord], start: int, end: int,
               settings: LayerSettings) -> NodeLayer:
    """Per-node figures over [start, end]; samples may include neighbours just outside it."""
    nodes, series = [], []
    for node_id, mine in _by_node(samples).items():
        inside = [s for s in mine if start <= s.unix_ms <= end]
        if not inside and next(_pairs(mine, start, end), None) is None:
            continue   # only neighbours of the window, on one side of it
        nodes.append(_node_figures(node_id, mine, start, end))
        for name, value in NODE_SERIES.items():
            t, v = downsample([s.unix_ms for s in inside], [value(s) for s in inside],
                              settings.series_points)
            series.append(Series(name, node_id, t, v))
    return NodeLayer(nodes=nodes, series=series)


# -- cluster layer -------------------------------------------------------------------------


def outages(samples: Sequence[NodeSampleRecord], start: int, end: int,
            gap_factor: float) -> list[Outage]:
    """Gaps in each node's samples that overlap [start, end], and nodes silent at its end."""
    found = []
    for node_id, mine in _by_node(samples).items():
        times = [s.unix_ms for s in mine]
        intervals = [b - a for a, b in zip(times, times[1:]) if b > a]
        if not intervals:
            continue
        limit = gap_factor * statistics.median(intervals)
        for a, b in zip(times, times[1:]):
            if b - a > limit and _overlap(a, b, start, end) > 0:
                found.append(Outage(node_id, a, b, (b - a) / 1000))
        if times[-1] < end and end - times[-1] > limit:
            found.append(Outage(node_id, times[-1], 0, None))
    return found


def _buckets(start: int, end: int, points: int) -> list[int]:
    """Bucket edges splitting [start, end] into at most `points` buckets of at least 1 s."""
    n = max(1, min(points, (end - start) // 1000))
    return [start + (end - start) * i // n for i in range(n + 1)]


def _throughput_series(rows: Sequence[RequestRecord], start: int, end: int,
                       points: int) -> list[Series]:
    if end <= start:
        return []
    edges = _buckets(start, end, points)
    done, tokens = [0.0] * (len(edges) - 1), [0.0] * (len(edges) - 1)
    for r in rows:
        finished = r.start_unix_ms + r.e2e_ms
        if r.is_error or not start <= finished <= end:
            continue
        i = min(len(done) - 1, max(0, _bucket_index(edges, finished)))
        done[i] += 1
        tokens[i] += r.completion_tokens
    mids = [(a + b) // 2 for a, b in zip(edges, edges[1:])]
    widths = [(b - a) / 1000 for a, b in zip(edges, edges[1:])]
    return [Series("requests_per_s", "", mids, [d / w for d, w in zip(done, widths)]),
            Series("output_tokens_per_s", "", mids, [t / w for t, w in zip(tokens, widths)])]


def _bucket_index(edges: Sequence[int], t: float) -> int:
    lo, hi = 0, len(edges) - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if edges[mid] <= t:
            lo = mid
        else:
            hi = mid
    return lo


def cluster_layer(rows: Sequence[RequestRecord], node: NodeLayer,
                  samples: Sequence[NodeSampleRecord], start: int, end: int,
                  settings: LayerSettings) -> ClusterLayer:
    duration_s = max(0, end - start) / 1000

    def rate(amount: float) -> float:
        return amount / duration_s if duration_s > 0 else 0.0

    ok = [r for r in rows if not r.is_error]
    output = sum(r.completion_tokens for r in ok)
    energy_j = math.fsum(n.energy_joules for n in node.nodes)
    kwh = energy_j / J_PER_KWH
    node_hours = sum(_covered_ms(mine, start, end)
                     for mine in _by_node(samples).values()) / 3.6e6
    cost = kwh * settings.price_per_kwh + node_hours * settings.price_per_node_hour
    sources = sorted({n.energy_source for n in node.nodes})
    utils = [n.utilization for n in node.nodes if n.utilization is not None]
    found = outages(samples, start, end, settings.gap_factor)
    recovered = [o.recovery_s for o in found if o.recovery_s is not None]
    return ClusterLayer(
        duration_s=duration_s, requests=len(rows), errors=len(rows) - len(ok),
        requests_per_s=rate(len(ok)), output_tokens_per_s=rate(output),
        input_tokens_per_s=rate(sum(r.prompt_tokens for r in ok)),
        utilization=math.fsum(utils) / len(utils) if utils else None,
        nodes=len(node.nodes), node_hours=node_hours, energy_kwh=kwh, energy_sources=sources,
        energy_modelled="model" in sources,
        kwh_per_1m_output_tokens=kwh / output * 1e6 if output > 0 and node.nodes else None,
        cost_usd=cost,
        cost_per_1m_output_tokens=cost / output * 1e6 if output > 0 and node.nodes else None,
        price_per_kwh=settings.price_per_kwh, price_per_node_hour=settings.price_per_node_hour,
        outages=found, max_recovery_s=max(recovered, default=None),
        series=_throughput_series(rows, start, end, settings.series_points))


def layered_report(rows: Sequence[RequestRecord], samples: Sequence[NodeSampleRecord],
                   tenant_classes: Mapping[str, str], start: int, end: int,
                   settings: LayerSettings, run: RunRecord | None = None,
                   tenant: str = "") -> LayeredReport:
    """All three layers over [start, end]. The request layer covers `tenant` only when one is
    named; the cluster layer always covers every tenant, since the nodes served them all."""
    window_s = max(0, end - start) / 1000
    chosen = [r for r in rows if r.tenant == tenant] if tenant else list(rows)
    node = node_layer(samples, start, end, settings)
    return LayeredReport(
        window_start_unix_ms=start, window_end_unix_ms=end, run=run,
        request=request_layer(chosen, tenant_classes, settings, window_s), node=node,
        cluster=cluster_layer(rows, node, samples, start, end, settings))
