"""The serving stack's per-request overheads, measured from the spans of calibration requests.

An engine profile times engine steps; a request through the stack also crosses the gateway,
the scheduler's Route, the node manager and the worker's gRPC stream. Send a few requests one
at a time through an idle stack (nothing else queued, so each request's worker span is its own
engine time plus the stack's share), read their spans, and:

    inbound_s      median of worker span start - gateway span start   (auth, route, two hops)
    outbound_s     median of gateway span end - worker span end       (the last token's way out)
    token_send_s   median of (worker span - the profile's engine time for that request alone)
                   / output tokens: the worker's per-token stream work, which shares the
                   interpreter with the engine's steps

A median keeps one slow request (a first connection, a collector flush) from standing for all.
Pure functions; the caller fetches the spans.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from strata.sim.profile import RequestOverheads, StepCosts, StepShape, prefill_keys


@dataclass(slots=True, frozen=True)
class CalibrationRequest:
    """One calibration request's spans (seconds on any one clock) and its sizes."""

    gateway_start_s: float
    gateway_end_s: float
    worker_start_s: float
    worker_end_s: float
    prompt_tokens: int
    output_tokens: int


def engine_seconds_alone(costs: StepCosts, prompt: int, output: int, block_size: int,
                         max_batched_tokens: int) -> float:
    """Engine time of one request with nothing else running: its prefill chunks, then one
    decode per further token."""
    t, done = 0.0, 0
    while done < prompt:
        n = min(max_batched_tokens, prompt - done)
        last = done + n == prompt
        shape = StepShape(n, int(last), prefill_keys(1, n, done + n, block_size), 0.0, 1, n,
                          done) if n > 1 else StepShape(1, int(last), 0.0, done + 1.0, 1)
        t += costs.seconds(shape)
        done += n
    for j in range(1, output):
        t += costs.decode_seconds(1, prompt + j)
    return t


def stack_overheads(requests: Sequence[CalibrationRequest], costs: StepCosts, add_s: float,
                    block_size: int, max_batched_tokens: int) -> RequestOverheads:
    if not requests:
        raise ValueError("stack overheads need at least one calibration request")
    inbound = statistics.median(r.worker_start_s - r.gateway_start_s for r in requests)
    outbound = statistics.median(r.gateway_end_s - r.worker_end_s for r in requests)
    send = statistics.median(
        (r.worker_end_s - r.worker_start_s
         - engine_seconds_alone(costs, r.prompt_tokens, r.output_tokens, block_size,
                                max_batched_tokens)) / r.output_tokens for r in requests)
    return RequestOverheads(add_s=add_s, inbound_s=max(0.0, inbound),
                            outbound_s=max(0.0, outbound), token_send_s=max(0.0, send))
