"""Tracing setup shared by every service: OTLP/gRPC export. The caller's span context crosses
processes in gRPC metadata (strata.rpc.trace_context, on every internal channel and server), so
one request keeps one trace id; the spans are the services' own (strata.telemetry.names).
"""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

from strata.security.identity import TOKEN_METADATA, ClusterIdentity


def init_tracing(
    service_name: str,
    otlp_endpoint: str | None,
    exporter: SpanExporter | None = None,
    identity: ClusterIdentity | None = None,
) -> TracerProvider:
    """Install a global tracer provider for this process.

    otlp_endpoint: host:port of an OTLP/gRPC receiver, or None/"" to export nowhere (spans still
    propagate context). exporter: an explicit exporter (tests pass an in-memory one).
    identity: the cluster credential the receiver (the metrics collector, or compose's
    OpenTelemetry Collector) asks for: mutual TLS and the internal token.
    """
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    if exporter is None and otlp_endpoint:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter,
        )

        if identity is None:
            exporter = OTLPSpanExporter(endpoint=otlp_endpoint, insecure=True)
        else:
            creds = identity.channel_credentials()
            exporter = OTLPSpanExporter(
                endpoint=otlp_endpoint,
                insecure=creds is None,
                credentials=creds,
                headers=((TOKEN_METADATA, identity.token),),
            )
    if exporter is not None:
        # Bounded queue: a slow collector costs dropped spans (counted by the SDK), never latency.
        provider.add_span_processor(
            BatchSpanProcessor(
                exporter, max_queue_size=8192, schedule_delay_millis=500, max_export_batch_size=512
            )
        )
    trace.set_tracer_provider(provider)
    return provider


def tracer(name: str) -> trace.Tracer:
    return trace.get_tracer(name)


def current_trace_id_hex() -> str:
    ctx = trace.get_current_span().get_span_context()
    return format(ctx.trace_id, "032x") if ctx.is_valid else ""
