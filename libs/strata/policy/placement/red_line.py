"""The SLA red line: a GPU's replicas must each keep their class's P99 targets in every window.

A set of replicas on one kind of GPU is judged window by window with the latency model
(strata.policy.placement.capacity.predict): any model whose predicted P99 TTFT or TPOT exceeds
its class's target in any window breaks the red line, and a plan that does so anywhere is
rejected, whatever it would gain. Each model's check reports its worst window (the one closest
to, or furthest past, a target), which is the number an explanation needs.

Window means hide bursts, and a neighbour's burst is when sharing costs most. Where a curve
measured its windows' busiest slices, each window is judged once more per such neighbour j,
with j at its busiest-slice rate and the others at their means; every model but j must keep its
targets then too. j's own burst is not its neighbours' doing: its replica count is provisioned
for it (strata.policy.placement.loads.decide_replicas).

Results are cached per (device, models on the GPU): the planner asks about the same few
combinations over and over while it searches.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from strata.policy.placement.capacity import EngineCosts, Prediction, SlaTarget, predict
from strata.policy.placement.loads import WindowLoads


@dataclass(slots=True, frozen=True)
class RedLineCheck:
    model: str
    node_id: str
    window: int  # the model's worst window
    ttft_p99_ms: float  # predicted there (inf: it cannot keep up)
    tpot_p99_ms: float
    sla: SlaTarget
    ok: bool
    modelled: bool = True  # False: no engine costs or no traffic, nothing was predicted
    bursting: str = ""  # the neighbour at its busiest slice there ("": at the means)

    def describe(self) -> str:
        if not self.modelled:
            return f"{self.model}: not modelled (no engine profile or no traffic), not checked"
        verdict = "within" if self.ok else "BREAKS"
        when = f" while {self.bursting} bursts" if self.bursting else ""
        return (
            f"{self.model}: window {self.window}{when} P99 TTFT {_ms(self.ttft_p99_ms)} / "
            f"{_ms(self.sla.ttft_ms)}, TPOT {_ms(self.tpot_p99_ms)} / "
            f"{_ms(self.sla.tpot_ms)}: {verdict} {self.sla.name}"
        )


class RedLine:
    def __init__(self, loads: WindowLoads) -> None:
        self._loads = loads
        self._cache: dict[tuple[str, tuple[str, ...]], tuple[RedLineCheck, ...]] = {}
        self._verdicts: dict[tuple[str, tuple[str, ...]], bool] = {}

    def check(self, node_id: str, device: str, models: Sequence[str]) -> list[RedLineCheck]:
        key = (device, tuple(sorted(models)))
        if key not in self._cache:
            self._cache[key] = self._judge(device, key[1])
        return [
            RedLineCheck(
                c.model,
                node_id,
                c.window,
                c.ttft_p99_ms,
                c.tpot_p99_ms,
                c.sla,
                c.ok,
                c.modelled,
                c.bursting,
            )
            for c in self._cache[key]
        ]

    def holds(self, device: str, models: Sequence[str]) -> bool:
        """check()'s verdict, stopping at the first window that breaks (busiest first)."""
        key = (device, tuple(sorted(models)))
        if key in self._cache:
            return all(c.ok for c in self._cache[key])
        if key not in self._verdicts:
            self._verdicts[key] = self._holds(device, key[1])
        return self._verdicts[key]

    def _holds(self, device: str, models: tuple[str, ...]) -> bool:
        loads = self._loads
        modelled = [m for m in models if loads.modelled(m, device)]
        if not modelled:
            return True
        total = sum((loads.load(m, device) for m in modelled[1:]), loads.load(modelled[0], device))
        for w in sorted(range(loads.windows), key=lambda w: (-float(total[w]), w)):
            for judged, _, preds in self._scenarios(device, modelled, w):
                if any(
                    _margin(loads.target(m), p.ttft_p99_ms, p.tpot_p99_ms) > 1.0
                    for m, p in zip(modelled, preds)
                    if m in judged
                ):
                    return False
        return True

    def _scenarios(
        self, device: str, modelled: list[str], w: int
    ) -> Iterator[tuple[set[str], str, list[Prediction]]]:
        """(models judged, the model bursting or "", predictions) in window w: every model at
        its mean rate, then one neighbour at a time at its busiest-slice rate with the others
        judged (module docstring). Every model in `modelled` has costs on `device`."""
        loads = self._loads
        demands = [loads.demand(m, w) for m in modelled]
        costs: list[EngineCosts] = []
        for m in modelled:
            c = loads.costs(m, device)
            assert c is not None
            costs.append(c)
        yield set(modelled), "", predict(list(zip(costs, demands)))
        if len(modelled) < 2 or all(d.rate <= 0 for d in demands):
            return
        for j, m in enumerate(modelled):
            burst = loads.burst_demand(m, w)
            if burst is None:
                continue
            yield (
                set(modelled) - {m},
                m,
                predict(list(zip(costs, [burst if k == j else d for k, d in enumerate(demands)]))),
            )

    def _judge(self, device: str, models: tuple[str, ...]) -> tuple[RedLineCheck, ...]:
        loads = self._loads
        modelled = [m for m in models if loads.modelled(m, device)]
        worst: dict[str, tuple[float, int, float, float, str]] = {}
        for w in range(loads.windows):
            for judged, bursting, preds in self._scenarios(device, modelled, w):
                for m, p in zip(modelled, preds):
                    if m not in judged:
                        continue
                    score = _margin(loads.target(m), p.ttft_p99_ms, p.tpot_p99_ms)
                    if m not in worst or score > worst[m][0]:
                        worst[m] = (score, w, p.ttft_p99_ms, p.tpot_p99_ms, bursting)
        checks = []
        for m in models:
            sla = loads.target(m)
            if m not in worst:
                checks.append(RedLineCheck(m, "", 0, 0.0, 0.0, sla, True, modelled=False))
                continue
            score, w, ttft, tpot, bursting = worst[m]
            checks.append(RedLineCheck(m, "", w, ttft, tpot, sla, score <= 1.0, bursting=bursting))
        return tuple(checks)


def _margin(sla: SlaTarget, ttft_ms: float, tpot_ms: float) -> float:
    """The largest of predicted / target (inf when it cannot keep up, 0 with no targets)."""
    if not (math.isfinite(ttft_ms) and math.isfinite(tpot_ms)):
        return math.inf
    ratios = [v / t for v, t in ((ttft_ms, sla.ttft_ms), (tpot_ms, sla.tpot_ms)) if t is not None]
    return max(ratios, default=0.0)


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return "inf" if math.isinf(value) else f"{value:.1f} ms"
