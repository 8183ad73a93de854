"""The serving stack's per-request overheads, measured with calibration requests.

An engine profile times engine steps; a request through the stack also crosses the gateway,
the scheduler's Route, the node manager and the worker's gRPC stream, and the worker's stream
work shares the interpreter its engine steps on. Two calibration runs on an idle stack measure
them: single requests one at a time (nothing else queued), and a burst of B equal requests
sent together (so B sequences decode in each step). Then:

    outbound_s     median of gateway span end - worker span end (singles): the last token out
    step_extra_s   per engine step, and
    token_send_s   per token sampled in it, solved from the decode time per token the gateway
                   measured (TPOT, medians) against the profile's decode step:
                       TPOT_1 - decode(1) = step_extra + token_send
                       TPOT_B - decode(B) = step_extra + B x token_send
    inbound_s      from the gateway's start to the request's first engine step: the singles'
                   median TTFT less everything else charged to it (add, the prefill step as
                   profiled with its step and token extras, outbound). Of that, the spans show
                   the hops to the worker (worker span start - gateway span start, median);
                   the rest is the worker's way from its span to the engine's first step
                   (validation, the hand-over to the engine thread, the thread waking up).

A median keeps one slow request (a first connection, a collector flush) from standing for all.
Pure functions; the caller runs the requests and reads the spans and the TPOTs.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from strata.core.profile import RequestOverheads, StepCosts, StepShape, prefill_keys


@dataclass(slots=True, frozen=True)
class CalibrationRequest:
    """One single calibration request's spans (seconds on any one clock)."""

    gateway_start_s: float
    gateway_end_s: float
    worker_start_s: float
    worker_end_s: float


@dataclass(slots=True, frozen=True)
class FirstToken:
    """The gateway's median TTFT of the single requests, whose prompts had `prompt` tokens."""

    prompt: int
    ttft_s: float


@dataclass(slots=True, frozen=True)
class DecodeTiming:
    """The gateway's median TPOT for requests decoding `batch` at a time, at a mean context
    (prompt plus half the output) of `context` tokens."""

    batch: int
    context: float
    tpot_s: float


def stack_overheads(
    singles: Sequence[CalibrationRequest],
    first: FirstToken,
    single: DecodeTiming,
    burst: DecodeTiming,
    costs: StepCosts,
    add_s: float,
    block_size: int,
) -> RequestOverheads:
    if not singles:
        raise ValueError("stack overheads need at least one single calibration request")
    if single.batch != 1 or burst.batch < 2:
        raise ValueError(
            f"calibrate with single requests and a burst of 2 or more, got "
            f"batches {single.batch} and {burst.batch}"
        )
    inbound = statistics.median(r.worker_start_s - r.gateway_start_s for r in singles)
    outbound = statistics.median(r.gateway_end_s - r.worker_end_s for r in singles)
    extra_1 = single.tpot_s - costs.decode_seconds(1, single.context + 1)
    extra_b = burst.tpot_s - costs.decode_seconds(burst.batch, burst.batch * (burst.context + 1))
    send = max(0.0, (extra_b - extra_1) / (burst.batch - 1))
    step = max(0.0, extra_1 - send)
    outbound = max(0.0, outbound)
    n = first.prompt
    prefill = costs.seconds(StepShape(n, 1, prefill_keys(1, n, n, block_size), 0.0, 1, n, 0))
    to_first_step = first.ttft_s - (add_s + prefill + step + send + outbound)
    return RequestOverheads(
        add_s=add_s,
        inbound_s=max(0.0, inbound, to_first_step),
        outbound_s=outbound,
        step_extra_s=step,
        token_send_s=send,
    )
