"""OTLP decoding: ids as hex, service from the resource, attributes as JSON values."""

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import (
    AnyValue,
    ArrayValue,
    KeyValue,
    KeyValueList,
)
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import (
    ResourceSpans,
    ScopeSpans,
    Span,
    Status,
)

from strata.store.spans import SpanRecord
from strata.telemetry.otlp import count_spans, decode_export_request

TRACE = bytes.fromhex("0af7651916cd43dd8448eb211c80319c")


def kv(key: str, **value) -> KeyValue:
    return KeyValue(key=key, value=AnyValue(**value))


def make_request(*spans: Span, service: str | None = "gateway") -> ExportTraceServiceRequest:
    resource = Resource(attributes=[kv("service.name", string_value=service)] if service else [])
    return ExportTraceServiceRequest(
        resource_spans=[
            ResourceSpans(resource=resource, scope_spans=[ScopeSpans(spans=list(spans))])
        ]
    )


def test_span_fields_and_every_attribute_type():
    span = Span(
        trace_id=TRACE,
        span_id=bytes.fromhex("b7ad6b7169203331"),
        parent_span_id=bytes.fromhex("00f067aa0ba902b7"),
        name="strata.gateway.generate",
        start_time_unix_nano=1_700_000_000_000_000_001,
        end_time_unix_nano=1_700_000_000_500_000_000,
        status=Status(code=Status.STATUS_CODE_ERROR),
        attributes=[
            kv("s", string_value="x"),
            kv("b", bool_value=True),
            kv("i", int_value=-7),
            kv("d", double_value=2.5),
            kv("raw", bytes_value=b"\x01\xff"),
            kv(
                "arr",
                array_value=ArrayValue(
                    values=[AnyValue(string_value="stop"), AnyValue(int_value=3)]
                ),
            ),
            kv("map", kvlist_value=KeyValueList(values=[kv("k", string_value="v")])),
            KeyValue(key="empty"),
        ],
    )
    (record,) = decode_export_request(make_request(span))
    assert record == SpanRecord(
        trace_id="0af7651916cd43dd8448eb211c80319c",
        span_id="b7ad6b7169203331",
        parent_span_id="00f067aa0ba902b7",
        name="strata.gateway.generate",
        service="gateway",
        start_unix_nano=1_700_000_000_000_000_001,
        end_unix_nano=1_700_000_000_500_000_000,
        attributes={
            "s": "x",
            "b": True,
            "i": -7,
            "d": 2.5,
            "raw": "01ff",
            "arr": ["stop", 3],
            "map": {"k": "v"},
            "empty": None,
        },
        status_code=2,
    )
    assert record.attributes_json() == (
        '{"arr":["stop",3],"b":true,"d":2.5,"empty":null,"i":-7,"map":{"k":"v"},'
        '"raw":"01ff","s":"x"}'
    )


def test_root_span_has_empty_parent_and_missing_service_is_unknown():
    span = Span(trace_id=TRACE, span_id=b"\x00" * 7 + b"\x01", name="root")
    (record,) = decode_export_request(make_request(span, service=None))
    assert (record.parent_span_id, record.service, record.span_id) == (
        "",
        "unknown_service",
        "0000000000000001",
    )


def test_spans_with_malformed_ids_are_left_out():
    good = Span(trace_id=TRACE, span_id=b"\x01" * 8, name="ok")
    short_trace = Span(trace_id=TRACE[:8], span_id=b"\x01" * 8, name="short")
    zero_span = Span(trace_id=TRACE, span_id=b"\x00" * 8, name="zero")
    bad_parent = Span(trace_id=TRACE, span_id=b"\x02" * 8, parent_span_id=b"\x01", name="p")
    request = make_request(good, short_trace, zero_span, bad_parent)
    assert [s.name for s in decode_export_request(request)] == ["ok"]
    assert count_spans(request) == 4
