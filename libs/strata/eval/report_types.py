"""The layered evaluation report as typed values: request, node and cluster figures of one
window, as strata.eval.layers computes them and the HTML, JSON and terminal renderings read them.

Latencies are milliseconds, rates per second, times Unix milliseconds. A figure that cannot be
computed from what was stored (no requests, no samples) is None rather than zero.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from strata.core.records import RunRecord
from strata.core.sla import SlaClass
from strata.core.stats import Summary

CDF_QUANTILES = tuple(float(q) for q in range(0, 101, 2))
CDF_METRICS = ("ttft_ms", "tpot_ms", "e2e_ms")


@dataclass(slots=True)
class LatencyGroup:
    """The requests of one tenant, one SLA class, or all of them (key "all")."""

    key: str
    sla_class: str
    requests: int
    errors: int
    ttft_ms: Summary | None
    tpot_ms: Summary | None
    itl_ms: Summary | None
    e2e_ms: Summary | None
    queue_ms: Summary | None
    prompt_tokens: int
    completion_tokens: int
    attained: int
    attainment: float | None
    goodput_rps: float
    goodput_tokens_per_s: float
    weight: float = 0.0


@dataclass(slots=True)
class LatencyCdf:
    group: str
    metric: str
    values: list[float]  # at RequestLayer.cdf_quantiles


@dataclass(slots=True)
class RequestLayer:
    tenants: list[LatencyGroup]
    sla_classes: list[LatencyGroup]
    overall: LatencyGroup
    fairness_jain: float | None
    itl_source: str
    sla_targets: list[SlaClass]
    cdf_quantiles: list[float]
    cdfs: list[LatencyCdf]


@dataclass(slots=True)
class Series:
    name: str
    node_id: str  # "" for a cluster-wide series
    unix_ms: list[int]
    values: list[float]


@dataclass(slots=True)
class NodeFigures:
    node_id: str
    samples: int
    utilization: float | None
    batch_utilization: float | None
    batch_tokens: int
    batch_budget: int
    prompt_tokens: int
    prefix_hit_tokens: int
    tier_hit_tokens: int
    prefix_hit_rate: float | None
    tier_hit_rate: float | None
    preemptions: int
    waiting: Summary | None
    running: Summary | None
    kv_blocks_device_total: int
    kv_blocks_device_used_max: int
    kv_blocks_device_used_mean: float
    kv_blocks_host_max: int
    kv_blocks_disk_max: int
    energy_joules: float
    mean_power_watts: float | None
    energy_source: str
    kv_blocks_evicted: int = 0
    block_lifetime_mean_s: float | None = None  # commit to eviction; None: no evictions
    block_lifetime_p50_s: float | None = None
    block_lifetime_p99_s: float | None = None


@dataclass(slots=True)
class NodeLayer:
    nodes: list[NodeFigures]
    series: list[Series]


@dataclass(slots=True)
class Outage:
    node_id: str
    last_sample_unix_ms: int
    next_sample_unix_ms: int  # 0: not back within the window
    recovery_s: float | None


@dataclass(slots=True)
class ClusterLayer:
    duration_s: float
    requests: int
    errors: int
    requests_per_s: float
    output_tokens_per_s: float
    input_tokens_per_s: float
    utilization: float | None
    nodes: int
    node_hours: float
    energy_kwh: float
    energy_sources: list[str]
    energy_modelled: bool
    kwh_per_1m_output_tokens: float | None
    cost_usd: float
    cost_per_1m_output_tokens: float | None
    price_per_kwh: float
    price_per_node_hour: float
    outages: list[Outage]
    max_recovery_s: float | None
    series: list[Series] = field(default_factory=list)


@dataclass(slots=True)
class LayeredReport:
    window_start_unix_ms: int
    window_end_unix_ms: int
    run: RunRecord | None
    request: RequestLayer
    node: NodeLayer
    cluster: ClusterLayer
    spans_received: int = 0
    spans_dropped: int = 0

    def to_json(self) -> dict:
        """Plain JSON values (nested dicts and lists), the document `strata report --json`
        writes."""
        return asdict(self)
