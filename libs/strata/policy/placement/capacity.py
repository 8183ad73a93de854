"""Batch capacity: the P99 latency a GPU's replicas can expect in one window, and how many
requests per second one replica sustains before its SLA class's P99 target breaks.

Engine costs come from a profile of the real engine on one kind of GPU (EngineCosts). Each
replica on a GPU runs its own engine, and prefills go first. A neighbour's step lands a share of
itself in each of mine: s_j of its decode steps, f_j of its prefills (1: strict turns, as two
compute-bound engines on the same cores; below 1: a device that runs a neighbour's kernels
while an engine is busy on its host side; both measured by `strata profile --colocate`,
strata.engine.colocation). For replica k with rate L_k, mean prompt P_k and mean output O_k in a
window:

    p_k   = prefill_s(P_k)                 one prompt's prefill
    PI_k  = L_k p_k + sum_{j != k} f_j L_j p_j
                                           the prefill load k sees (>= 1 for any: overload)
    C_k   = P_k + O_k / 2                  mean context of a decoding sequence
    d_k   = decode_step_s(max(1, n_k), C_k)
    a_k   = 1 - exp(-n_k)                  share of time k has a sequence to decode (Poisson)
    R_k   = sum_{j != k} a_j s_j d_j       what the active neighbours' steps add to each of k's
    T_k   = (d_k + R_k) / (1 - PI_k)       mean time per output token
    n_k   = L_k * O_k * T_k                mean decoding sequences (Little's law)

solved together by fixed-point iteration from n = 0 (every n only grows, so it converges or a
batch outgrows max_batch). Tails, with z = 2.326 (the normal 99th percentile):

    TPOT P99 = (decode_step_s(n_k + z sqrt(n_k), C_k) + R_k) / (1 - PI_k)
               a token of the 99th-percentile batch (Poisson concurrency)
    TTFT P99 = p_k + ln(100 PI_k) * pbar / (1 - PI_k) + d_k + R_k
               its own prefill, the M/M/1 99th-percentile wait behind the GPU's other prefills
               (pbar = PI_k / (L_k + sum_{j != k} f_j L_j): their mean, each neighbour's
               counted by its share; counted when PI_k > 1%), and the round of steps in
               progress

A replica whose 99th-percentile batch exceeds the engine's max_batch, or on a GPU where some
replica's prefill load reaches 1, cannot keep up: its P99s are infinite. With every share 1
this is one GPU-wide PI and strict turns.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

Z_P99 = 2.326  # standard normal 99th percentile
_ITERATIONS = 400
_TOLERANCE = 1e-10
_BISECTIONS = 60
INF = math.inf


class EngineCosts(Protocol):
    """One model's engine costs on one kind of GPU, as profiled.

    Invariants: both costs are positive and never decrease when an argument grows; `max_batch`
    is the most sequences one decode step holds (the engine's max_seqs); the two shares are in
    [0, 1] (the module docstring's s and f: 1 when not measured).
    """

    @property
    def max_batch(self) -> int: ...

    @property
    def colocation_share(self) -> float: ...

    @property
    def prefill_colocation_share(self) -> float: ...

    def prefill_s(self, tokens: float) -> float:
        """Seconds to prefill one prompt of `tokens` tokens with the GPU to itself."""
        ...

    def decode_step_s(self, batch: float, context: float) -> float:
        """Seconds of one decode step for `batch` sequences of mean context `context` tokens."""
        ...


@dataclass(slots=True, frozen=True)
class SlaTarget:
    """A class's P99 targets in milliseconds; None is not judged (both None: best effort)."""

    name: str = "standard"
    ttft_ms: float | None = None
    tpot_ms: float | None = None

    def met_by(self, ttft_p99_ms: float, tpot_p99_ms: float) -> bool:
        return (self.ttft_ms is None or ttft_p99_ms <= self.ttft_ms) and (
            self.tpot_ms is None or tpot_p99_ms <= self.tpot_ms
        )


@dataclass(slots=True, frozen=True)
class Demand:
    """What one replica is asked for in one window."""

    rate: float  # requests per second
    prompt_tokens: float  # means
    output_tokens: float


@dataclass(slots=True, frozen=True)
class Prediction:
    ttft_p99_ms: float  # INF: the replica cannot keep up
    tpot_p99_ms: float
    batch: float  # mean decode batch
    occupancy: float  # share of the GPU's time this replica takes

    @property
    def stable(self) -> bool:
        return math.isfinite(self.ttft_p99_ms) and math.isfinite(self.tpot_p99_ms)


_IDLE = Prediction(0.0, 0.0, 0.0, 0.0)
_OVERLOADED = Prediction(INF, INF, INF, 1.0)


def predict(replicas: Sequence[tuple[EngineCosts, Demand]]) -> list[Prediction]:
    """P99 TTFT and TPOT of each replica sharing one GPU in one window (module docstring)."""
    busy = [d.rate > 0 for _, d in replicas]
    prefill = [c.prefill_s(d.prompt_tokens) if b else 0.0 for (c, d), b in zip(replicas, busy)]
    own = [d.rate * p for (_, d), p in zip(replicas, prefill)]
    loads = [
        own[k]
        + sum(c.prefill_colocation_share * own[j] for j, (c, _) in enumerate(replicas) if j != k)
        for k in range(len(replicas))
    ]
    if any(b and load >= 1 for b, load in zip(busy, loads)):
        return [_OVERLOADED if b else _IDLE for b in busy]
    context = [d.prompt_tokens + d.output_tokens / 2 for _, d in replicas]
    n = [0.0] * len(replicas)
    capped = [False] * len(replicas)
    for _ in range(_ITERATIONS):
        step, active = _steps(replicas, n, context, busy)
        nxt = []
        for k, (costs, d) in enumerate(replicas):
            rest = _neighbours(replicas, k, active, step)
            value = d.rate * d.output_tokens * (step[k] + rest) / (1 - loads[k]) if busy[k] else 0.0
            if value > costs.max_batch:
                capped[k], value = True, float(costs.max_batch)
            nxt.append(value)
        done = all(abs(a - b) < _TOLERANCE * max(1.0, a) for a, b in zip(nxt, n))
        n = nxt
        if done:
            break
    step, active = _steps(replicas, n, context, busy)
    predictions = []
    for k, (costs, d) in enumerate(replicas):
        if not busy[k]:
            predictions.append(_IDLE)
            continue
        batch99 = n[k] + Z_P99 * math.sqrt(n[k])
        if capped[k] or batch99 > costs.max_batch:
            predictions.append(_OVERLOADED)
            continue
        rest = _neighbours(replicas, k, active, step)
        load = loads[k]
        # the mean of the prefills k's waits behind, each neighbour's counted by its share
        seen = d.rate + sum(
            c.prefill_colocation_share * dj.rate for j, (c, dj) in enumerate(replicas) if j != k
        )
        mean_prefill = load / seen
        wait = math.log(100 * load) * mean_prefill / (1 - load) if load > 0.01 else 0.0
        per_token = (step[k] + rest) / (1 - load)
        tpot = (costs.decode_step_s(max(1.0, batch99), context[k]) + rest) / (1 - load)
        ttft = prefill[k] + wait + step[k] + rest
        occupancy = d.rate * prefill[k] + active[k] * step[k] / per_token
        predictions.append(Prediction(ttft * 1000, tpot * 1000, n[k], occupancy))
    return predictions


def replica_capacity(
    costs: EngineCosts, sla: SlaTarget, prompt_tokens: float, output_tokens: float
) -> float:
    """Requests per second one replica alone on its GPU sustains within the class's P99
    targets (a best-effort class: as long as it keeps up at all); 0 when not even a trickle
    of such requests meets them."""

    def ok(rate: float) -> bool:
        [p] = predict([(costs, Demand(rate, prompt_tokens, output_tokens))])
        return p.stable and sla.met_by(p.ttft_p99_ms, p.tpot_p99_ms)

    hi = 1.0 / costs.prefill_s(prompt_tokens)  # prefill alone would fill the GPU
    lo = hi * 1e-9
    if not ok(lo):
        return 0.0
    for _ in range(_BISECTIONS):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def _steps(
    replicas: Sequence[tuple[EngineCosts, Demand]],
    n: Sequence[float],
    context: Sequence[float],
    busy: Sequence[bool],
) -> tuple[list[float], list[float]]:
    """Each replica's decode step at its mean batch, and its share of time with work."""
    step = [
        c.decode_step_s(max(1.0, nk), ctx) if b else 0.0
        for (c, _), nk, ctx, b in zip(replicas, n, context, busy)
    ]
    return step, [1 - math.exp(-nk) for nk in n]


def _neighbours(
    replicas: Sequence[tuple[EngineCosts, Demand]],
    k: int,
    active: Sequence[float],
    step: Sequence[float],
) -> float:
    """R_k: the share of the other replicas' decode steps that lands in each of k's."""
    return sum(
        a * d * c.colocation_share
        for j, ((c, _), a, d) in enumerate(zip(replicas, active, step))
        if j != k
    )
