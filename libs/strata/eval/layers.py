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
    SLA attainment: requests that succeeded within their class's targets (strata.core.sla)
    over all requests; goodput: those requests, and their output tokens, per window second.
    Fairness: Jain's index (sum x)^2 / (n * sum x^2) over tenants, x = output tokens / weight.

Node layer: per node, from its samples (strata.eval.node_layer).

Cluster layer:
    Throughput over the window: successful requests and their tokens per second.
    Energy: the nodes' energy; cost = kWh x price_per_kwh + node-hours x price_per_node_hour,
    per 1M output tokens. A node's hours are the part of the window its samples cover.
    Failure recovery: gaps in a node's samples (strata.eval.node_layer.outages).
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from strata.core.records import NodeSampleRecord, RequestRecord, RunRecord
from strata.core.sla import SlaTable
from strata.core.stats import Summary, percentile, percentiles, summarize
from strata.eval.node_layer import by_node, covered_ms, node_layer, outages
from strata.eval.report_types import (
    CDF_METRICS,
    CDF_QUANTILES,
    ClusterLayer,
    LatencyCdf,
    LatencyGroup,
    LayeredReport,
    NodeLayer,
    RequestLayer,
    Series,
)

ALL = "all"
J_PER_KWH = 3.6e6


@dataclass(slots=True, frozen=True)
class LayerSettings:
    sla: SlaTable = field(default_factory=SlaTable)
    tenant_weights: Mapping[str, float] = field(default_factory=dict)  # absent: weight 1
    price_per_kwh: float = 0.0
    price_per_node_hour: float = 0.0
    gap_factor: float = 3.0
    series_points: int = 120  # at most this many points per plotted series

    def weight(self, tenant: str) -> float:
        return self.tenant_weights.get(tenant, 1.0)


def jain_index(values: Sequence[float]) -> float | None:
    """Jain's fairness index: 1 when all equal, 1/n when one takes everything; None when there
    is nothing to share (no values, or all zero)."""
    square_sum = math.fsum(v * v for v in values)
    if not values or square_sum == 0:
        return None
    return math.fsum(values) ** 2 / (len(values) * square_sum)


def report_window(
    run: RunRecord | None,
    rows: Sequence[RequestRecord],
    since_unix_ms: int,
    sample_range: tuple[int, int] | None,
    now_unix_ms: int,
) -> tuple[int, int]:
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
    p50, p95, p99 = r.itl_p50_ms, r.itl_p95_ms, r.itl_p99_ms
    if p50 is not None and p95 is not None and p99 is not None:
        return p50, p95, p99
    return None if r.tpot_ms is None else (r.tpot_ms, r.tpot_ms, r.tpot_ms)


def _itl_summary(ok: Sequence[RequestRecord]) -> Summary | None:
    triples = [t for r in ok if (t := _itl_triple(r)) is not None]
    if not triples:
        return None
    p50s, p95s, p99s = zip(*triples, strict=True)
    return Summary(
        p50=percentile(p50s, 50),
        p95=percentile(p95s, 95),
        p99=percentile(p99s, 99),
        mean=math.fsum(p50s) / len(p50s),
        count=len(triples),
    )


def _itl_source(rows: Sequence[RequestRecord]) -> str:
    eligible = [r for r in rows if not r.is_error and _itl_triple(r) is not None]
    measured = sum(1 for r in eligible if r.itl_p50_ms is not None)
    if not eligible:
        return "none"
    if measured == len(eligible):
        return "gateway"
    return "tpot" if measured == 0 else "mixed"


_CDF_VALUE: dict[str, Callable[[RequestRecord], float | None]] = {
    "ttft_ms": lambda r: r.ttft_ms,
    "tpot_ms": _tpot,
    "e2e_ms": lambda r: r.e2e_ms,
}


def _group(
    key: str,
    sla_class: str,
    rows: Sequence[RequestRecord],
    attained: Callable[[RequestRecord], bool],
    window_s: float,
    weight: float = 0.0,
) -> LatencyGroup:
    ok = [r for r in rows if not r.is_error]
    good = [r for r in rows if attained(r)]
    return LatencyGroup(
        key=key,
        sla_class=sla_class,
        requests=len(rows),
        errors=len(rows) - len(ok),
        ttft_ms=summarize([r.ttft_ms for r in ok if r.ttft_ms is not None]),
        tpot_ms=summarize([t for r in ok if (t := _tpot(r)) is not None]),
        itl_ms=_itl_summary(ok),
        e2e_ms=summarize([r.e2e_ms for r in ok]),
        queue_ms=summarize([r.queue_ms for r in ok if r.queue_ms is not None]),
        prompt_tokens=sum(r.prompt_tokens for r in rows),
        completion_tokens=sum(r.completion_tokens for r in rows),
        attained=len(good),
        attainment=len(good) / len(rows) if rows else None,
        goodput_rps=len(good) / window_s if window_s > 0 else 0.0,
        goodput_tokens_per_s=(
            sum(r.completion_tokens for r in good) / window_s if window_s > 0 else 0.0
        ),
        weight=weight,
    )


def request_layer(
    rows: Sequence[RequestRecord],
    tenant_classes: Mapping[str, str],
    settings: LayerSettings,
    window_s: float,
) -> RequestLayer:
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
    tenants = [
        _group(t, class_of(t), by_tenant[t], attained, window_s, settings.weight(t))
        for t in sorted(by_tenant)
    ]
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
        tenants=tenants,
        sla_classes=classes,
        overall=_group(ALL, "", rows, attained, window_s),
        fairness_jain=fairness,
        itl_source=_itl_source(rows),
        sla_targets=targets,
        cdf_quantiles=list(CDF_QUANTILES),
        cdfs=cdfs,
    )


# -- cluster layer -------------------------------------------------------------------------


def _buckets(start: int, end: int, points: int) -> list[int]:
    """Bucket edges splitting [start, end] into at most `points` buckets of at least 1 s."""
    n = max(1, min(points, (end - start) // 1000))
    return [start + (end - start) * i // n for i in range(n + 1)]


def _throughput_series(
    rows: Sequence[RequestRecord], start: int, end: int, points: int
) -> list[Series]:
    if end <= start:
        return []
    edges = _buckets(start, end, points)
    done, tokens = [0.0] * (len(edges) - 1), [0.0] * (len(edges) - 1)
    for r in rows:
        finished = r.start_unix_ms + r.e2e_ms
        if r.is_error or not start <= finished <= end:
            continue
        i = min(len(done) - 1, max(0, bisect.bisect_right(edges, finished) - 1))
        done[i] += 1
        tokens[i] += r.completion_tokens
    mids = [(a + b) // 2 for a, b in zip(edges, edges[1:])]
    widths = [(b - a) / 1000 for a, b in zip(edges, edges[1:])]
    return [
        Series("requests_per_s", "", mids, [d / w for d, w in zip(done, widths)]),
        Series("output_tokens_per_s", "", mids, [t / w for t, w in zip(tokens, widths)]),
    ]


def cluster_layer(
    rows: Sequence[RequestRecord],
    node: NodeLayer,
    samples: Sequence[NodeSampleRecord],
    start: int,
    end: int,
    settings: LayerSettings,
) -> ClusterLayer:
    duration_s = max(0, end - start) / 1000

    def rate(amount: float) -> float:
        return amount / duration_s if duration_s > 0 else 0.0

    ok = [r for r in rows if not r.is_error]
    output = sum(r.completion_tokens for r in ok)
    energy_j = math.fsum(n.energy_joules for n in node.nodes)
    kwh = energy_j / J_PER_KWH
    node_hours = sum(covered_ms(mine, start, end) for mine in by_node(samples).values()) / 3.6e6
    cost = kwh * settings.price_per_kwh + node_hours * settings.price_per_node_hour
    sources = sorted({n.energy_source for n in node.nodes})
    utils = [n.utilization for n in node.nodes if n.utilization is not None]
    found = outages(samples, start, end, settings.gap_factor)
    recovered = [o.recovery_s for o in found if o.recovery_s is not None]
    return ClusterLayer(
        duration_s=duration_s,
        requests=len(rows),
        errors=len(rows) - len(ok),
        requests_per_s=rate(len(ok)),
        output_tokens_per_s=rate(output),
        input_tokens_per_s=rate(sum(r.prompt_tokens for r in ok)),
        utilization=math.fsum(utils) / len(utils) if utils else None,
        nodes=len(node.nodes),
        node_hours=node_hours,
        energy_kwh=kwh,
        energy_sources=sources,
        energy_modelled="model" in sources,
        kwh_per_1m_output_tokens=kwh / output * 1e6 if output > 0 and node.nodes else None,
        cost_usd=cost,
        cost_per_1m_output_tokens=cost / output * 1e6 if output > 0 and node.nodes else None,
        price_per_kwh=settings.price_per_kwh,
        price_per_node_hour=settings.price_per_node_hour,
        outages=found,
        max_recovery_s=max(recovered, default=None),
        series=_throughput_series(rows, start, end, settings.series_points),
    )


def layered_report(
    rows: Sequence[RequestRecord],
    samples: Sequence[NodeSampleRecord],
    tenant_classes: Mapping[str, str],
    start: int,
    end: int,
    settings: LayerSettings,
    run: RunRecord | None = None,
    tenant: str = "",
) -> LayeredReport:
    """All three layers over [start, end]. The request layer covers `tenant` only when one is
    named; the cluster layer always covers every tenant, since the nodes served them all."""
    window_s = max(0, end - start) / 1000
    chosen = [r for r in rows if r.tenant == tenant] if tenant else list(rows)
    node = node_layer(samples, start, end, settings.series_points)
    return LayeredReport(
        window_start_unix_ms=start,
        window_end_unix_ms=end,
        run=run,
        request=request_layer(chosen, tenant_classes, settings, window_s),
        node=node,
        cluster=cluster_layer(rows, node, samples, start, end, settings),
    )
