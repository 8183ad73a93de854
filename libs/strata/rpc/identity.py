"""Who this process is to the rest of the cluster, and the channels and servers that prove it.

Every internal call carries the cluster's internal token in `x-strata-internal` metadata, and
with internal TLS on (the default) it runs over mutual TLS: the server presents its service
certificate, the client its own, and each side accepts only certificates the cluster CA signed.
An internal server refuses any call without the token (UNAUTHENTICATED), health checks and
reflection excepted; without a client certificate signed by the CA the TLS handshake itself
fails.

A service installs its identity once at start (`install`); `channel` and `sync_channel` then
build every outgoing channel with it. A process with no identity installed (unit and contract
tests of one servicer) gets plaintext channels without the token.
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc

from strata.security import layout as secrets

TOKEN_METADATA = "x-strata-internal"
# Methods anyone may call on an internal server: liveness, and the API's own description.
EXEMPT_PREFIXES = ("/grpc.health.v1.Health/", "/grpc.reflection.")
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
]
REFUSED = ("this is an internal Strata service: calls need the cluster's internal credential "
           "(tenants call the gateway)")


class IdentityError(ValueError):
    """The secrets folder lacks what this process needs; the message names the files."""


@dataclass(frozen=True, slots=True)
class ClusterIdentity:
    service: str
    token: str
    ca: bytes | None = None          # PEM; None: internal TLS is off
    cert: bytes | None = None
    key: bytes | None = None

    @property
    def tls(self) -> bool:
        return self.ca is not None

    @classmethod
    def load(cls, directory: str, service: str, tls: bool = True) -> ClusterIdentity:
        d = Path(directory)
        need = [secrets.TOKEN_FILE]
        if tls:
            need += [secrets.CA_FILE, secrets.cert_file(service), secrets.key_file(service)]
        absent = [f for f in need if not (d / f).is_file()]
        if absent:
            raise IdentityError(
                f"the cluster secrets in {directory} lack {', '.join(absent)}; `make run` "
                f"writes them on first start, or run `python -m strata.security.secrets "
                f"{directory}`")
        token = (d / secrets.TOKEN_FILE).read_text().strip()
        if not tls:
            return cls(service, token)
        return cls(service, token, (d / secrets.CA_FILE).read_bytes(),
                   (d / secrets.cert_file(service)).read_bytes(),
                   (d / secrets.key_file(service)).read_bytes())

    def server_credentials(self) -> grpc.ServerCredentials | None:
        if not self.tls:
            return None
        return grpc.ssl_server_credentials([(self.key, self.cert)], root_certificates=self.ca,
                                           require_client_auth=True)

    def channel_credentials(self) -> grpc.ChannelCredentials | None:
        if not self.tls:
            return None
        return grpc.ssl_channel_credentials(root_certificates=self.ca, private_key=self.key,
                                            certificate_chain=self.cert)

    def accepts(self, metadata: Sequence[tuple[str, str | bytes]] | None) -> bool:
        """Whether call metadata carries this cluster's token (constant-time comparison)."""
        for k, v in metadata or ():
            if k == TOKEN_METADATA:
                given = v.decode() if isinstance(v, bytes) else v
                return hmac.compare_digest(given.encode(), self.token.encode())
        return False


_installed: ClusterIdentity | None = None


def install(identity: ClusterIdentity | None) -> None:
    """Make `identity` the one every channel of this process is built with (None: plaintext,
    no token)."""
    global _installed
    _installed = identity


def current() -> ClusterIdentity | None:
    return _installed


def exempt(method: str) -> bool:
    return method.startswith(EXEMPT_PREFIXES)


def _with_token(d: grpc.aio.ClientCallDetails, token: str) -> grpc.aio.ClientCallDetails:
    metadata = grpc.aio.Metadata(*(tuple(d.metadata or ())), (TOKEN_METADATA, token))
    return grpc.aio.ClientCallDetails(d.method, d.timeout, metadata, d.credentials,
                                      d.wait_for_ready)


# grpc.aio files an interceptor under the first call kind it implements only: one class a kind.
class _AioTokenUnary(grpc.aio.UnaryUnaryClientInterceptor):
    def __init__(self, token: str):
        self._token = token

    async def intercept_unary_unary(self, continuation, client_call_details, request):
        return await continuation(_with_token(client_call_details, self._token), request)


class _AioTokenStream(grpc.aio.UnaryStreamClientInterceptor):
    def __init__(self, token: str):
        self._token = token

    async def intercept_unary_stream(self, continuation, client_call_details, request):
        return await continuation(_with_token(client_call_details, self._token), request)


class _CallDetails(grpc.ClientCallDetails):
    def __init__(self, method, timeout, metadata, credentials, wait_for_ready, compression):
        self.method, self.timeout, self.metadata = method, timeout, metadata
        self.credentials, self.wait_for_ready, self.compression = (credentials, wait_for_ready,
                                                                   compression)


class _SyncToken(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
    def __init__(self, token: str):
        self._pair = (TOKEN_METADATA, token)

    def _details(self, d: grpc.ClientCallDetails) -> grpc.ClientCallDetails:
        return _CallDetails(d.method, d.timeout, [*(d.metadata or ()), self._pair],
                            d.credentials, getattr(d, "wait_for_ready", None),
                            getattr(d, "compression", None))

    def intercept_unary_unary(self, continuation, client_call_details, request):
        return continuation(self._details(client_call_details), request)

    def intercept_unary_stream(self, continuation, client_call_details, request):
        return continuation(self._details(client_call_details), request)


def channel(address: str, identity: ClusterIdentity | None = None,
            options: Sequence[tuple[str, object]] = CHANNEL_OPTIONS) -> grpc.aio.Channel:
    """An asyncio channel to an internal service, with `identity` (default: the installed one)."""
    ident = identity or _installed
    if ident is None:
        return grpc.aio.insecure_channel(address, options=list(options))
    interceptors = [_AioTokenUnary(ident.token), _AioTokenStream(ident.token)]
    creds = ident.channel_credentials()
    if creds is None:
        return grpc.aio.insecure_channel(address, options=list(options),
                                         interceptors=interceptors)
    return grpc.aio.secure_channel(address, creds, options=list(options),
                                   interceptors=interceptors)


def sync_channel(address: str, identity: ClusterIdentity | None = None,
                 options: Sequence[tuple[str, object]] = CHANNEL_OPTIONS) -> grpc.Channel:
    """A blocking channel to an internal service, with `identity` (default: the installed one)."""
    ident = identity or _installed
    if ident is None:
        return grpc.insecure_channel(address, options=list(options))
    creds = ident.channel_credentials()
    ch = grpc.insecure_channel(address, options=list(options)) if creds is None else \
        grpc.secure_channel(address, creds, options=list(options))
    return grpc.intercept_channel(ch, _SyncToken(ident.token))


def public_channel(address: str, tls_ca: bytes | None = None,
                   options: Sequence[tuple[str, object]] = CHANNEL_OPTIONS) -> grpc.aio.Channel:
    """An asyncio channel to the gateway's public port: plaintext, or TLS verified against
    `tls_ca` (PEM; b"" for the system's roots). Never the cluster's credential."""
    if tls_ca is None:
        return grpc.aio.insecure_channel(address, options=list(options))
    return grpc.aio.secure_channel(address, grpc.ssl_channel_credentials(tls_ca or None),
                                   options=list(options))


def public_sync_channel(address: str, tls_ca: bytes | None = None,
                        options: Sequence[tuple[str, object]] = CHANNEL_OPTIONS) -> grpc.Channel:
    """The blocking counterpart of public_channel."""
    if tls_ca is None:
        return grpc.insecure_channel(address, options=list(options))
    return grpc.secure_channel(address, grpc.ssl_channel_credentials(tls_ca or None),
                               options=list(options))


def _refusal(handler: grpc.RpcMethodHandler, unary, stream) -> grpc.RpcMethodHandler:
    """A handler of the same shape as `handler` whose every call is refused: `stream` for a
    response stream (a generator, as tracing's interceptor iterates it), else `unary`."""
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(
            stream, request_deserializer=None, response_serializer=handler.response_serializer)
    return grpc.unary_unary_rpc_method_handler(
        unary, request_deserializer=None, response_serializer=handler.response_serializer)


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
