from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

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
    __slots__ = ("run_id", "name", "kind", "started_unix_ms", "finished_unix_ms", "params_json")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    STARTED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    FINISHED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    PARAMS_JSON_FIELD_NUMBER: _ClassVar[int]
    run_id: int
    name: str
    kind: str
    started_unix_ms: int
    finished_unix_ms: int
    params_json: str
    def __init__(self, run_id: _Optional[int] = ..., name: _Optional[str] = ..., kind: _Optional[str] = ..., started_unix_ms: _Optional[int] = ..., finished_unix_ms: _Optional[int] = ..., params_json: _Optional[str] = ...) -> None: ...

class ListRunsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListRunsResponse(_message.Message):
    __slots__ = ("runs",)
    RUNS_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[RunInfo]
    def __init__(self, runs: _Optional[_Iterable[_Union[RunInfo, _Mapping]]] = ...) -> None: ...

class NodeSample(_message.Message):
    __slots__ = ("node_id", "unix_ms", "utilization", "batch_tokens", "batch_budget", "kv_blocks_device_used", "kv_blocks_device_total", "kv_blocks_host", "kv_blocks_disk", "running", "waiting", "preemptions", "power_watts", "energy_joules", "energy_source", "prefix_hit_tokens", "tier_hit_tokens", "prompt_tokens")
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
    def __init__(self, node_id: _Optional[str] = ..., unix_ms: _Optional[int] = ..., utilization: _Optional[float] = ..., batch_tokens: _Optional[int] = ..., batch_budget: _Optional[int] = ..., kv_blocks_device_used: _Optional[int] = ..., kv_blocks_device_total: _Optional[int] = ..., kv_blocks_host: _Optional[int] = ..., kv_blocks_disk: _Optional[int] = ..., running: _Optional[int] = ..., waiting: _Optional[int] = ..., preemptions: _Optional[int] = ..., power_watts: _Optional[float] = ..., energy_joules: _Optional[float] = ..., energy_source: _Optional[str] = ..., prefix_hit_tokens: _Optional[int] = ..., tier_hit_tokens: _Optional[int] = ..., prompt_tokens: _Optional[int] = ...) -> None: ...

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
    __slots__ = ("p50", "p95", "p99", "mean")
    P50_FIELD_NUMBER: _ClassVar[int]
    P95_FIELD_NUMBER: _ClassVar[int]
    P99_FIELD_NUMBER: _ClassVar[int]
    MEAN_FIELD_NUMBER: _ClassVar[int]
    p50: float
    p95: float
    p99: float
    mean: float
    def __init__(self, p50: _Optional[float] = ..., p95: _Optional[float] = ..., p99: _Optional[float] = ..., mean: _Optional[float] = ...) -> None: ...

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
    __slots__ = ("tenants", "spans_received", "spans_dropped")
    TENANTS_FIELD_NUMBER: _ClassVar[int]
    SPANS_RECEIVED_FIELD_NUMBER: _ClassVar[int]
    SPANS_DROPPED_FIELD_NUMBER: _ClassVar[int]
    tenants: _containers.RepeatedCompositeFieldContainer[TenantReport]
    spans_received: int
    spans_dropped: int
    def __init__(self, tenants: _Optional[_Iterable[_Union[TenantReport, _Mapping]]] = ..., spans_received: _Optional[int] = ..., spans_dropped: _Optional[int] = ...) -> None: ...

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
