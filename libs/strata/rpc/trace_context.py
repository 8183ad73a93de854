"""One trace across processes without a span per gRPC hop: the caller's span context travels in
W3C `traceparent` metadata on every internal call (the channels of strata.rpc.channels add it),
and the server attaches it while the handler runs (`TraceContextInterceptor`), so the spans a
servicer starts (strata.telemetry.names) are children of the caller's.

The OpenTelemetry gRPC instrumentation did the same and also opened a client and a server span
for every call; on this path those cost more than the work of some hops (docs/benchmarks/
serving.md), so Strata propagates the context alone.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import grpc

try:
    from opentelemetry import context as otel_context
    from opentelemetry import propagate
except ImportError:  # the client install (pip install .[client]) has no tracing to carry
    otel_context = propagate = None  # type: ignore[assignment]


def outgoing() -> list[tuple[str, str]]:
    """The current span context as call metadata (empty when there is none, or no
    OpenTelemetry is installed)."""
    if propagate is None:
        return []
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return list(carrier.items())


def _incoming(metadata) -> otel_context.Context | None:
    carrier = {k: v for k, v in metadata or () if isinstance(v, str)}
    if "traceparent" not in carrier:
        return None
    return propagate.extract(carrier)


class TraceContextInterceptor(grpc.aio.ServerInterceptor):
    """Attach the caller's span context (from its metadata) while each handler runs."""

    def __init__(self) -> None:
        # method -> (the handler as registered, its wrapped form)
        self._handlers: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    async def intercept_service(self, continuation, details: grpc.HandlerCallDetails):
        handler = await continuation(details)
        if handler is None:
            return handler
        cached = self._handlers.get(details.method)
        if cached is None or cached[0] is not handler:
            cached = self._handlers[details.method] = (handler, _wrap(handler))
        return cached[1]


def _wrap(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    kinds = (
        ("unary_unary", grpc.unary_unary_rpc_method_handler),
        ("unary_stream", grpc.unary_stream_rpc_method_handler),
        ("stream_unary", grpc.stream_unary_rpc_method_handler),
        ("stream_stream", grpc.stream_stream_rpc_method_handler),
    )
    for attr, make in kinds:
        behavior = getattr(handler, attr)
        if behavior is not None:
            return make(
                _attached(behavior),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
    return handler


def _attached(behavior: Callable) -> Callable:
    if inspect.isasyncgenfunction(behavior):

        async def stream(request, context):
            parent = _incoming(context.invocation_metadata())
            token = otel_context.attach(parent) if parent is not None else None
            try:
                async for reply in behavior(request, context):
                    yield reply
            finally:
                if token is not None:
                    otel_context.detach(token)

        return stream

    if not inspect.iscoroutinefunction(behavior):
        return behavior  # a plain function: none of Strata's handlers, nothing to attach

    async def call(request, context):
        parent = _incoming(context.invocation_metadata())
        token = otel_context.attach(parent) if parent is not None else None
        try:
            return await behavior(request, context)
        finally:
            if token is not None:
                otel_context.detach(token)

    return call
