"""The request path's own cost: sequential short requests on an idle stack, alternating between
the OpenAI HTTP front, gRPC Generate through the gateway, and the worker's Generate directly
(the engine alone, over one loopback gRPC hop). The difference in TTFT P50 between a front and
the worker is what gateway -> scheduler -> node -> worker adds before the first token."""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass

import httpx2

from benchmarks.common.stack import ComposeStack
from services.gateway.servicer import params_of
from strata.client.sdk import Client, build_request
from strata.gateway.pipeline import spec_of
from strata.rpc.channels import sync_channel
from strata.v1 import (
    common_pb2,
    gateway_pb2,
    node_pb2,
    node_pb2_grpc,
    worker_pb2,
    worker_pb2_grpc,
)

WAYS = ("worker", "grpc", "http")


@dataclass(slots=True, frozen=True)
class PathFigures:
    way: str
    ttft_p50_ms: float
    ttft_p90_ms: float
    e2e_p50_ms: float
    samples: int


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


PROMPT = "the path of a request through the stack"


def worker_address(stack: ComposeStack, model: str) -> str:
    """The address of the stack's worker serving `model`, as its node reports it."""
    with sync_channel(stack.addr("node"), stack.identity) as ch:
        info = node_pb2_grpc.NodeManagerStub(ch).GetNodeStatus(node_pb2.GetNodeStatusRequest())
    return next(r.worker_address for r in info.replicas if r.model == model)


def worker_spec(model: str, max_tokens: int = 4) -> common_pb2.GenerationSpec:
    """What the gateway hands on for the path's request."""
    return _spec(build_request(model, PROMPT, max_tokens=max_tokens, ignore_eos=True))


def measure_path(
    stack: ComposeStack, key: str, model: str, requests: int = 100, max_tokens: int = 4
) -> list[PathFigures]:
    worker = worker_address(stack, model)
    prompt = PROMPT
    ttft: dict[str, list[float]] = {w: [] for w in WAYS}
    e2e: dict[str, list[float]] = {w: [] for w in WAYS}
    http = httpx2.Client(timeout=60)
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
            "stream": True, "ignore_eos": True}  # fmt: skip
    headers = {"authorization": f"Bearer {key}"}
    with Client(stack.addr("gateway"), key) as client, sync_channel(worker, stack.identity) as wch:
        worker_stub = worker_pb2_grpc.WorkerStub(wch)
        spec = worker_spec(model, max_tokens)

        def via_worker() -> float | None:
            first = None
            call = worker_stub.Generate(worker_pb2.WorkerGenerateRequest(spec=spec), timeout=60)
            for chunk in call:
                if chunk.token_ids and first is None:
                    first = time.perf_counter()
            return first

        def via_grpc() -> float | None:
            first = None
            for chunk in client.generate(model, prompt, max_tokens=max_tokens, ignore_eos=True):
                if chunk.token_ids and first is None:
                    first = time.perf_counter()
            return first

        def via_http() -> float | None:
            first = None
            url = stack.http_url() + "/v1/completions"
            with http.stream("POST", url, json=body, headers=headers) as r:
                for line in r.iter_lines():
                    if line.startswith("data: {") and first is None:
                        if json.loads(line[6:]).get("choices"):
                            first = time.perf_counter()
            return first

        calls = {"worker": via_worker, "grpc": via_grpc, "http": via_http}
        for _ in range(5):  # warm every path
            for way in WAYS:
                calls[way]()
        for i in range(requests):
            for way in WAYS[i % 3 :] + WAYS[: i % 3]:  # alternate the order
                t0 = time.perf_counter()
                first = calls[way]()
                end = time.perf_counter()
                if first is not None:
                    ttft[way].append((first - t0) * 1000)
                    e2e[way].append((end - t0) * 1000)
    http.close()
    return figures(WAYS, ttft, e2e)


def figures(
    ways: tuple[str, ...], ttft: dict[str, list[float]], e2e: dict[str, list[float]]
) -> list[PathFigures]:
    """Each way's TTFT P50 and P90, E2E P50 and sample count, from its samples in ms."""
    return [
        PathFigures(
            way,
            statistics.median(ttft[way]),
            quantile(ttft[way], 0.9),
            statistics.median(e2e[way]),
            len(ttft[way]),
        )
        for way in ways
    ]


def _spec(request: gateway_pb2.GenerateRequest) -> common_pb2.GenerationSpec:
    """What the gateway would hand on for this request."""
    return spec_of(params_of(request))
