"""Window loads: what one replica of a model asks of one kind of GPU in each window.

A model's traffic (its arrival curve) is split evenly over its replicas, as the scheduler balances
it. In window w a replica on a GPU of kind `device` then gets

    demand(w) = rate(w) / replicas, with the window's mean prompt and output tokens
    load(w)   = demand(w).rate / capacity(w)

where capacity(w) is what one replica alone on that GPU sustains within the model's P99 targets
for the window's token means (strata.policy.placement.capacity). A load of 1 fills the GPU's batch
capacity for that model; loads of co-located replicas add up window by window, which is what
makes peaks that alternate fit where peaks that coincide do not.

A model without a curve has no load. A model without engine costs on a device is not modelled
there: its load is zero and its latency is not predicted, which the explanation says.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from strata.policy.placement.capacity import (
    Demand,
    EngineCosts,
    SlaTarget,
    replica_capacity,
)
from strata.policy.placement.curves import ArrivalCurve

CostsLookup = Callable[[str, str], "EngineCosts | None"]  # (model, device) -> costs


@dataclass(slots=True, frozen=True)
class ReplicaCount:
    model: str
    replicas: int
    reason: str


class WindowLoads:
    """Per-(model, device) demands, capacities and loads for one planning round.

    Capacities are cached in `capacity_cache` (shared across rounds by the caller) keyed by
    (model, device, SLA, rounded token means), since bisecting them is the round's main cost.
    """

    def __init__(
        self,
        windows: int,
        curves: Mapping[str, ArrivalCurve],
        sla: Mapping[str, SlaTarget],
        costs: CostsLookup,
        capacity_cache: dict | None = None,
    ) -> None:
        for c in curves.values():
            if c.windows != windows:
                raise ValueError(
                    f"curve of {c.model} has {c.windows} windows, the round plans over {windows}"
                )
        self.windows = windows
        self.curves = dict(curves)
        self.sla = dict(sla)
        self._costs = costs
        self._capacity_cache = capacity_cache if capacity_cache is not None else {}
        self.replicas: dict[str, int] = {}
        self._load_cache: dict[tuple[str, str], np.ndarray] = {}

    def target(self, model: str) -> SlaTarget:
        return self.sla.get(model, SlaTarget())

    def costs(self, model: str, device: str) -> EngineCosts | None:
        return self._costs(model, device)

    def modelled(self, model: str, device: str) -> bool:
        return model in self.curves and self._costs(model, device) is not None

    def capacities(self, model: str, device: str) -> tuple[float, ...] | None:
        """Requests/s one replica alone sustains per window; None when not modelled."""
        costs, curve = self._costs(model, device), self.curves.get(model)
        if costs is None or curve is None:
            return None
        sla = self.target(model)
        out = []
        for p, o, rate in zip(curve.prompt_tokens, curve.output_tokens, curve.rates):
            if rate <= 0:
                out.append(math.inf)  # nothing arrives: the window asks nothing of the GPU
                continue
            key = (model, device, sla, round(p, 3), round(o, 3))
            if key not in self._capacity_cache:
                self._capacity_cache[key] = replica_capacity(costs, sla, max(p, 1.0), max(o, 1.0))
            out.append(self._capacity_cache[key])
        return tuple(out)

    def demand(self, model: str, window: int, rate: float | None = None) -> Demand:
        """One replica's share of the window's traffic; `rate`: the model's rate to split
        instead of the window's mean."""
        curve = self.curves.get(model)
        if curve is None:
            return Demand(0.0, 0.0, 0.0)
        share = 1 / max(1, self.replicas.get(model, 1))
        return Demand(
            (curve.rates[window] if rate is None else rate) * share,
            max(curve.prompt_tokens[window], 1.0),
            max(curve.output_tokens[window], 1.0),
        )

    def burst_demand(self, model: str, window: int) -> Demand | None:
        """demand() at the window's busiest-slice rate (ArrivalCurve.provision_rate); None
        where the curve saw no burst above its mean there."""
        curve = self.curves.get(model)
        if curve is None:
            return None
        rate = curve.provision_rate(window)
        return self.demand(model, window, rate) if rate > curve.rates[window] else None

    def load(self, model: str, device: str) -> np.ndarray:
        """One replica's load per window on `device` (inf where no rate meets the targets)."""
        key = (model, device)
        if key not in self._load_cache:
            caps = self.capacities(model, device)
            if caps is None:
                vec = np.zeros(self.windows)
            else:
                rates = np.array([self.demand(model, w).rate for w in range(self.windows)])
                with np.errstate(divide="ignore", invalid="ignore"):
                    vec = np.where(rates > 0, rates / np.array(caps), 0.0)
            self._load_cache[key] = vec
        return self._load_cache[key]

    def reset(self) -> None:
        """Forget per-replica loads, after `replicas` changed."""
        self._load_cache.clear()

    def decide_replicas(self, model: str, minimum: int, device: str, limit: int) -> ReplicaCount:
        """max(minimum, what the peak window needs on `device`), at most `limit` (one per
        node); a model asked for 0 replicas stays at 0."""
        caps = self.capacities(model, device)
        if minimum == 0 or caps is None:
            count = ReplicaCount(
                model,
                minimum,
                f"{minimum} replica(s) configured"
                + ("" if minimum == 0 else f"; load not modelled on {device}"),
            )
        else:
            curve = self.curves[model]
            need: float = 0  # inf when a window has rate but no capacity
            worst = 0
            for w, cap in enumerate(caps):
                rate = curve.provision_rate(w)
                n = math.inf if cap == 0 and rate > 0 else math.ceil(rate / cap - 1e-9)
                if n > need:
                    need, worst = n, w
            if need > minimum:
                cap, rate = caps[worst], curve.provision_rate(worst)
                peak = (
                    f"busiest {curve.burst_s:g} s at {rate:.3g} req/s"
                    if rate > curve.rates[worst]
                    else f"peak {rate:.3g} req/s"
                )
                count = ReplicaCount(
                    model,
                    int(need) if math.isfinite(need) else limit,
                    (
                        f"{peak} in window {worst}, one replica "
                        f"sustains {cap:.3g} req/s there within {_targets(self.target(model))}"
                    ),
                )
            else:
                count = ReplicaCount(
                    model, minimum, f"{minimum} replica(s) configured; the peak window needs {need}"
                )
        if count.replicas > limit:
            count = ReplicaCount(model, limit, f"{count.reason}; capped at {limit}, one per node")
        self.replicas[model] = count.replicas
        self._load_cache = {k: v for k, v in self._load_cache.items() if k[0] != model}
        return count


def _targets(sla: SlaTarget) -> str:
    parts = [
        f"{name} {value:g} ms"
        for name, value in (("TTFT", sla.ttft_ms), ("TPOT", sla.tpot_ms))
        if value is not None
    ]
    return f"{sla.name} ({', '.join(parts) or 'best effort'})"
