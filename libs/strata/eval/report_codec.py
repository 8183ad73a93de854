"""LayeredReport <-> the Metrics API's Report message, the one conversion both ends use: the
metrics collector fills a Report with fill_report, the CLI reads it back with from_report.

Optional figures (None in the dataclasses) are proto3 `optional` fields or unset messages, so
"not measured" survives the trip and never turns into a zero.
"""

from __future__ import annotations

from typing import Any

from strata.core.records import RunRecord
from strata.core.sla import SlaClass
from strata.core.stats import Summary
from strata.eval.report_types import (
    ClusterLayer,
    LatencyCdf,
    LatencyGroup,
    LayeredReport,
    NodeFigures,
    NodeLayer,
    Outage,
    RequestLayer,
    Series,
)
from strata.v1 import metrics_pb2


def summary_pb(s: Summary | None) -> metrics_pb2.Percentiles | None:
    if s is None:
        return None
    return metrics_pb2.Percentiles(p50=s.p50, p95=s.p95, p99=s.p99, mean=s.mean, count=s.count)


def _summary(msg, name: str) -> Summary | None:
    if not msg.HasField(name):
        return None
    p = getattr(msg, name)
    return Summary(p50=p.p50, p95=p.p95, p99=p.p99, mean=p.mean, count=p.count)


def _opt(msg, name: str) -> float | None:
    return getattr(msg, name) if msg.HasField(name) else None


def _fields(msg, plain: tuple[str, ...], optional: tuple[str, ...]) -> dict[str, Any]:
    """Keyword arguments read from msg: each plain field as it is, each optional one as _opt
    reads it (None when unset). The values' types vary with the field's name."""
    return {**{k: getattr(msg, k) for k in plain}, **{k: _opt(msg, k) for k in optional}}


def run_pb(r: RunRecord) -> metrics_pb2.RunInfo:
    return metrics_pb2.RunInfo(
        run_id=r.run_id,
        name=r.name,
        kind=r.kind,
        started_unix_ms=r.started_unix_ms,
        finished_unix_ms=r.finished_unix_ms or 0,
        params_json=r.params_json,
        client_summary_json=r.client_summary_json or "",
    )


def run_from_pb(m: metrics_pb2.RunInfo) -> RunRecord:
    return RunRecord(
        run_id=m.run_id,
        name=m.name,
        kind=m.kind,
        started_unix_ms=m.started_unix_ms,
        finished_unix_ms=m.finished_unix_ms or None,
        params_json=m.params_json,
        client_summary_json=m.client_summary_json or None,
    )


_GROUP_SUMMARIES = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "queue_ms")


def _group_pb(g: LatencyGroup) -> metrics_pb2.LatencyGroup:
    return metrics_pb2.LatencyGroup(
        key=g.key,
        sla_class=g.sla_class,
        requests=g.requests,
        errors=g.errors,
        prompt_tokens=g.prompt_tokens,
        completion_tokens=g.completion_tokens,
        attained=g.attained,
        attainment=g.attainment,
        goodput_rps=g.goodput_rps,
        goodput_tokens_per_s=g.goodput_tokens_per_s,
        weight=g.weight,
        **{n: summary_pb(getattr(g, n)) for n in _GROUP_SUMMARIES},
    )


def _group(m: metrics_pb2.LatencyGroup) -> LatencyGroup:
    return LatencyGroup(
        key=m.key,
        sla_class=m.sla_class,
        requests=m.requests,
        errors=m.errors,
        prompt_tokens=m.prompt_tokens,
        completion_tokens=m.completion_tokens,
        attained=m.attained,
        attainment=_opt(m, "attainment"),
        goodput_rps=m.goodput_rps,
        goodput_tokens_per_s=m.goodput_tokens_per_s,
        weight=m.weight,
        **{n: _summary(m, n) for n in _GROUP_SUMMARIES},
    )


def _series_pb(s: Series) -> metrics_pb2.Series:
    return metrics_pb2.Series(name=s.name, node_id=s.node_id, unix_ms=s.unix_ms, values=s.values)


def _series(m: metrics_pb2.Series) -> Series:
    return Series(name=m.name, node_id=m.node_id, unix_ms=list(m.unix_ms), values=list(m.values))


_NODE_PLAIN = (
    "node_id",
    "samples",
    "batch_tokens",
    "batch_budget",
    "prompt_tokens",
    "prefix_hit_tokens",
    "tier_hit_tokens",
    "preemptions",
    "kv_blocks_device_total",
    "kv_blocks_device_used_max",
    "kv_blocks_device_used_mean",
    "kv_blocks_host_max",
    "kv_blocks_disk_max",
    "energy_joules",
    "energy_source",
    "kv_blocks_evicted",
)
_NODE_OPTIONAL = (
    "utilization",
    "batch_utilization",
    "prefix_hit_rate",
    "tier_hit_rate",
    "mean_power_watts",
    "block_lifetime_mean_s",
    "block_lifetime_p50_s",
    "block_lifetime_p99_s",
)
_CLUSTER_PLAIN = (
    "duration_s",
    "requests",
    "errors",
    "requests_per_s",
    "output_tokens_per_s",
    "input_tokens_per_s",
    "nodes",
    "node_hours",
    "energy_kwh",
    "energy_modelled",
    "cost_usd",
    "price_per_kwh",
    "price_per_node_hour",
)
_CLUSTER_OPTIONAL = (
    "utilization",
    "kwh_per_1m_output_tokens",
    "cost_per_1m_output_tokens",
    "max_recovery_s",
)


def _node_pb(n: NodeFigures) -> metrics_pb2.NodeFigures:
    return metrics_pb2.NodeFigures(
        waiting=summary_pb(n.waiting),
        running=summary_pb(n.running),
        **{k: getattr(n, k) for k in _NODE_PLAIN + _NODE_OPTIONAL},
    )


def _node(m: metrics_pb2.NodeFigures) -> NodeFigures:
    return NodeFigures(
        waiting=_summary(m, "waiting"),
        running=_summary(m, "running"),
        **_fields(m, _NODE_PLAIN, _NODE_OPTIONAL),
    )


def fill_report(report: LayeredReport, out: metrics_pb2.Report) -> metrics_pb2.Report:
    """Write report's layers, window and run into out (a Report that may already carry the
    per-tenant table and span counts); returns out."""
    req, node, cl = report.request, report.node, report.cluster
    if report.run is not None:
        out.run.CopyFrom(run_pb(report.run))
    out.window_start_unix_ms = report.window_start_unix_ms
    out.window_end_unix_ms = report.window_end_unix_ms
    out.request_layer.CopyFrom(
        metrics_pb2.RequestLayer(
            tenants=[_group_pb(g) for g in req.tenants],
            sla_classes=[_group_pb(g) for g in req.sla_classes],
            overall=_group_pb(req.overall),
            fairness_jain=req.fairness_jain,
            itl_source=req.itl_source,
            sla_targets=[
                metrics_pb2.SlaTarget(
                    sla_class=c.name, ttft_ms=c.ttft_ms, tpot_ms=c.tpot_ms, priority=c.priority
                )
                for c in req.sla_targets
            ],
            cdf_quantiles=req.cdf_quantiles,
            cdfs=[
                metrics_pb2.LatencyCdf(group=c.group, metric=c.metric, values=c.values)
                for c in req.cdfs
            ],
        )
    )
    out.node_layer.CopyFrom(
        metrics_pb2.NodeLayer(
            nodes=[_node_pb(n) for n in node.nodes], series=[_series_pb(s) for s in node.series]
        )
    )
    out.cluster_layer.CopyFrom(
        metrics_pb2.ClusterLayer(
            energy_sources=cl.energy_sources,
            outages=[
                metrics_pb2.Outage(
                    node_id=o.node_id,
                    last_sample_unix_ms=o.last_sample_unix_ms,
                    next_sample_unix_ms=o.next_sample_unix_ms,
                    recovery_s=o.recovery_s,
                )
                for o in cl.outages
            ],
            series=[_series_pb(s) for s in cl.series],
            **{k: getattr(cl, k) for k in _CLUSTER_PLAIN + _CLUSTER_OPTIONAL},
        )
    )
    out.spans_received, out.spans_dropped = report.spans_received, report.spans_dropped
    return out


def from_report(m: metrics_pb2.Report) -> LayeredReport | None:
    """The layered report a Report carries; None from a collector that sends only the
    per-tenant table."""
    if not m.HasField("request_layer"):
        return None
    req, node, cl = m.request_layer, m.node_layer, m.cluster_layer
    return LayeredReport(
        window_start_unix_ms=m.window_start_unix_ms,
        window_end_unix_ms=m.window_end_unix_ms,
        run=run_from_pb(m.run) if m.HasField("run") else None,
        request=RequestLayer(
            tenants=[_group(g) for g in req.tenants],
            sla_classes=[_group(g) for g in req.sla_classes],
            overall=_group(req.overall),
            fairness_jain=_opt(req, "fairness_jain"),
            itl_source=req.itl_source,
            sla_targets=[
                SlaClass(t.sla_class, _opt(t, "ttft_ms"), _opt(t, "tpot_ms"), t.priority)
                for t in req.sla_targets
            ],
            cdf_quantiles=list(req.cdf_quantiles),
            cdfs=[LatencyCdf(c.group, c.metric, list(c.values)) for c in req.cdfs],
        ),
        node=NodeLayer(
            nodes=[_node(n) for n in node.nodes], series=[_series(s) for s in node.series]
        ),
        cluster=ClusterLayer(
            energy_sources=list(cl.energy_sources),
            outages=[
                Outage(
                    o.node_id, o.last_sample_unix_ms, o.next_sample_unix_ms, _opt(o, "recovery_s")
                )
                for o in cl.outages
            ],
            series=[_series(s) for s in cl.series],
            **_fields(cl, _CLUSTER_PLAIN, _CLUSTER_OPTIONAL),
        ),
        spans_received=m.spans_received,
        spans_dropped=m.spans_dropped,
    )
