"""Server bootstrap shared by every service: grpc.aio on uvloop, health, reflection, SIGTERM.

A service's __main__ builds its servicer and calls `run_service(...)`; tests call `start_server`
directly on port 0.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from strata.core.lifeline import die_with_parent
from strata.rpc.channels import (
    CHANNEL_OPTIONS,
    MAX_MESSAGE_BYTES,
    channel,
    sync_channel,
)
from strata.rpc.guard import GuardInterceptor
from strata.rpc.internal_auth import InternalAuthInterceptor
from strata.rpc.mux_server import SERVICE_NAME as MUX_SERVICE
from strata.rpc.mux_server import HandlerTable, MultiplexServicer
from strata.rpc.trace_context import TraceContextInterceptor
from strata.security.identity import ClusterIdentity
from strata.v1 import mux_pb2_grpc

__all__ = [
    "CHANNEL_OPTIONS",
    "MAX_MESSAGE_BYTES",
    "Registration",
    "RunningServer",
    "channel",
    "run",
    "serve_until_signal",
    "start_server",
    "sync_channel",
]

log = logging.getLogger(__name__)

# gRPC's default of 1000 pending calls answers CANCELLED to the calls of a burst beyond it; the
# limit is raised so a burst queues instead (docs/design/scheduling.md).
SERVER_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_pending_requests", 100_000),
    ("grpc.so_reuseport", 0),
]


@dataclass(slots=True)
class Registration:
    """What one servicer contributes to a server: how to add it and its full service name."""

    add: Callable[[grpc.aio.Server], None]
    service_name: str


@dataclass(slots=True)
class RunningServer:
    server: grpc.aio.Server
    port: int
    health: health.aio.HealthServicer
    services: list[str] = field(default_factory=list)
    # The plaintext health-only server (start_server's health_bind) and its port, if any.
    health_server: grpc.aio.Server | None = None
    health_port: int = 0
    mux: MultiplexServicer | None = None  # ended with the server (MultiplexServicer.drain)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def stop(self, grace: float = 5.0) -> None:
        await self.health.enter_graceful_shutdown()
        if self.mux is not None:
            self.mux.drain()
        await self.server.stop(grace)
        if self.health_server is not None:
            await self.health_server.stop(0)


async def start_server(
    registrations: Sequence[Registration],
    bind: str = "127.0.0.1:0",
    interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
    max_receive_bytes: int = MAX_MESSAGE_BYTES,
    identity: ClusterIdentity | None = None,
    tls: grpc.ServerCredentials | None = None,
    health_bind: str = "",
    multiplex: bool = True,
) -> RunningServer:
    """Serve `registrations` with health and reflection. Every server attaches its callers'
    span context (strata.rpc.trace_context) and runs the guard (strata.rpc.guard) after the
    given interceptors; `max_receive_bytes` caps a request's size
    (a public server sets it from the largest valid request).

    `identity`: an internal server: every call but health and reflection needs the cluster's
    token, and with internal TLS the port is mutual TLS. `tls`: a public server's own
    certificate (the gateway's optional TLS). Neither: plaintext, open (in-process tests).
    `health_bind`: also serve the same health service, and nothing else, in plaintext there
    (for probes without the cluster's certificate; it tells only SERVING or not).
    `multiplex`: also serve strata.v1.Multiplex, which carries many calls of one caller on
    one stream and runs each through the same interceptors and handlers (strata.rpc.
    mux_server); a public server turns it off."""
    options = [
        (k, max_receive_bytes if k == "grpc.max_receive_message_length" else v)
        for k, v in SERVER_OPTIONS
    ]
    auth = [InternalAuthInterceptor(identity)] if identity is not None else []
    chain = [TraceContextInterceptor(), *auth, *interceptors, GuardInterceptor()]
    server = grpc.aio.server(options=options, interceptors=chain)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    table = HandlerTable()
    names = []
    for reg in registrations:
        reg.add(table.recorder(server))
        names.append(reg.service_name)
    mux = MultiplexServicer(table, chain) if multiplex else None
    if mux is not None:
        mux_pb2_grpc.add_MultiplexServicer_to_server(mux, server)
    reflection.enable_server_reflection(
        [
            *names,
            *([MUX_SERVICE] if multiplex else []),
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            reflection.SERVICE_NAME,
        ],
        server,
    )
    creds = identity.server_credentials() if identity is not None else tls
    port = (
        server.add_secure_port(bind, creds) if creds is not None else server.add_insecure_port(bind)
    )
    if port == 0:
        raise RuntimeError(f"could not bind gRPC server to {bind}: is the port already in use?")
    await server.start()
    for name in ["", *names]:
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    running = RunningServer(
        server=server, port=port, health=health_servicer, services=names, mux=mux
    )
    if health_bind:
        running.health_server = grpc.aio.server()
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, running.health_server)
        running.health_port = running.health_server.add_insecure_port(health_bind)
        if running.health_port == 0:
            raise RuntimeError(f"could not bind the health port to {health_bind}: in use?")
        await running.health_server.start()
    return running


async def serve_until_signal(
    running: RunningServer,
    on_stop: Callable[[], Awaitable[None]] | None = None,
    grace: float = 5.0,
    on_signal: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Block until SIGTERM/SIGINT, then stop gracefully: health NOT_SERVING, `on_signal` (a
    service's hand-over while it still serves: a node leaves routing and finishes its streams),
    then no new calls and `grace` seconds for those in flight, then `on_stop`."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("stopping (grace %.1fs)", grace)
    if on_signal is not None:
        for name in ["", *running.services]:
            await running.health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        await on_signal()
    await running.stop(grace)
    if on_stop is not None:
        await on_stop()


def run(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """asyncio.run on uvloop, with plain logging set up once; a process started by a Strata
    parent (supervisor, node manager) dies with it (strata.core.lifeline)."""
    import uvloop

    die_with_parent()
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    uvloop.run(main())
