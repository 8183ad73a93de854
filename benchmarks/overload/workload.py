"""The real-stack sweep's load: the Azure LLM inference conversation trace (2023), its lengths
divided by LENGTHS.length_scale as in the user's `strata replay --length-scale 8`, its arrivals
replayed at the time scale that offers a wanted rate over a point's window.

A point of `rate` requests/s over `window_s` seconds sends the trace's first n = round(rate x
window_s) requests, their arrivals scaled so that the n-th lands at the window's end (the
trace's own burstiness kept): time_scale = arrival of request n / window_s. So each point
offers exactly its rate on average, and every point starts at the same place in the trace.

Two tenants share the traffic (TENANTS): `api` of the standard class and `chat` of the
interactive class, each request drawn for one of them by its share with a seeded RNG; they are
created through the gateway's Admin API with their classes and shares.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from pathlib import Path

from benchmarks.isolation.workload import TenantSpec
from strata.eval.traces import TraceRequest, read_azure
from strata.eval.workload import (
    PromptSynth,
    Scaling,
    TenantKey,
    TenantMapper,
    Window,
    WorkloadRequest,
    build_workload,
    text_for_model,
)

TRACE = (
    Path(__file__).resolve().parents[3] / "shared/data/traces/AzureLLMInferenceTrace_conv_2023.csv"
)
# The user's replay: lengths / 8, the replay's default caps (prompt 1,024, answer 256 tokens).
LENGTHS = Scaling(length_scale=8.0, max_prompt=1024, max_output=256)
TENANTS = (
    TenantSpec("api", "standard", 0.75, weight=1.0, guaranteed_share=0.7, burst_share=1.0),
    TenantSpec("chat", "interactive", 0.25, weight=1.0, guaranteed_share=0.3, burst_share=1.0),
)
# Sends the infeasible refusals again alone after the sweep (benchmarks.overload.alone): best
# effort, so no TTFT check refuses them; it sends nothing during the points.
ALONE_TENANT = TenantSpec("alone", "batch", 0.0, weight=1.0, guaranteed_share=0.0, burst_share=1.0)


def load_trace(path: Path = TRACE) -> list[TraceRequest]:
    if not path.exists():
        raise SystemExit(
            f"the overload benchmark replays {path}; it is not there "
            f"(see ../shared/data/traces/README.md)"
        )
    return read_azure(path).requests


def requests_in(rate: float, window_s: float) -> int:
    """Requests a point of `rate` requests/s over `window_s` seconds sends (at least 1)."""
    if not (rate > 0 and window_s > 0):
        raise ValueError(f"rate and window_s must be positive, got {rate}, {window_s}")
    return max(1, round(rate * window_s))


def time_scale_for(arrivals_s: Sequence[float], rate: float, window_s: float) -> float:
    """The speed-up (send at arrival / time_scale) that puts the trace's first
    requests_in(rate, window_s) requests inside the window, the last of them at its end.
    `arrivals_s` ascending from 0; ValueError when the trace is too short."""
    n = requests_in(rate, window_s)
    if n > len(arrivals_s):
        raise ValueError(
            f"{rate:g} requests/s over {window_s:g} s needs {n} requests; the trace has "
            f"{len(arrivals_s)}"
        )
    last = arrivals_s[n - 1]
    if n == 1 or last <= 0:
        return 1.0
    return last / window_s


def point_window_s(rate: float, capacity: float, min_s: float, min_admitted: int) -> float:
    """How long a point offers `rate`: at least `min_s`, and long enough that about
    `min_admitted` requests are served at what the stack can serve (the smaller of the rate and
    its capacity), so that a P99 means something; rounded up to whole seconds."""
    served = min(rate, capacity) if capacity > 0 else rate
    return float(math.ceil(max(min_s, min_admitted / served)))


def point_workload(
    trace: Sequence[TraceRequest],
    rate: float,
    window_s: float,
    keys: dict[str, str],
    model: str,
    seed: int,
    tenants: Sequence[TenantSpec] = TENANTS,
    lengths: Scaling = LENGTHS,
) -> tuple[list[WorkloadRequest], float]:
    """The point's requests (each tenant's key drawn by its share) and the time scale used.
    `seed` draws the tenants and the prompts' text (a fresh one per point: no point hits the
    prefix cache an earlier one left)."""
    scale = time_scale_for([r.arrival_s for r in trace], rate, window_s)
    n = requests_in(rate, window_s)
    scaling = Scaling(
        time_scale=scale,
        length_scale=lengths.length_scale,
        max_prompt=lengths.max_prompt,
        max_output=lengths.max_output,
    )
    mapper = TenantMapper(
        [TenantKey(t.name, keys[t.name], t.share) for t in tenants],
        weighted=True,
        rng=random.Random(seed),
    )
    synth = PromptSynth(text_for_model(model), scaling.block_tokens, seed)
    workload = build_workload(trace[:n], scaling, Window(max_requests=n), mapper, synth)
    classes = {t.name: t.sla_class for t in tenants}
    return [_with_class(w, classes[w.tenant]) for w in workload], scale


def _with_class(w: WorkloadRequest, sla_class: str) -> WorkloadRequest:
    """The request tagged with its tenant's class (the client's records then carry it)."""
    return WorkloadRequest(
        w.index,
        w.send_at_s,
        w.prompt,
        w.prompt_tokens,
        w.max_tokens,
        w.tenant,
        w.api_key,
        sla_class,
        w.trace_tenant,
        w.shared_blocks,
    )
