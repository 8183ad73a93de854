"""Synthetic workloads for replay: Poisson, Gamma bursts, diurnal load and a multi-tenant mix.

Each generator takes an injected `random.Random`, so a seed reproduces a workload exactly, and
returns the same TraceRequest list as the trace readers. Arrival processes start at time 0 and
the first request comes one inter-arrival gap later (a process observed from its start, not one
that happens to fire at 0), which keeps the tenants of a mix from all firing at once.

    poisson   gaps ~ Exponential(rate): memoryless, CV of gaps = 1
    gamma     gaps ~ Gamma(shape k = 1/CV^2, scale 1/(rate k)): mean 1/rate, CV as asked;
              CV > 1 gives bursts (many short gaps, a few long ones), CV < 1 a steadier stream
    diurnal   non-homogeneous Poisson with rate(t) = mean (1 + amplitude sin(2 pi (t + phase) /
              period)), drawn by thinning (Lewis and Shedler): candidates at the peak rate, each
              kept with probability rate(t) / peak
    mix       one Gamma (or Poisson, CV = 1) stream per tenant with its own rate, SLA class and
              length distributions, merged in time order
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from strata.eval.traces import TraceRequest


class LengthDist(Protocol):
    """A distribution of token counts; every sample is at least 1."""

    def sample(self, rng: random.Random) -> int: ...


@dataclass(slots=True, frozen=True)
class Fixed:
    tokens: int

    def __post_init__(self) -> None:
        _at_least_one("tokens", self.tokens)

    def sample(self, rng: random.Random) -> int:
        return self.tokens


@dataclass(slots=True, frozen=True)
class Uniform:
    """Integers low..high inclusive, each equally likely."""

    low: int
    high: int

    def __post_init__(self) -> None:
        _at_least_one("low", self.low)
        if self.high < self.low:
            raise ValueError(f"high must be at least low ({self.low}), got {self.high}")

    def sample(self, rng: random.Random) -> int:
        return rng.randint(self.low, self.high)


@dataclass(slots=True, frozen=True)
class LogNormal:
    """round(median * exp(sigma * N(0, 1))) clipped to low..high: the long tail of real prompts."""

    median: float
    sigma: float
    low: int = 1
    high: int = 1 << 20

    def __post_init__(self) -> None:
        if self.median <= 0 or self.sigma < 0:
            raise ValueError(
                f"a log-normal length needs median > 0 and sigma >= 0, got "
                f"median={self.median}, sigma={self.sigma}"
            )
        _at_least_one("low", self.low)
        if self.high < self.low:
            raise ValueError(f"high must be at least low ({self.low}), got {self.high}")

    def sample(self, rng: random.Random) -> int:
        value = round(self.median * math.exp(self.sigma * rng.gauss(0.0, 1.0)))
        return min(self.high, max(self.low, value))


def poisson_arrivals(
    rate: float, rng: random.Random, *, count: int | None = None, duration_s: float | None = None
) -> list[float]:
    _positive("rate", rate)
    return _renewal(lambda: rng.expovariate(rate), count, duration_s)


def gamma_arrivals(
    rate: float,
    cv: float,
    rng: random.Random,
    *,
    count: int | None = None,
    duration_s: float | None = None,
) -> list[float]:
    """Gamma gaps with mean 1/rate and coefficient of variation cv (0 = evenly spaced)."""
    _positive("rate", rate)
    if cv < 0:
        raise ValueError(f"cv must be non-negative, got {cv}")
    if cv == 0:
        return _renewal(lambda: 1.0 / rate, count, duration_s)
    shape = 1.0 / (cv * cv)
    scale = 1.0 / (rate * shape)
    return _renewal(lambda: rng.gammavariate(shape, scale), count, duration_s)


def diurnal_arrivals(
    mean_rate: float,
    period_s: float,
    amplitude: float,
    rng: random.Random,
    *,
    phase_s: float = 0.0,
    count: int | None = None,
    duration_s: float | None = None,
) -> list[float]:
    """A Poisson process whose rate swings sinusoidally by +-amplitude (0..1) around mean_rate."""
    _positive("mean_rate", mean_rate)
    _positive("period_s", period_s)
    if not 0.0 <= amplitude <= 1.0:
        raise ValueError(f"amplitude must be between 0 and 1, got {amplitude}")
    _check_bounds(count, duration_s)
    peak = mean_rate * (1.0 + amplitude)
    arrivals: list[float] = []
    t = 0.0
    while count is None or len(arrivals) < count:
        t += rng.expovariate(peak)
        if duration_s is not None and t > duration_s:
            break
        rate = mean_rate * (1.0 + amplitude * math.sin(2.0 * math.pi * (t + phase_s) / period_s))
        if rng.random() * peak < rate:
            arrivals.append(t)
    return arrivals


def requests_at(
    arrivals: Sequence[float],
    prompt: LengthDist,
    output: LengthDist,
    rng: random.Random,
    *,
    tenant: str = "",
    sla_class: str = "",
) -> list[TraceRequest]:
    """One request per arrival, sizes drawn in arrival order (prompt, then output)."""
    return [
        TraceRequest(t, prompt.sample(rng), output.sample(rng), tenant=tenant, sla_class=sla_class)
        for t in arrivals
    ]


@dataclass(slots=True, frozen=True)
class TenantTraffic:
    """One tenant's share of a mix: its request rate, burstiness, SLA class and sizes."""

    tenant: str
    rate: float
    sla_class: str
    prompt: LengthDist
    output: LengthDist
    cv: float = 1.0

    def __post_init__(self) -> None:
        if not self.tenant:
            raise ValueError("a tenant of a mix needs a name")
        _positive(f"rate of tenant {self.tenant}", self.rate)


def tenant_mix(
    tenants: Sequence[TenantTraffic],
    rng: random.Random,
    *,
    count: int | None = None,
    duration_s: float | None = None,
) -> list[TraceRequest]:
    """All tenants' requests merged by arrival time (ties keep the tenants' order).

    Tenants draw from `rng` one after another, so a tenant's stream depends on those before it
    in the list: the same list and seed always give the same mix.
    """
    if not tenants:
        raise ValueError("a mix needs at least one tenant")
    names = [t.tenant for t in tenants]
    if len(set(names)) != len(names):
        raise ValueError(f"tenant names in a mix must be unique, got {', '.join(names)}")
    merged: list[TraceRequest] = []
    for load in tenants:
        if load.cv == 1.0:
            arrivals = poisson_arrivals(load.rate, rng, count=count, duration_s=duration_s)
        else:
            arrivals = gamma_arrivals(load.rate, load.cv, rng, count=count, duration_s=duration_s)
        merged.extend(
            requests_at(
                arrivals,
                load.prompt,
                load.output,
                rng,
                tenant=load.tenant,
                sla_class=load.sla_class,
            )
        )
    merged.sort(key=lambda r: r.arrival_s)
    return merged if count is None else merged[:count]


def _renewal(gap: Callable[[], float], count: int | None, duration_s: float | None) -> list[float]:
    _check_bounds(count, duration_s)
    arrivals: list[float] = []
    t = 0.0
    while count is None or len(arrivals) < count:
        t += gap()
        if duration_s is not None and t > duration_s:
            break
        arrivals.append(t)
    return arrivals


def _check_bounds(count: int | None, duration_s: float | None) -> None:
    if count is None and duration_s is None:
        raise ValueError("give a request count or a duration: a synthetic process never ends")
    if count is not None and count < 0:
        raise ValueError(f"count must be non-negative, got {count}")
    if duration_s is not None and duration_s < 0:
        raise ValueError(f"duration_s must be non-negative, got {duration_s}")


def _positive(name: str, value: float) -> None:
    if not value > 0 or math.isinf(value):
        raise ValueError(f"{name} must be a positive number, got {value}")


def _at_least_one(name: str, value: int) -> None:
    if value < 1:
        raise ValueError(f"{name} must be at least 1, got {value}")
