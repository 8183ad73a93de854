"""OTLP decoding: an ExportTraceServiceRequest becomes store SpanRecords.

Ids become lowercase hex (trace 32 characters, span 16, parent "" for a root span), the service
name comes from the resource attribute `service.name`, and attributes become plain JSON values:
arrays as lists, key-value lists as objects, bytes as hex strings.
"""

from __future__ import annotations

from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from strata.telemetry.span_record import SpanRecord

SERVICE_NAME_KEY = "service.name"
UNKNOWN_SERVICE = "unknown_service"  # what the OTel SDKs report when service.name is unset


def any_value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return attributes(value.kvlist_value.values)
    if kind == "bytes_value":
        return value.bytes_value.hex()
    if kind in ("string_value", "bool_value", "int_value", "double_value"):
        return getattr(value, kind)
    # string_value_strindex points into a profiles string table, which trace exports never carry.
    return None


def attributes(kvs: Any) -> dict[str, Any]:
    """A repeated KeyValue as a dict; a repeated key keeps its last value, as the SDKs do."""
    out: dict[str, Any] = {}
    kv: KeyValue
    for kv in kvs:
        out[kv.key] = any_value(kv.value)
    return out


def _valid_ids(span: Any) -> bool:
    return (
        len(span.trace_id) == 16
        and any(span.trace_id)
        and len(span.span_id) == 8
        and any(span.span_id)
        and len(span.parent_span_id) in (0, 8)
    )


def decode_export_request(request: ExportTraceServiceRequest) -> list[SpanRecord]:
    """The request's spans; spans whose ids are not 16/8 bytes (or are all zero) are left out,
    so `count_spans(request) - len(result)` of them were malformed."""
    spans: list[SpanRecord] = []
    for resource_spans in request.resource_spans:
        resource_attrs = attributes(resource_spans.resource.attributes)
        service = resource_attrs.get(SERVICE_NAME_KEY)
        service = str(service) if service else UNKNOWN_SERVICE
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                if not _valid_ids(span):
                    continue
                spans.append(
                    SpanRecord(
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(),
                        name=span.name,
                        service=service,
                        start_unix_nano=span.start_time_unix_nano,
                        end_unix_nano=span.end_time_unix_nano,
                        attributes=attributes(span.attributes),
                        status_code=int(span.status.code),
                    )
                )
    return spans


def count_spans(request: ExportTraceServiceRequest) -> int:
    return sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
