from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ArrivalCurvesRequest(_message.Message):
    __slots__ = ("window_s", "windows", "end_unix_ms", "days", "burst_s")
    WINDOW_S_FIELD_NUMBER: _ClassVar[int]
    WINDOWS_FIELD_NUMBER: _ClassVar[int]
    END_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    DAYS_FIELD_NUMBER: _ClassVar[int]
    BURST_S_FIELD_NUMBER: _ClassVar[int]
    window_s: float
    windows: int
    end_unix_ms: int
    days: int
    burst_s: float
    def __init__(self, window_s: _Optional[float] = ..., windows: _Optional[int] = ..., end_unix_ms: _Optional[int] = ..., days: _Optional[int] = ..., burst_s: _Optional[float] = ...) -> None: ...

class ArrivalCurve(_message.Message):
    __slots__ = ("model", "requests", "prompt_tokens_mean", "output_tokens_mean", "sla", "burst_requests")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_MEAN_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_MEAN_FIELD_NUMBER: _ClassVar[int]
    SLA_FIELD_NUMBER: _ClassVar[int]
    BURST_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    model: str
    requests: _containers.RepeatedScalarFieldContainer[int]
    prompt_tokens_mean: _containers.RepeatedScalarFieldContainer[float]
    output_tokens_mean: _containers.RepeatedScalarFieldContainer[float]
    sla: SlaTarget
    burst_requests: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, model: _Optional[str] = ..., requests: _Optional[_Iterable[int]] = ..., prompt_tokens_mean: _Optional[_Iterable[float]] = ..., output_tokens_mean: _Optional[_Iterable[float]] = ..., sla: _Optional[_Union[SlaTarget, _Mapping]] = ..., burst_requests: _Optional[_Iterable[int]] = ...) -> None: ...

class ArrivalCurvesResponse(_message.Message):
    __slots__ = ("window_s", "start_unix_ms", "end_unix_ms", "observed_s", "curves", "burst_s")
    WINDOW_S_FIELD_NUMBER: _ClassVar[int]
    START_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    END_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_S_FIELD_NUMBER: _ClassVar[int]
    CURVES_FIELD_NUMBER: _ClassVar[int]
    BURST_S_FIELD_NUMBER: _ClassVar[int]
    window_s: float
    start_unix_ms: int
    end_unix_ms: int
    observed_s: _containers.RepeatedScalarFieldContainer[float]
    curves: _containers.RepeatedCompositeFieldContainer[ArrivalCurve]
    burst_s: float
    def __init__(self, window_s: _Optional[float] = ..., start_unix_ms: _Optional[int] = ..., end_unix_ms: _Optional[int] = ..., observed_s: _Optional[_Iterable[float]] = ..., curves: _Optional[_Iterable[_Union[ArrivalCurve, _Mapping]]] = ..., burst_s: _Optional[float] = ...) -> None: ...

class StartRunRequest(_message.Message):
    __slots__ = ("name", "kind", "params_json")
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    PARAMS_JSON_FIELD_NUMBER: _ClassVar[int]
    name: str
    kind: str
    params_json: str
    def __init__(self, name: _Optional[str] = ..., kind: _Optional[str] = ..., params_json: _Optional[str] = ...) -> None: ...

class FinishRunRequest(_message.Message):
    __slots__ = ("run_id", "client_summary_json")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_SUMMARY_JSON_FIELD_NUMBER: _ClassVar[int]
    run_id: int
    client_summary_json: str
    def __init__(self, run_id: _Optional[int] = ..., client_summary_json: _Optional[str] = ...) -> None: ...

class RunInfo(_message.Message):
    __slots__ = ("run_id", "name", "kind", "started_unix_ms", "finished_unix_ms", "params_json", "client_summary_json")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    STARTED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    FINISHED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    PARAMS_JSON_FIELD_NUMBER: _ClassVar[int]
    CLIENT_SUMMARY_JSON_FIELD_NUMBER: _ClassVar[int]
    run_id: int
    name: str
    kind: str
    started_unix_ms: int
    finished_unix_ms: int
    params_json: str
    client_summary_json: str
    def __init__(self, run_id: _Optional[int] = ..., name: _Optional[str] = ..., kind: _Optional[str] = ..., started_unix_ms: _Optional[int] = ..., finished_unix_ms: _Optional[int] = ..., params_json: _Optional[str] = ..., client_summary_json: _Optional[str] = ...) -> None: ...

class ListRunsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListRunsResponse(_message.Message):
    __slots__ = ("runs",)
    RUNS_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[RunInfo]
    def __init__(self, runs: _Optional[_Iterable[_Union[RunInfo, _Mapping]]] = ...) -> None: ...

class NodeSample(_message.Message):
    __slots__ = ("node_id", "unix_ms", "utilization", "batch_tokens", "batch_budget", "kv_blocks_device_used", "kv_blocks_device_total", "kv_blocks_host", "kv_blocks_disk", "running", "waiting", "preemptions", "power_watts", "energy_joules", "energy_source", "prefix_hit_tokens", "tier_hit_tokens", "prompt_tokens", "kv_blocks_evicted", "block_lifetime_sum_s", "block_lifetime_p50_s", "block_lifetime_p99_s", "sparse_layer_steps", "sparse_fallbacks")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    UTILIZATION_FIELD_NUMBER: _ClassVar[int]
    BATCH_TOKENS_FIELD_NUMBER: _ClassVar[int]
    BATCH_BUDGET_FIELD_NUMBER: _ClassVar[int]
    KV_BLOCKS_DEVICE_USED_FIELD_NUMBER: _ClassVar[int]
    KV_BLOCKS_DEVICE_TOTAL_FIELD_NUMBER: _ClassVar[int]
    KV_BLOCKS_HOST_FIELD_NUMBER: _ClassVar[int]
    KV_BLOCKS_DISK_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    PREEMPTIONS_FIELD_NUMBER: _ClassVar[int]
    POWER_WATTS_FIELD_NUMBER: _ClassVar[int]
    ENERGY_JOULES_FIELD_NUMBER: _ClassVar[int]
    ENERGY_SOURCE_FIELD_NUMBER: _ClassVar[int]
    PREFIX_HIT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TIER_HIT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    KV_BLOCKS_EVICTED_FIELD_NUMBER: _ClassVar[int]
    BLOCK_LIFETIME_SUM_S_FIELD_NUMBER: _ClassVar[int]
    BLOCK_LIFETIME_P50_S_FIELD_NUMBER: _ClassVar[int]
    BLOCK_LIFETIME_P99_S_FIELD_NUMBER: _ClassVar[int]
    SPARSE_LAYER_STEPS_FIELD_NUMBER: _ClassVar[int]
    SPARSE_FALLBACKS_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    unix_ms: int
    utilization: float
    batch_tokens: int
    batch_budget: int
    kv_blocks_device_used: int
    kv_blocks_device_total: int
    kv_blocks_host: int
    kv_blocks_disk: int
    running: int
    waiting: int
    preemptions: int
    power_watts: float
    energy_joules: float
    energy_source: str
    prefix_hit_tokens: int
    tier_hit_tokens: int
    prompt_tokens: int
    kv_blocks_evicted: int
    block_lifetime_sum_s: float
    block_lifetime_p50_s: float
    block_lifetime_p99_s: float
    sparse_layer_steps: int
    sparse_fallbacks: int
    def __init__(self, node_id: _Optional[str] = ..., unix_ms: _Optional[int] = ..., utilization: _Optional[float] = ..., batch_tokens: _Optional[int] = ..., batch_budget: _Optional[int] = ..., kv_blocks_device_used: _Optional[int] = ..., kv_blocks_device_total: _Optional[int] = ..., kv_blocks_host: _Optional[int] = ..., kv_blocks_disk: _Optional[int] = ..., running: _Optional[int] = ..., waiting: _Optional[int] = ..., preemptions: _Optional[int] = ..., power_watts: _Optional[float] = ..., energy_joules: _Optional[float] = ..., energy_source: _Optional[str] = ..., prefix_hit_tokens: _Optional[int] = ..., tier_hit_tokens: _Optional[int] = ..., prompt_tokens: _Optional[int] = ..., kv_blocks_evicted: _Optional[int] = ..., block_lifetime_sum_s: _Optional[float] = ..., block_lifetime_p50_s: _Optional[float] = ..., block_lifetime_p99_s: _Optional[float] = ..., sparse_layer_steps: _Optional[int] = ..., sparse_fallbacks: _Optional[int] = ...) -> None: ...

class NodeSamplesRequest(_message.Message):
    __slots__ = ("samples",)
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    samples: _containers.RepeatedCompositeFieldContainer[NodeSample]
    def __init__(self, samples: _Optional[_Iterable[_Union[NodeSample, _Mapping]]] = ...) -> None: ...

class NodeSamplesResponse(_message.Message):
    __slots__ = ("stored",)
    STORED_FIELD_NUMBER: _ClassVar[int]
    stored: int
    def __init__(self, stored: _Optional[int] = ...) -> None: ...

class ReportRequest(_message.Message):
    __slots__ = ("tenant", "since_unix_ms", "run_id")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    SINCE_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    since_unix_ms: int
    run_id: int
    def __init__(self, tenant: _Optional[str] = ..., since_unix_ms: _Optional[int] = ..., run_id: _Optional[int] = ...) -> None: ...

class Percentiles(_message.Message):
    __slots__ = ("p50", "p95", "p99", "mean", "count")
    P50_FIELD_NUMBER: _ClassVar[int]
    P95_FIELD_NUMBER: _ClassVar[int]
    P99_FIELD_NUMBER: _ClassVar[int]
    MEAN_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    p50: float
    p95: float
    p99: float
    mean: float
    count: int
    def __init__(self, p50: _Optional[float] = ..., p95: _Optional[float] = ..., p99: _Optional[float] = ..., mean: _Optional[float] = ..., count: _Optional[int] = ...) -> None: ...

class TenantReport(_message.Message):
    __slots__ = ("tenant", "requests", "errors", "ttft_ms", "tpot_ms", "e2e_ms", "prompt_tokens", "completion_tokens")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    TTFT_MS_FIELD_NUMBER: _ClassVar[int]
    TPOT_MS_FIELD_NUMBER: _ClassVar[int]
    E2E_MS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    requests: int
    errors: int
    ttft_ms: Percentiles
    tpot_ms: Percentiles
    e2e_ms: Percentiles
    prompt_tokens: int
    completion_tokens: int
    def __init__(self, tenant: _Optional[str] = ..., requests: _Optional[int] = ..., errors: _Optional[int] = ..., ttft_ms: _Optional[_Union[Percentiles, _Mapping]] = ..., tpot_ms: _Optional[_Union[Percentiles, _Mapping]] = ..., e2e_ms: _Optional[_Union[Percentiles, _Mapping]] = ..., prompt_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ...) -> None: ...

class Report(_message.Message):
    __slots__ = ("tenants", "spans_received", "spans_dropped", "run", "window_start_unix_ms", "window_end_unix_ms", "request_layer", "node_layer", "cluster_layer")
    TENANTS_FIELD_NUMBER: _ClassVar[int]
    SPANS_RECEIVED_FIELD_NUMBER: _ClassVar[int]
    SPANS_DROPPED_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    WINDOW_START_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    WINDOW_END_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_LAYER_FIELD_NUMBER: _ClassVar[int]
    NODE_LAYER_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_LAYER_FIELD_NUMBER: _ClassVar[int]
    tenants: _containers.RepeatedCompositeFieldContainer[TenantReport]
    spans_received: int
    spans_dropped: int
    run: RunInfo
    window_start_unix_ms: int
    window_end_unix_ms: int
    request_layer: RequestLayer
    node_layer: NodeLayer
    cluster_layer: ClusterLayer
    def __init__(self, tenants: _Optional[_Iterable[_Union[TenantReport, _Mapping]]] = ..., spans_received: _Optional[int] = ..., spans_dropped: _Optional[int] = ..., run: _Optional[_Union[RunInfo, _Mapping]] = ..., window_start_unix_ms: _Optional[int] = ..., window_end_unix_ms: _Optional[int] = ..., request_layer: _Optional[_Union[RequestLayer, _Mapping]] = ..., node_layer: _Optional[_Union[NodeLayer, _Mapping]] = ..., cluster_layer: _Optional[_Union[ClusterLayer, _Mapping]] = ...) -> None: ...

class SlaTarget(_message.Message):
    __slots__ = ("sla_class", "ttft_ms", "tpot_ms", "priority")
    SLA_CLASS_FIELD_NUMBER: _ClassVar[int]
    TTFT_MS_FIELD_NUMBER: _ClassVar[int]
    TPOT_MS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    sla_class: str
    ttft_ms: float
    tpot_ms: float
    priority: int
    def __init__(self, sla_class: _Optional[str] = ..., ttft_ms: _Optional[float] = ..., tpot_ms: _Optional[float] = ..., priority: _Optional[int] = ...) -> None: ...

class LatencyGroup(_message.Message):
    __slots__ = ("key", "sla_class", "requests", "errors", "ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "queue_ms", "prompt_tokens", "completion_tokens", "attained", "attainment", "goodput_rps", "goodput_tokens_per_s", "weight")
    KEY_FIELD_NUMBER: _ClassVar[int]
    SLA_CLASS_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    TTFT_MS_FIELD_NUMBER: _ClassVar[int]
    TPOT_MS_FIELD_NUMBER: _ClassVar[int]
    ITL_MS_FIELD_NUMBER: _ClassVar[int]
    E2E_MS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_MS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ATTAINED_FIELD_NUMBER: _ClassVar[int]
    ATTAINMENT_FIELD_NUMBER: _ClassVar[int]
    GOODPUT_RPS_FIELD_NUMBER: _ClassVar[int]
    GOODPUT_TOKENS_PER_S_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    key: str
    sla_class: str
    requests: int
    errors: int
    ttft_ms: Percentiles
    tpot_ms: Percentiles
    itl_ms: Percentiles
    e2e_ms: Percentiles
    queue_ms: Percentiles
    prompt_tokens: int
    completion_tokens: int
    attained: int
    attainment: float
    goodput_rps: float
    goodput_tokens_per_s: float
    weight: float
    def __init__(self, key: _Optional[str] = ..., sla_class: _Optional[str] = ..., requests: _Optional[int] = ..., errors: _Optional[int] = ..., ttft_ms: _Optional[_Union[Percentiles, _Mapping]] = ..., tpot_ms: _Optional[_Union[Percentiles, _Mapping]] = ..., itl_ms: _Optional[_Union[Percentiles, _Mapping]] = ..., e2e_ms: _Optional[_Union[Percentiles, _Mapping]] = ..., queue_ms: _Optional[_Union[Percentiles, _Mapping]] = ..., prompt_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ..., attained: _Optional[int] = ..., attainment: _Optional[float] = ..., goodput_rps: _Optional[float] = ..., goodput_tokens_per_s: _Optional[float] = ..., weight: _Optional[float] = ...) -> None: ...

class LatencyCdf(_message.Message):
    __slots__ = ("group", "metric", "values")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    METRIC_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    group: str
    metric: str
    values: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, group: _Optional[str] = ..., metric: _Optional[str] = ..., values: _Optional[_Iterable[float]] = ...) -> None: ...

class RequestLayer(_message.Message):
    __slots__ = ("tenants", "sla_classes", "overall", "fairness_jain", "itl_source", "sla_targets", "cdf_quantiles", "cdfs")
    TENANTS_FIELD_NUMBER: _ClassVar[int]
    SLA_CLASSES_FIELD_NUMBER: _ClassVar[int]
    OVERALL_FIELD_NUMBER: _ClassVar[int]
    FAIRNESS_JAIN_FIELD_NUMBER: _ClassVar[int]
    ITL_SOURCE_FIELD_NUMBER: _ClassVar[int]
    SLA_TARGETS_FIELD_NUMBER: _ClassVar[int]
    CDF_QUANTILES_FIELD_NUMBER: _ClassVar[int]
    CDFS_FIELD_NUMBER: _ClassVar[int]
    tenants: _containers.RepeatedCompositeFieldContainer[LatencyGroup]
    sla_classes: _containers.RepeatedCompositeFieldContainer[LatencyGroup]
    overall: LatencyGroup
    fairness_jain: float
    itl_source: str
    sla_targets: _containers.RepeatedCompositeFieldContainer[SlaTarget]
    cdf_quantiles: _containers.RepeatedScalarFieldContainer[float]
    cdfs: _containers.RepeatedCompositeFieldContainer[LatencyCdf]
    def __init__(self, tenants: _Optional[_Iterable[_Union[LatencyGroup, _Mapping]]] = ..., sla_classes: _Optional[_Iterable[_Union[LatencyGroup, _Mapping]]] = ..., overall: _Optional[_Union[LatencyGroup, _Mapping]] = ..., fairness_jain: _Optional[float] = ..., itl_source: _Optional[str] = ..., sla_targets: _Optional[_Iterable[_Union[SlaTarget, _Mapping]]] = ..., cdf_quantiles: _Optional[_Iterable[float]] = ..., cdfs: _Optional[_Iterable[_Union[LatencyCdf, _Mapping]]] = ...) -> None: ...

class Series(_message.Message):
    __slots__ = ("name", "node_id", "unix_ms", "values")
    NAME_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    name: str
    node_id: str
    unix_ms: _containers.RepeatedScalarFieldContainer[int]
    values: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, name: _Optional[str] = ..., node_id: _Optional[str] = ..., unix_ms: _Optional[_Iterable[int]] = ..., values: _Optional[_Iterable[float]] = ...) -> None: ...

class NodeFigures(_message.Message):
    __slots__ = ("node_id", "samples", "utilization", "batch_utilization", "batch_tokens", "batch_budget", "prompt_tokens", "prefix_hit_tokens", "tier_hit_tokens", "prefix_hit_rate", "tier_hit_rate", "preemptions", "waiting", "running", "kv_blocks_device_total", "kv_blocks_device_used_max", "kv_blocks_device_used_mean", "kv_blocks_host_max", "kv_blocks_disk_max", "energy_joules", "mean_power_watts", "energy_source", "kv_blocks_evicted", "block_lifetime_mean_s", "block_lifetime_p50_s", "block_lifetime_p99_s")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    UTILIZATION_FIELD_NUMBER: _ClassVar[int]
    BATCH_UTILIZATION_FIELD_NUMBER: _ClassVar[int]
    BATCH_TOKENS_FIELD_NUMBER: _ClassVar[int]
    BATCH_BUDGET_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PREFIX_HIT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TIER_HIT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PREFIX_HIT_RATE_FIELD_NUMBER: _ClassVar[int]
    TIER_HIT_RATE_FIELD_NUMBER: _ClassVar[int]
    PREEMPTIONS_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    KV_BLOCKS_DEVICE_TOTAL_FIELD_NUMBER: _ClassVar[int]
    KV_BLOCKS_DEVICE_USED_MAX_FIELD_NUMBER: _ClassVar[int]
    KV_BLOCKS_DEVICE_USED_MEAN_FIELD_NUMBER: _ClassVar[int]
    KV_BLOCKS_HOST_MAX_FIELD_NUMBER: _ClassVar[int]
    KV_BLOCKS_DISK_MAX_FIELD_NUMBER: _ClassVar[int]
    ENERGY_JOULES_FIELD_NUMBER: _ClassVar[int]
    MEAN_POWER_WATTS_FIELD_NUMBER: _ClassVar[int]
    ENERGY_SOURCE_FIELD_NUMBER: _ClassVar[int]
    KV_BLOCKS_EVICTED_FIELD_NUMBER: _ClassVar[int]
    BLOCK_LIFETIME_MEAN_S_FIELD_NUMBER: _ClassVar[int]
    BLOCK_LIFETIME_P50_S_FIELD_NUMBER: _ClassVar[int]
    BLOCK_LIFETIME_P99_S_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    samples: int
    utilization: float
    batch_utilization: float
    batch_tokens: int
    batch_budget: int
    prompt_tokens: int
    prefix_hit_tokens: int
    tier_hit_tokens: int
    prefix_hit_rate: float
    tier_hit_rate: float
    preemptions: int
    waiting: Percentiles
    running: Percentiles
    kv_blocks_device_total: int
    kv_blocks_device_used_max: int
    kv_blocks_device_used_mean: float
    kv_blocks_host_max: int
    kv_blocks_disk_max: int
    energy_joules: float
    mean_power_watts: float
    energy_source: str
    kv_blocks_evicted: int
    block_lifetime_mean_s: float
    block_lifetime_p50_s: float
    block_lifetime_p99_s: float
    def __init__(self, node_id: _Optional[str] = ..., samples: _Optional[int] = ..., utilization: _Optional[float] = ..., batch_utilization: _Optional[float] = ..., batch_tokens: _Optional[int] = ..., batch_budget: _Optional[int] = ..., prompt_tokens: _Optional[int] = ..., prefix_hit_tokens: _Optional[int] = ..., tier_hit_tokens: _Optional[int] = ..., prefix_hit_rate: _Optional[float] = ..., tier_hit_rate: _Optional[float] = ..., preemptions: _Optional[int] = ..., waiting: _Optional[_Union[Percentiles, _Mapping]] = ..., running: _Optional[_Union[Percentiles, _Mapping]] = ..., kv_blocks_device_total: _Optional[int] = ..., kv_blocks_device_used_max: _Optional[int] = ..., kv_blocks_device_used_mean: _Optional[float] = ..., kv_blocks_host_max: _Optional[int] = ..., kv_blocks_disk_max: _Optional[int] = ..., energy_joules: _Optional[float] = ..., mean_power_watts: _Optional[float] = ..., energy_source: _Optional[str] = ..., kv_blocks_evicted: _Optional[int] = ..., block_lifetime_mean_s: _Optional[float] = ..., block_lifetime_p50_s: _Optional[float] = ..., block_lifetime_p99_s: _Optional[float] = ...) -> None: ...

class NodeLayer(_message.Message):
    __slots__ = ("nodes", "series")
    NODES_FIELD_NUMBER: _ClassVar[int]
    SERIES_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[NodeFigures]
    series: _containers.RepeatedCompositeFieldContainer[Series]
    def __init__(self, nodes: _Optional[_Iterable[_Union[NodeFigures, _Mapping]]] = ..., series: _Optional[_Iterable[_Union[Series, _Mapping]]] = ...) -> None: ...

class Outage(_message.Message):
    __slots__ = ("node_id", "last_sample_unix_ms", "next_sample_unix_ms", "recovery_s")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_SAMPLE_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    NEXT_SAMPLE_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    RECOVERY_S_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    last_sample_unix_ms: int
    next_sample_unix_ms: int
    recovery_s: float
    def __init__(self, node_id: _Optional[str] = ..., last_sample_unix_ms: _Optional[int] = ..., next_sample_unix_ms: _Optional[int] = ..., recovery_s: _Optional[float] = ...) -> None: ...

class ClusterLayer(_message.Message):
    __slots__ = ("duration_s", "requests", "errors", "requests_per_s", "output_tokens_per_s", "input_tokens_per_s", "utilization", "nodes", "node_hours", "energy_kwh", "energy_sources", "energy_modelled", "kwh_per_1m_output_tokens", "cost_usd", "cost_per_1m_output_tokens", "price_per_kwh", "price_per_node_hour", "outages", "max_recovery_s", "series")
    DURATION_S_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_PER_S_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_PER_S_FIELD_NUMBER: _ClassVar[int]
    INPUT_TOKENS_PER_S_FIELD_NUMBER: _ClassVar[int]
    UTILIZATION_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    NODE_HOURS_FIELD_NUMBER: _ClassVar[int]
    ENERGY_KWH_FIELD_NUMBER: _ClassVar[int]
    ENERGY_SOURCES_FIELD_NUMBER: _ClassVar[int]
    ENERGY_MODELLED_FIELD_NUMBER: _ClassVar[int]
    KWH_PER_1M_OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COST_USD_FIELD_NUMBER: _ClassVar[int]
    COST_PER_1M_OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PRICE_PER_KWH_FIELD_NUMBER: _ClassVar[int]
    PRICE_PER_NODE_HOUR_FIELD_NUMBER: _ClassVar[int]
    OUTAGES_FIELD_NUMBER: _ClassVar[int]
    MAX_RECOVERY_S_FIELD_NUMBER: _ClassVar[int]
    SERIES_FIELD_NUMBER: _ClassVar[int]
    duration_s: float
    requests: int
    errors: int
    requests_per_s: float
    output_tokens_per_s: float
    input_tokens_per_s: float
    utilization: float
    nodes: int
    node_hours: float
    energy_kwh: float
    energy_sources: _containers.RepeatedScalarFieldContainer[str]
    energy_modelled: bool
    kwh_per_1m_output_tokens: float
    cost_usd: float
    cost_per_1m_output_tokens: float
    price_per_kwh: float
    price_per_node_hour: float
    outages: _containers.RepeatedCompositeFieldContainer[Outage]
    max_recovery_s: float
    series: _containers.RepeatedCompositeFieldContainer[Series]
    def __init__(self, duration_s: _Optional[float] = ..., requests: _Optional[int] = ..., errors: _Optional[int] = ..., requests_per_s: _Optional[float] = ..., output_tokens_per_s: _Optional[float] = ..., input_tokens_per_s: _Optional[float] = ..., utilization: _Optional[float] = ..., nodes: _Optional[int] = ..., node_hours: _Optional[float] = ..., energy_kwh: _Optional[float] = ..., energy_sources: _Optional[_Iterable[str]] = ..., energy_modelled: _Optional[bool] = ..., kwh_per_1m_output_tokens: _Optional[float] = ..., cost_usd: _Optional[float] = ..., cost_per_1m_output_tokens: _Optional[float] = ..., price_per_kwh: _Optional[float] = ..., price_per_node_hour: _Optional[float] = ..., outages: _Optional[_Iterable[_Union[Outage, _Mapping]]] = ..., max_recovery_s: _Optional[float] = ..., series: _Optional[_Iterable[_Union[Series, _Mapping]]] = ...) -> None: ...

class GetTraceRequest(_message.Message):
    __slots__ = ("trace_id",)
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    trace_id: str
    def __init__(self, trace_id: _Optional[str] = ...) -> None: ...

class SpanRecord(_message.Message):
    __slots__ = ("trace_id", "span_id", "parent_span_id", "name", "service", "start_unix_nano", "end_unix_nano", "attributes_json", "status_code")
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    SPAN_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_SPAN_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    START_UNIX_NANO_FIELD_NUMBER: _ClassVar[int]
    END_UNIX_NANO_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_JSON_FIELD_NUMBER: _ClassVar[int]
    STATUS_CODE_FIELD_NUMBER: _ClassVar[int]
    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    service: str
    start_unix_nano: int
    end_unix_nano: int
    attributes_json: str
    status_code: int
    def __init__(self, trace_id: _Optional[str] = ..., span_id: _Optional[str] = ..., parent_span_id: _Optional[str] = ..., name: _Optional[str] = ..., service: _Optional[str] = ..., start_unix_nano: _Optional[int] = ..., end_unix_nano: _Optional[int] = ..., attributes_json: _Optional[str] = ..., status_code: _Optional[int] = ...) -> None: ...

class Trace(_message.Message):
    __slots__ = ("spans",)
    SPANS_FIELD_NUMBER: _ClassVar[int]
    spans: _containers.RepeatedCompositeFieldContainer[SpanRecord]
    def __init__(self, spans: _Optional[_Iterable[_Union[SpanRecord, _Mapping]]] = ...) -> None: ...
