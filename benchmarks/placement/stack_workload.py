"""The placement benchmark's workload on the real stack: three small models, a short "day".

Each model's request rate over a period of `period_s` seconds is

    rate(t) = mean * (1 + amplitude * sin(2 pi (t / period_s + phase))) * burst(t)

with burst(t) = factor inside one burst window at a fixed phase of every period and 1 outside.
Time t is seconds from the start of the evaluation period, negative for the history before it,
so the history the planner learns from is the same day as the one it is judged on (the burst
included), with other draws. Arrivals are drawn by thinning a Poisson process at the peak rate
(Lewis and Shedler); every prompt and answer of a model has the same length, so a window's
token means are exact and only its request count carries noise.

Rates are set in units of one replica's capacity (requests/s that one replica alone sustains
within the SLA class's P99 targets by the planner's own capacity model over the engine
profile, strata.policy.placement.capacity), as the simulated benchmark sets its rates:

    dummy-tiny    diurnal, mean 0.3, amplitude 0.9, phase 0      peak 0.57 of a replica
    dummy-long    diurnal, mean 0.3, amplitude 0.9, phase 1/2    its antiphase partner: the two
                                                                 add up to 0.6 at every moment
    dummy-small   steady 0.5, 1.6x for 10 s from 1/4 of the      busy all day: it cannot join
                  period                                         either partner at its peak

so a batch-aware planner can put the two partners on one node and must keep dummy-small apart,
while first-fit-decreasing with vLLM's 90% memory share gives every replica its own node. The
margins are chosen against the noise of Poisson counts in 25 s windows (about 15-20%): with
more load on dummy-small, a window of its burst now and then asks for more than one replica
and the planner adds one; with less, it fits beside a partner.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from strata.eval.traces import TraceRequest


@dataclass(slots=True, frozen=True)
class Burst:
    start: float  # where in the period it starts, as a fraction of the period
    length_s: float
    factor: float

    def __post_init__(self) -> None:
        if not 0.0 <= self.start < 1.0 or self.length_s <= 0 or self.factor < 1.0:
            raise ValueError(
                f"a burst needs 0 <= start < 1, length_s > 0 and factor >= 1, "
                f"got {self.start}, {self.length_s}, {self.factor}"
            )


@dataclass(slots=True, frozen=True)
class ModelRole:
    model: str
    prompt_tokens: int
    output_tokens: int
    mean_load: float  # mean rate outside bursts, in replicas' capacities
    amplitude: float = 0.0
    phase: float = 0.0  # fraction of the period the diurnal curve is shifted by
    burst: Burst | None = None

    def __post_init__(self) -> None:
        if self.prompt_tokens < 1 or self.output_tokens < 1:
            raise ValueError(f"{self.model}: token counts must be at least 1")
        if self.mean_load <= 0 or not 0.0 <= self.amplitude <= 1.0:
            raise ValueError(
                f"{self.model}: need mean_load > 0 and 0 <= amplitude <= 1, got "
                f"{self.mean_load}, {self.amplitude}"
            )


# Prompts whose prefill takes about 0.1 s on one idle core of this machine, where one replica
# sustains 2.5 req/s within the interactive class's 500 ms TTFT (a few requests per second in
# all: the node managers share two cores). The comparison fits them again to the profiles it
# prices with (stack_profiles.fit_roles).
BURST_LEN_S = 10.0
ROLES = (
    ModelRole("dummy-tiny", 1569, 32, mean_load=0.3, amplitude=0.9, phase=0.0),
    ModelRole("dummy-long", 666, 32, mean_load=0.3, amplitude=0.9, phase=0.5),
    ModelRole("dummy-small", 313, 32, mean_load=0.5, burst=Burst(0.25, BURST_LEN_S, 1.6)),
)


@dataclass(slots=True, frozen=True)
class ModelRate:
    """A role with its rates in requests/s: `capacity` is one replica's."""

    role: ModelRole
    capacity: float
    period_s: float

    @property
    def mean_rate(self) -> float:
        return self.role.mean_load * self.capacity

    @property
    def peak_rate(self) -> float:
        burst = self.role.burst.factor if self.role.burst else 1.0
        return self.mean_rate * (1.0 + self.role.amplitude) * burst

    def in_burst(self, t: float) -> bool:
        b = self.role.burst
        if b is None:
            return False
        into = (t - b.start * self.period_s) % self.period_s
        return into < b.length_s

    def rate(self, t: float) -> float:
        r = self.role
        diurnal = self.mean_rate * (
            1.0 + r.amplitude * math.sin(2.0 * math.pi * (t / self.period_s + r.phase))
        )
        return diurnal * (r.burst.factor if self.in_burst(t) else 1.0)


def model_rates(
    roles: Sequence[ModelRole], capacities: Mapping[str, float], period_s: float
) -> list[ModelRate]:
    missing = [r.model for r in roles if not capacities.get(r.model, 0) > 0]
    if missing:
        raise ValueError(
            f"no positive capacity for {', '.join(missing)}: the planner's "
            f"capacity model needs an engine profile of each model"
        )
    return [ModelRate(r, capacities[r.model], period_s) for r in roles]


def arrivals(rate: ModelRate, start_s: float, end_s: float, rng: random.Random) -> list[float]:
    """Arrival times in [start_s, end_s), thinned from a Poisson process at the peak rate."""
    peak = rate.peak_rate
    out: list[float] = []
    t = start_s
    while True:
        t += rng.expovariate(peak)
        if t >= end_s:
            return out
        if rng.random() * peak < rate.rate(t):
            out.append(t)


def trace(
    rates: Sequence[ModelRate], start_s: float, end_s: float, rng: random.Random
) -> list[TraceRequest]:
    """Every model's requests in [start_s, end_s), merged by arrival time, `model` set."""
    merged = [
        TraceRequest(t, r.role.prompt_tokens, r.role.output_tokens, model=r.role.model)
        for r in rates
        for t in arrivals(r, start_s, end_s, rng)
    ]
    merged.sort(key=lambda q: (q.arrival_s, q.model))
    return merged


@dataclass(slots=True)
class StackTrace:
    history: list[TraceRequest]  # arrival_s < 0: before the evaluation period
    evaluation: list[TraceRequest]  # arrival_s in [0, period_s)
    rates: list[ModelRate]
    period_s: float
    history_s: float


def build_traces(
    roles: Sequence[ModelRole],
    capacities: Mapping[str, float],
    period_s: float,
    history_s: float,
    seed: int,
) -> StackTrace:
    """`history_s` seconds of history (at least a period, so any planning window of a period
    sees a whole day) and one evaluation period, both drawn from the same rate curves."""
    if history_s < period_s:
        raise ValueError(
            f"history_s ({history_s}) must cover at least one period "
            f"({period_s}) for the planner to see every window"
        )
    rates = model_rates(roles, capacities, period_s)
    history = trace(rates, -history_s, 0.0, random.Random(f"{seed}:history"))
    evaluation = trace(rates, 0.0, period_s, random.Random(f"{seed}:evaluation"))
    return StackTrace(history, evaluation, rates, period_s, history_s)
