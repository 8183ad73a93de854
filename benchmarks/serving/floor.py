"""The transport's floor under the gateway path: the path's hops with nothing of Strata in them.

Three bare grpc.aio processes on uvloop, with the cluster's credential (mutual TLS and the
token, as the services call each other), carrying opaque bytes of the path's message sizes:

    source  Stream: yields CHUNKS chunks at once; Route: answers at once
    relay   Stream: the same call onward to the source, each chunk passed back (the node)
    front   Stream: Route to the source, then Stream through the relay (the gateway)

A client alternates between the source's Stream (one hop, as the worker alone is measured) and
the front's (client -> front -> [route round trip] -> relay -> source), sequential requests;
the difference of their TTFT P50 is what the path's hops cost before any Strata work: the part
of the path's target that the transport alone takes on this machine.

    python -m benchmarks.serving.floor serve ROLE PORT SECRETS_DIR [NEXT_PORT] [ROUTE_PORT]
is how one process runs (started by `measure_floor`).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc

from benchmarks.common.ports import free_port
from benchmarks.serving.path import PathFigures, figures
from strata.rpc.channels import channel
from strata.security.identity import ClusterIdentity

ROOT = Path(__file__).resolve().parents[2]
WAYS = ("one hop", "path's hops")
CHUNKS = 4
REQUEST = b"r" * 160  # about a SubmitRequest's size for the path's prompt
CHUNK = b"c" * 48  # about a GenerationChunk's
ROUTE = b"x" * 64
SERVICE = "strata.bench.Floor"
START_TIMEOUT_S = 60.0


def _same(b: bytes) -> bytes:
    return b


def _identity(secrets_dir: str, service: str) -> ClusterIdentity:
    return ClusterIdentity.load(secrets_dir, service)


async def _serve(role: str, port: int, secrets_dir: str, onward: int, route: int) -> None:
    ident = _identity(secrets_dir, {"source": "worker", "relay": "node"}.get(role, "gateway"))
    stream_next = route_next = None
    if onward:
        stream_next = channel(f"127.0.0.1:{onward}", ident).unary_stream(
            f"/{SERVICE}/Stream", _same, _same
        )
    if route:
        route_next = channel(f"127.0.0.1:{route}", ident).unary_unary(
            f"/{SERVICE}/Route", _same, _same
        )

    async def stream(request: bytes, context) -> AsyncIterator[bytes]:
        if route_next is not None:
            await route_next(ROUTE)
        if stream_next is None:
            for _ in range(CHUNKS):
                yield CHUNK
            return
        async for chunk in stream_next(request):
            yield chunk

    async def answer(request: bytes, context) -> bytes:
        return ROUTE

    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                SERVICE,
                {
                    "Stream": grpc.unary_stream_rpc_method_handler(stream, _same, _same),
                    "Route": grpc.unary_unary_rpc_method_handler(answer, _same, _same),
                },
            ),
        )
    )
    creds = ident.server_credentials()
    bind = f"127.0.0.1:{port}"
    server.add_secure_port(bind, creds) if creds is not None else server.add_insecure_port(bind)
    await server.start()
    await server.wait_for_termination()


def measure_floor(secrets_dir: str, requests: int) -> list[PathFigures]:
    """TTFT and E2E of sequential requests, one hop and the path's hops alternating."""
    source, relay, front = free_port(), free_port(), free_port()
    plan = [
        ("source", source, 0, 0),
        ("relay", relay, source, 0),
        ("front", front, relay, source),
    ]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "benchmarks.serving.floor",
                "serve",
                role,
                str(port),
                secrets_dir,
                str(onward),
                str(route),
            ],  # fmt: skip
            cwd=ROOT,
        )
        for role, port, onward, route in plan
    ]
    try:
        import uvloop

        return uvloop.run(_measure(secrets_dir, (source, relay, front), requests))
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(10)


async def _measure(
    secrets_dir: str, ports: tuple[int, int, int], requests: int
) -> list[PathFigures]:
    """Measures once every process listens: the front's onward hops are not retried, so a
    relay still starting would fail the first call through the front."""
    ident = _identity(secrets_dir, "operator")
    source, relay, front = ports
    chans = {w: channel(f"127.0.0.1:{p}", ident) for w, p in zip(WAYS, (source, front))}
    relay_ch = channel(f"127.0.0.1:{relay}", ident)
    for ch in (*chans.values(), relay_ch):
        await asyncio.wait_for(ch.channel_ready(), START_TIMEOUT_S)
    await relay_ch.close()
    calls = {w: ch.unary_stream(f"/{SERVICE}/Stream", _same, _same) for w, ch in chans.items()}
    ttft: dict[str, list[float]] = {w: [] for w in WAYS}
    e2e: dict[str, list[float]] = {w: [] for w in WAYS}

    async def one(way: str) -> tuple[float, float]:
        t0 = time.perf_counter()
        first = None
        async for _ in calls[way](REQUEST, timeout=30):
            if first is None:
                first = time.perf_counter()
        end = time.perf_counter()
        if first is None:
            raise RuntimeError(f"{way}: the call ended without a chunk")
        return (first - t0) * 1000, (end - t0) * 1000

    try:
        for _ in range(20):
            for way in WAYS:
                await one(way)
        for i in range(requests):
            for way in WAYS[i % 2 :] + WAYS[: i % 2]:
                a, b = await one(way)
                ttft[way].append(a)
                e2e[way].append(b)
    finally:
        for ch in chans.values():
            await ch.close()
    return figures(WAYS, ttft, e2e)


if __name__ == "__main__" and sys.argv[1:2] == ["serve"]:
    import uvloop

    role, port, secrets = sys.argv[2], int(sys.argv[3]), sys.argv[4]
    onward = int(sys.argv[5]) if len(sys.argv) > 5 else 0
    route = int(sys.argv[6]) if len(sys.argv) > 6 else 0
    uvloop.run(_serve(role, port, secrets, onward, route))
