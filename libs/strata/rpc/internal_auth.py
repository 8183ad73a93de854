"""The server side of the cluster credential: internal servers refuse every call without the
internal token (UNAUTHENTICATED), health checks and reflection excepted; without a client
certificate the cluster CA signed, the mutual-TLS handshake itself fails (strata.rpc.server)."""

from __future__ import annotations

import grpc

from strata.security.identity import ClusterIdentity

# Methods anyone may call on an internal server: liveness, and the API's own description.
EXEMPT_PREFIXES = ("/grpc.health.v1.Health/", "/grpc.reflection.")
REFUSED = (
    "this is an internal Strata service: calls need the cluster's internal credential "
    "(tenants call the gateway)"
)


def exempt(method: str) -> bool:
    return method.startswith(EXEMPT_PREFIXES)


def _refusal(handler: grpc.RpcMethodHandler, unary, stream) -> grpc.RpcMethodHandler:
    """A handler of the same shape as `handler` whose every call is refused: `stream` for a
    response stream (a generator, as tracing's interceptor iterates it), else `unary`."""
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(
            stream, request_deserializer=None, response_serializer=handler.response_serializer
        )
    return grpc.unary_unary_rpc_method_handler(
        unary, request_deserializer=None, response_serializer=handler.response_serializer
    )


class InternalAuthInterceptor(grpc.aio.ServerInterceptor):
    """Refuses every call without the cluster's token, but health checks and reflection."""

    def __init__(self, identity: ClusterIdentity):
        self._identity = identity

    async def intercept_service(self, continuation, details: grpc.HandlerCallDetails):
        if exempt(details.method) or self._identity.accepts(details.invocation_metadata):
            return await continuation(details)
        handler = await continuation(details)
        if handler is None:
            return None

        async def refuse(request, context):
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, REFUSED)

        async def refuse_stream(request, context):
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, REFUSED)
            yield  # unreachable: makes this an async generator

        return _refusal(handler, refuse, refuse_stream)


class SyncInternalAuthInterceptor(grpc.ServerInterceptor):
    """The same check for a thread-pool gRPC server (the OTLP receiver)."""

    def __init__(self, identity: ClusterIdentity):
        self._identity = identity

    def intercept_service(self, continuation, details: grpc.HandlerCallDetails):
        if exempt(details.method) or self._identity.accepts(details.invocation_metadata):
            return continuation(details)
        handler = continuation(details)
        if handler is None:
            return None

        def refuse(request, context):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, REFUSED)

        def refuse_stream(request, context):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, REFUSED)
            yield  # unreachable: makes this a generator

        return _refusal(handler, refuse, refuse_stream)
