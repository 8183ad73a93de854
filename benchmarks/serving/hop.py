"""One hop measured both ways, on the stack's own worker in one run: its Generate as a new
grpc.aio call per request, against the same calls multiplexed on one stream (strata.rpc.
mux_client, what the node and the gateway use for the hops of every request), alternating
between the two, sequential 4-token requests, from one asyncio client with the cluster's
credential (mutual TLS and the token, as the services call each other)."""

from __future__ import annotations

import asyncio
import time

from benchmarks.serving.path import PathFigures, figures
from strata.rpc.channels import channel, mux_channel
from strata.security.identity import ClusterIdentity
from strata.v1 import common_pb2, worker_pb2, worker_pb2_grpc

WAYS = ("direct call", "muxed call")


def measure_hop(
    worker: str, identity: ClusterIdentity | None, spec: common_pb2.GenerationSpec, requests: int
) -> list[PathFigures]:
    return asyncio.run(_measure(worker, identity, spec, requests))


async def _measure(
    worker: str, identity: ClusterIdentity | None, spec: common_pb2.GenerationSpec, requests: int
) -> list[PathFigures]:
    direct, muxed = channel(worker, identity), mux_channel(worker, identity)
    stubs = {
        "direct call": worker_pb2_grpc.WorkerStub(direct),
        "muxed call": worker_pb2_grpc.WorkerStub(muxed),
    }
    ttft: dict[str, list[float]] = {w: [] for w in WAYS}
    e2e: dict[str, list[float]] = {w: [] for w in WAYS}

    async def one(way: str) -> tuple[float, float] | None:
        t0 = time.perf_counter()
        first = None
        call = stubs[way].Generate(worker_pb2.WorkerGenerateRequest(spec=spec), timeout=60)
        async for chunk in call:
            if chunk.token_ids and first is None:
                first = time.perf_counter()
        end = time.perf_counter()
        return None if first is None else ((first - t0) * 1000, (end - t0) * 1000)

    try:
        for _ in range(5):
            for way in WAYS:
                await one(way)
        for i in range(requests):
            for way in WAYS[i % 2 :] + WAYS[: i % 2]:
                got = await one(way)
                if got is not None:
                    ttft[way].append(got[0])
                    e2e[way].append(got[1])
    finally:
        await direct.close()
        await muxed.close()
    return figures(WAYS, ttft, e2e)
