"""Whether the requests a point refused as infeasible could have met their class's targets at
all: each sent again alone, one at a time, on the idle stack after the sweep, and judged by its
own class's targets (strata.core.sla).

The scheduler refuses a request as infeasible (FAILED_PRECONDITION) when its own estimate says
the class's targets cannot hold for it even on an idle replica; judging goodput against an offer
that includes such requests asks for the impossible, and excusing them on the scheduler's own
word would be circular. So they are measured: sent through a tenant of a best-effort class of
the top priority (PROBE_CLASS: no TTFT check refuses it, and no step cap holds its prompt back,
as none would on an idle stack; a tenant of its own, so no prefix the sweep left in the cache is
its tenant's), with at most PROBE_TOKENS answer tokens (enough for TTFT and TPOT), each after
the previous one ended (a probe refused while the sweep's work still counts is sent again a
second later). A request that misses its class's targets alone is unattainable at any load.

A point with more infeasible refusals than `per_point` is sampled evenly, and its unattainable
count extrapolated from the sample (`Alone.unattainable`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

import grpc

from benchmarks.isolation.stack_run import create_tenants
from benchmarks.overload.workload import ALONE_TENANT
from strata.client.sdk import AsyncClient
from strata.core.sla import SlaTable
from strata.eval.workload import WorkloadRequest
from strata.rpc.channels import public_channel
from strata.v1 import admin_pb2, admin_pb2_grpc

PROBE_CLASS = "alone"  # best effort, at the top priority (probe_tenant)
PROBE_TOKENS = 8
REQUEST_TIMEOUT_S = 60.0
REFUSED_TRIES = 30  # a refused probe (the sweep's work still counted) is sent again ...
REFUSED_WAIT_S = 1.0  # ... this long after


@dataclass(slots=True, frozen=True)
class AloneResult:
    index: int  # the request's index in its point's workload
    sla_class: str
    prompt_tokens: int
    ttft_ms: float | None  # None: it failed
    tpot_ms: float | None
    met: bool  # within every target of its class
    error: str = ""


@dataclass(slots=True, frozen=True)
class Alone:
    """One point's infeasible refusals measured alone."""

    refused: int  # requests the point refused as infeasible
    results: tuple[AloneResult, ...]  # the sample measured

    @property
    def missed(self) -> int:
        return sum(1 for r in self.results if not r.met)

    @property
    def unattainable(self) -> float:
        """The point's requests that cannot meet their targets even alone: the sample's miss
        rate over every infeasible refusal of the point."""
        if not self.results:
            return 0.0
        return self.refused * self.missed / len(self.results)


def sample_evenly(items: Sequence[WorkloadRequest], n: int) -> list[WorkloadRequest]:
    """At most `n` of `items`, spread evenly over them (all of them when they are fewer)."""
    if n <= 0:
        return []
    if len(items) <= n:
        return list(items)
    return [items[i * len(items) // n] for i in range(n)]


async def _one(client: AsyncClient, model: str, w: WorkloadRequest, table: SlaTable) -> AloneResult:
    for _ in range(REFUSED_TRIES):
        sent = time.perf_counter()
        first: float | None = None
        tokens = 0
        error = ""
        try:
            async for chunk in client.generate(
                model,
                prompt=w.prompt,
                max_tokens=min(w.max_tokens, PROBE_TOKENS),
                ignore_eos=True,
                timeout=REQUEST_TIMEOUT_S,
            ):
                if chunk.token_ids and first is None:
                    first = time.perf_counter()
                tokens += len(chunk.token_ids)
        except grpc.aio.AioRpcError as err:
            error = f"{err.code().name}: {err.details()}"
            if err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                await asyncio.sleep(REFUSED_WAIT_S)  # the sweep's work still counted
                continue
        break
    end = time.perf_counter()
    ttft = None if first is None or error else 1000.0 * (first - sent)
    tpot = 1000.0 * (end - first) / (tokens - 1) if first is not None and tokens > 1 else None
    sla = table.lookup(w.sla_class or table.default)
    met = ttft is not None and sla.attained(False, ttft, tpot)
    return AloneResult(w.index, w.sla_class, w.prompt_tokens, ttft, tpot, met, error)


async def probe_tenant(gateway: str, admin_key: str, priority: int) -> str:
    """Create PROBE_CLASS (best effort, `priority`) and a tenant of it, ALONE_TENANT's name,
    through the Admin API; its API key."""
    metadata = (("authorization", f"Bearer {admin_key}"),)
    async with public_channel(gateway) as ch:
        await admin_pb2_grpc.AdminStub(ch).PutSlaClass(
            admin_pb2.SlaClassRecord(name=PROBE_CLASS, priority=priority),
            metadata=metadata,
            timeout=10,
        )
    spec = replace(ALONE_TENANT, sla_class=PROBE_CLASS)
    return (await create_tenants(gateway, admin_key, (spec,)))[spec.name]


async def _measure(
    gateway: str, key: str, model: str, requests: Sequence[WorkloadRequest], table: SlaTable
) -> list[AloneResult]:
    async with AsyncClient(gateway, key) as client:
        return [await _one(client, model, w, table) for w in requests]


def measure_alone(
    gateway: str,
    key: str,
    model: str,
    refused: Sequence[Sequence[WorkloadRequest]],
    table: SlaTable,
    per_point: int = 40,
) -> list[Alone]:
    """Each point's infeasible refusals (`refused`, a list per point) measured alone through the
    best-effort tenant of `key`, at most `per_point` of each point."""
    samples = [sample_evenly(r, per_point) for r in refused]
    flat = [w for s in samples for w in s]
    results = asyncio.run(_measure(gateway, key, model, flat, table)) if flat else []
    out, at = [], 0
    for point, sample in zip(refused, samples, strict=True):
        out.append(Alone(len(point), tuple(results[at : at + len(sample)])))
        at += len(sample)
    return out
