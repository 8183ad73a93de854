"""Channels to the cluster's services, built with the process's cluster identity.

A service installs its identity once at start (`install`); `channel`, `mux_channel` and
`sync_channel` then build every outgoing channel to an internal service with it: mutual TLS
when internal TLS is on, and the internal token on every call, beside the caller's span
context (strata.rpc.trace_context). A process with no identity installed (unit and contract
tests of one servicer) gets plaintext channels without the token. `public_channel` reaches the
gateway's public port: plaintext or server-verified TLS, never the cluster's credential.
"""

from __future__ import annotations

from collections.abc import Sequence

import grpc

from strata.rpc.mux_client import MuxChannel
from strata.rpc.trace_context import outgoing
from strata.security.identity import TOKEN_METADATA, ClusterIdentity

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
]


_installed: ClusterIdentity | None = None
_multiplex = True


def install(identity: ClusterIdentity | None, multiplex: bool = True) -> None:
    """Make `identity` the one every channel of this process is built with (None: plaintext,
    no token); `multiplex` False makes `mux_channel`'s calls direct ones."""
    global _installed, _multiplex
    _installed = identity
    _multiplex = multiplex


def current() -> ClusterIdentity | None:
    return _installed


def _metadata(token: str | None) -> list[tuple[str, str]]:
    """What every internal call adds: the cluster's token (when there is one) and the caller's
    span context (strata.rpc.trace_context)."""
    pairs = outgoing()
    if token is not None:
        pairs.append((TOKEN_METADATA, token))
    return pairs


def _with_metadata(d: grpc.aio.ClientCallDetails, token: str | None) -> grpc.aio.ClientCallDetails:
    metadata = grpc.aio.Metadata(*(tuple(d.metadata or ())), *_metadata(token))
    return grpc.aio.ClientCallDetails(
        d.method, d.timeout, metadata, d.credentials, d.wait_for_ready
    )


# grpc.aio files an interceptor under the first call kind it implements only: one class a kind.
class _AioUnary(grpc.aio.UnaryUnaryClientInterceptor):
    def __init__(self, token: str | None):
        self._token = token

    async def intercept_unary_unary(self, continuation, client_call_details, request):
        return await continuation(_with_metadata(client_call_details, self._token), request)


class _AioStream(grpc.aio.UnaryStreamClientInterceptor):
    def __init__(self, token: str | None):
        self._token = token

    async def intercept_unary_stream(self, continuation, client_call_details, request):
        return await continuation(_with_metadata(client_call_details, self._token), request)


class _CallDetails(grpc.ClientCallDetails):
    def __init__(self, method, timeout, metadata, credentials, wait_for_ready, compression):
        self.method, self.timeout, self.metadata = method, timeout, metadata
        self.credentials, self.wait_for_ready, self.compression = (
            credentials,
            wait_for_ready,
            compression,
        )


class _SyncMetadata(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
    def __init__(self, token: str | None):
        self._token = token

    def _details(self, d: grpc.ClientCallDetails) -> grpc.ClientCallDetails:
        return _CallDetails(
            d.method,
            d.timeout,
            [*(d.metadata or ()), *_metadata(self._token)],
            d.credentials,
            getattr(d, "wait_for_ready", None),
            getattr(d, "compression", None),
        )

    def intercept_unary_unary(self, continuation, client_call_details, request):
        return continuation(self._details(client_call_details), request)

    def intercept_unary_stream(self, continuation, client_call_details, request):
        return continuation(self._details(client_call_details), request)


def channel(
    address: str,
    identity: ClusterIdentity | None = None,
    options: Sequence[tuple[str, object]] = CHANNEL_OPTIONS,
) -> grpc.aio.Channel:
    """An asyncio channel to an internal service, with `identity` (default: the installed one)."""
    ident = identity or _installed
    token = ident.token if ident is not None else None
    interceptors = [_AioUnary(token), _AioStream(token)]
    creds = ident.channel_credentials() if ident is not None else None
    if ident is None or creds is None:
        return grpc.aio.insecure_channel(address, options=list(options), interceptors=interceptors)
    opts = [*options, *ident.channel_options()]
    return grpc.aio.secure_channel(address, creds, options=opts, interceptors=interceptors)


def mux_channel(
    address: str,
    identity: ClusterIdentity | None = None,
    options: Sequence[tuple[str, object]] = CHANNEL_OPTIONS,
) -> MuxChannel:
    """`channel(address, identity)` whose unary and response-streaming calls share one stream
    (strata.rpc.mux_client), each still carrying the cluster's token and the caller's span
    context: for the hops every request crosses. Direct calls when this process was installed
    with multiplex off."""
    ident = identity or _installed
    token = ident.token if ident is not None else None
    return MuxChannel(
        channel(address, identity, options),
        [(TOKEN_METADATA, token)] if token is not None else [],
        direct=not _multiplex,
    )


def sync_channel(
    address: str,
    identity: ClusterIdentity | None = None,
    options: Sequence[tuple[str, object]] = CHANNEL_OPTIONS,
) -> grpc.Channel:
    """A blocking channel to an internal service, with `identity` (default: the installed one)."""
    ident = identity or _installed
    creds = ident.channel_credentials() if ident is not None else None
    ch = (
        grpc.insecure_channel(address, options=list(options))
        if ident is None or creds is None
        else grpc.secure_channel(address, creds, options=[*options, *ident.channel_options()])
    )
    return grpc.intercept_channel(ch, _SyncMetadata(ident.token if ident is not None else None))


def public_channel(
    address: str,
    tls_ca: bytes | None = None,
    options: Sequence[tuple[str, object]] = CHANNEL_OPTIONS,
) -> grpc.aio.Channel:
    """An asyncio channel to the gateway's public port: plaintext, or TLS verified against
    `tls_ca` (PEM; b"" for the system's roots). Never the cluster's credential."""
    if tls_ca is None:
        return grpc.aio.insecure_channel(address, options=list(options))
    return grpc.aio.secure_channel(
        address, grpc.ssl_channel_credentials(tls_ca or None), options=list(options)
    )


def public_sync_channel(
    address: str,
    tls_ca: bytes | None = None,
    options: Sequence[tuple[str, object]] = CHANNEL_OPTIONS,
) -> grpc.Channel:
    """The blocking counterpart of public_channel."""
    if tls_ca is None:
        return grpc.insecure_channel(address, options=list(options))
    return grpc.secure_channel(
        address, grpc.ssl_channel_credentials(tls_ca or None), options=list(options)
    )
