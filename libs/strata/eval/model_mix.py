"""Multi-model workloads for placement: each model's rate follows its own day, plus bursts.

    rate_m(t) = mean_m * (1 + amplitude * sin(2 pi (t + phase_m) / period)) * burst_m(t)

where burst_m(t) is `burst_factor` inside the model's burst windows (`burst_len_s` long, one
starting at a random time in every `burst_every_s` stretch) and 1 outside. Models whose phases
differ by half a period peak when the other idles: the case batch-aware placement is built for;
models in phase fight for the same GPU at the same hours. Arrivals are drawn by thinning a
Poisson process at the model's peak rate (Lewis and Shedler), so a seed reproduces a mix.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from strata.eval.synthetic import LengthDist
from strata.eval.traces import TraceRequest


@dataclass(slots=True, frozen=True)
class ModelLoad:
    model: str
    mean_rate: float  # requests/s averaged over a period (bursts excluded)
    prompt: LengthDist
    output: LengthDist
    period_s: float = 86_400.0
    amplitude: float = 0.8  # 0..1: how far the rate swings around the mean
    phase_s: float = 0.0
    burst_factor: float = 1.0  # rate multiplier inside a burst; 1 = no bursts
    burst_every_s: float = 3600.0
    burst_len_s: float = 60.0
    sla_class: str = ""

    def __post_init__(self) -> None:
        if not self.model:
            raise ValueError("a model load needs a model name")
        if self.mean_rate <= 0 or self.period_s <= 0:
            raise ValueError(
                f"{self.model}: mean_rate and period_s must be positive, got "
                f"{self.mean_rate}, {self.period_s}"
            )
        if not 0.0 <= self.amplitude <= 1.0:
            raise ValueError(
                f"{self.model}: amplitude must be between 0 and 1, got {self.amplitude}"
            )
        if self.burst_factor < 1.0:
            raise ValueError(
                f"{self.model}: burst_factor must be at least 1, got {self.burst_factor}"
            )
        if self.burst_factor > 1.0 and not 0 < self.burst_len_s <= self.burst_every_s:
            raise ValueError(
                f"{self.model}: need 0 < burst_len_s <= burst_every_s, got "
                f"{self.burst_len_s}, {self.burst_every_s}"
            )

    def diurnal_rate(self, t: float) -> float:
        return self.mean_rate * (
            1.0 + self.amplitude * math.sin(2.0 * math.pi * (t + self.phase_s) / self.period_s)
        )


def burst_windows(
    load: ModelLoad, duration_s: float, rng: random.Random
) -> list[tuple[float, float]]:
    """One burst window at a random start within every burst_every_s stretch."""
    if load.burst_factor == 1.0:
        return []
    out = []
    start = 0.0
    while start < duration_s:
        begin = start + rng.random() * (load.burst_every_s - load.burst_len_s)
        out.append((begin, begin + load.burst_len_s))
        start += load.burst_every_s
    return out


def model_arrivals(load: ModelLoad, duration_s: float, rng: random.Random) -> list[float]:
    windows = burst_windows(load, duration_s, rng)
    peak = load.mean_rate * (1.0 + load.amplitude) * load.burst_factor
    arrivals: list[float] = []
    t = 0.0
    w = 0
    while True:
        t += rng.expovariate(peak)
        if t > duration_s:
            return arrivals
        while w < len(windows) and windows[w][1] <= t:
            w += 1
        rate = load.diurnal_rate(t)
        if w < len(windows) and windows[w][0] <= t:
            rate *= load.burst_factor
        if rng.random() * peak < rate:
            arrivals.append(t)


def model_mix(
    loads: Sequence[ModelLoad], duration_s: float, rng: random.Random
) -> list[TraceRequest]:
    """Every model's requests merged by arrival time; `model` and `sla_class` set on each."""
    if not loads:
        raise ValueError("a mix needs at least one model")
    names = [ld.model for ld in loads]
    if len(set(names)) != len(names):
        raise ValueError(f"model names in a mix must be unique, got {', '.join(names)}")
    if duration_s <= 0:
        raise ValueError(f"duration_s must be positive, got {duration_s}")
    merged: list[TraceRequest] = []
    for load in loads:
        for t in model_arrivals(load, duration_s, rng):
            merged.append(
                TraceRequest(
                    t,
                    load.prompt.sample(rng),
                    load.output.sample(rng),
                    model=load.model,
                    sla_class=load.sla_class,
                )
            )
    merged.sort(key=lambda r: r.arrival_s)
    return merged


def phase_shifted(
    models: Sequence[str],
    mean_rate: float,
    prompt: LengthDist,
    output: LengthDist,
    *,
    period_s: float,
    amplitude: float = 0.8,
    groups: int = 2,
    burst_factor: float = 1.0,
    burst_every_s: float = 3600.0,
    burst_len_s: float = 60.0,
) -> list[ModelLoad]:
    """Models spread over `groups` evenly spaced phases (2: half in antiphase with the other
    half), in name order, each with the same mean rate and burst settings."""
    if groups < 1:
        raise ValueError(f"groups must be at least 1, got {groups}")
    return [
        ModelLoad(
            m,
            mean_rate,
            prompt,
            output,
            period_s=period_s,
            amplitude=amplitude,
            phase_s=(i % groups) * period_s / groups,
            burst_factor=burst_factor,
            burst_every_s=burst_every_s,
            burst_len_s=burst_len_s,
        )
        for i, m in enumerate(models)
    ]
