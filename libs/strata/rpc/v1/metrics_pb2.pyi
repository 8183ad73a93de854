from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ReportRequest(_message.Message):
    __slots__ = ("tenant", "since_unix_ms")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    SINCE_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    since_unix_ms: int
    def __init__(self, tenant: _Optional[str] = ..., since_unix_ms: _Optional[int] = ...) -> None: ...

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
