"""The stack's capacity on the trace's requests, measured closed loop (as benchmarks/soak does):
`clients` callers, each sending the next request of the trace (its lengths scaled, as the sweep
sends them) as soon as its previous one ended, for `warmup_s + seconds`; the capacity is the
requests completed within the last `seconds`, per second. A refused caller waits REFUSED_WAIT_S
before its next request (as SDK users back off), and its refusal is counted.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

import grpc

from benchmarks.overload.workload import LENGTHS
from strata.client.sdk import AsyncClient
from strata.eval.traces import TraceRequest
from strata.eval.workload import PromptSynth, Scaling, text_for_model

REFUSED_WAIT_S = 0.2
REQUEST_TIMEOUT_S = 120.0


@dataclass(slots=True, frozen=True)
class Capacity:
    rps: float  # requests completed per second, after the warm-up
    completed: int
    refused: int
    failed: int
    clients: int
    seconds: float
    warmup_s: float
    output_tps: float  # output tokens per second of the completed requests


async def _measure(
    gateway: str,
    key: str,
    model: str,
    trace: Sequence[TraceRequest],
    clients: int,
    seconds: float,
    warmup_s: float,
    seed: int,
    lengths: Scaling,
) -> Capacity:
    synth = PromptSynth(text_for_model(model), lengths.block_tokens, seed)
    start = time.monotonic()
    counted_from, stop_at = start + warmup_s, start + warmup_s + seconds
    done: list[tuple[float, int]] = []  # (end, output tokens) of completed requests
    refused = failed = 0
    next_index = 0

    async def caller(client: AsyncClient) -> None:
        nonlocal refused, failed, next_index
        while time.monotonic() < stop_at:
            i, next_index = next_index, next_index + 1
            r = trace[i % len(trace)]
            tokens = 0
            try:
                async for chunk in client.generate(
                    model,
                    prompt=synth.prompt(i, lengths.prompt_tokens(r.prompt_tokens)),
                    max_tokens=lengths.output_tokens(r.output_tokens),
                    ignore_eos=True,
                    timeout=REQUEST_TIMEOUT_S,
                ):
                    tokens += len(chunk.token_ids)
            except grpc.aio.AioRpcError as err:
                if err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                    refused += 1
                    await asyncio.sleep(REFUSED_WAIT_S)
                else:
                    failed += 1
                continue
            done.append((time.monotonic(), tokens))

    async with AsyncClient(gateway, key) as client:
        await asyncio.gather(*(caller(client) for _ in range(clients)))
    counted = [(t, n) for t, n in done if counted_from <= t <= stop_at]
    return Capacity(
        len(counted) / seconds,
        len(counted),
        refused,
        failed,
        clients,
        seconds,
        warmup_s,
        sum(n for _, n in counted) / seconds,
    )


def measure_capacity(
    gateway: str,
    key: str,
    model: str,
    trace: Sequence[TraceRequest],
    clients: int,
    seconds: float,
    warmup_s: float = 10.0,
    seed: int = 1,
    lengths: Scaling = LENGTHS,
) -> Capacity:
    """Closed-loop capacity of the stack behind `gateway` (module docstring)."""
    return asyncio.run(
        _measure(gateway, key, model, trace, clients, seconds, warmup_s, seed, lengths)
    )
