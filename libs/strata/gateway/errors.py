"""What a tenant may read of an internal service's error: never an internal address.

A refusal a Strata service wrote (NOT_FOUND for an unknown model, RESOURCE_EXHAUSTED with its
retry hint, INVALID_ARGUMENT naming a field) reaches the caller as written, with any host:port
in it replaced. An error that gRPC's transport produced (the hop is down, a connection broke,
TLS failed) names the hop's address and the library's internals instead: the caller gets one
sentence saying which part of the service is unreachable and that a retry may help.
"""

from __future__ import annotations

import re

import grpc

# Phrases of gRPC core's and the TLS stack's own error texts, never of a Strata sentence.
_TRANSPORT = re.compile(
    r"failed to connect|Socket closed|Connection reset|Connection refused|connections to all "
    r"backends failing|Deadline Exceeded|GOAWAY|Broken pipe|Stream removed|DNS resolution|"
    r"Handshake|SSL|ipv[46]:|unix:|Received RST_STREAM|Unexpected <class|Exception calling "
    r"application|Exception iterating responses|Cancelling all calls",
    re.IGNORECASE,
)
_ADDRESS = re.compile(
    r"\[[0-9a-fA-F:.]+\](?::\d+)?|\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b|"
    r"\b[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*:\d{2,5}\b"
)
_WHAT = {
    grpc.StatusCode.DEADLINE_EXCEEDED: "did not answer in time",
    grpc.StatusCode.CANCELLED: "dropped the call",
}


def public_details(err: grpc.aio.AioRpcError | grpc.RpcError, hop: str) -> str:
    """err's details as a tenant may read them; `hop` names the internal service in words
    ("the scheduler")."""
    details = err.details() or ""
    if not details or _TRANSPORT.search(details):
        what = _WHAT.get(err.code(), "is unreachable right now")
        return f"{hop} {what}; retry in a few seconds"
    return _ADDRESS.sub("<internal address>", details)


def is_transport_error(err: grpc.RpcError) -> bool:
    """Whether the error came from the transport (the hop could not be reached or the call
    broke), not from the service's own answer."""
    if err.code() not in (
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.CANCELLED,
    ):
        return False
    details = err.details() or ""
    return not details or bool(_TRANSPORT.search(details))
