"""The isolation benchmark's multi-tenant trace: steady tenants plus an aggressor that bursts to
`burst_factor` x its rate.

Sizes are real: (prompt, output) pairs of the Azure LLM inference conversation trace (2023),
divided by `length_scale` and capped (strata.eval.workload.Scaling), drawn at random per request.
Arrivals: Poisson per tenant at its mean rate; the aggressor's rate is multiplied inside its
burst windows (`burst_len_s` long, one per `burst_every_s`, starting half-way through each
stretch so that every burst has quiet time before and after it to compare with).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from strata.core.sla import SlaTable
from strata.core.tenant_policy import TenantPolicy
from strata.eval.traces import TraceRequest, read_azure
from strata.eval.workload import Scaling

TRACE = (
    Path(__file__).resolve().parents[3] / "shared/data/traces/AzureLLMInferenceTrace_conv_2023.csv"
)


@dataclass(slots=True, frozen=True)
class TenantSpec:
    name: str
    sla_class: str
    share: float  # of the steady offered load (requests)
    weight: float = 1.0
    guaranteed_share: float = 0.0
    burst_share: float = 1.0
    aggressor: bool = False

    def policy(self, table: SlaTable) -> TenantPolicy:
        return TenantPolicy.for_class(
            self.name,
            table.lookup(self.sla_class),
            self.weight,
            self.guaranteed_share,
            self.burst_share,
        )


@dataclass(slots=True, frozen=True)
class Bursts:
    factor: float = 5.0
    every_s: float = 120.0
    len_s: float = 30.0

    def windows(self, duration_s: float) -> list[tuple[float, float]]:
        out, start = [], 0.0
        while start + self.every_s <= duration_s + 1e-9:
            begin = start + (self.every_s - self.len_s) / 2
            out.append((begin, begin + self.len_s))
            start += self.every_s
        return out


def trace_sizes(path: Path = TRACE, scaling: Scaling = Scaling()) -> list[tuple[int, int]]:
    if not path.exists():
        raise SystemExit(
            f"the isolation benchmark draws its request sizes from {path}; it is "
            f"not there (see ../shared/data/traces/README.md)"
        )
    return [
        (scaling.prompt_tokens(r.prompt_tokens), scaling.output_tokens(r.output_tokens))
        for r in read_azure(path).requests
    ]


def isolation_trace(
    tenants: Sequence[TenantSpec],
    rate: float,
    duration_s: float,
    bursts: Bursts,
    sizes: Sequence[tuple[int, int]],
    rng: random.Random,
    model: str,
) -> list[TraceRequest]:
    """`rate` requests/s in total outside the bursts, split by the tenants' shares."""
    windows = bursts.windows(duration_s)
    out: list[TraceRequest] = []
    for spec in tenants:
        mean = rate * spec.share
        peak = mean * (bursts.factor if spec.aggressor else 1.0)
        t, w = 0.0, 0
        while True:
            t += rng.expovariate(peak)
            if t > duration_s:
                break
            while w < len(windows) and windows[w][1] <= t:
                w += 1
            inside = w < len(windows) and windows[w][0] <= t
            if spec.aggressor and not inside and rng.random() * bursts.factor >= 1.0:
                continue  # thinning: outside a burst the aggressor runs at its mean rate
            prompt, output = sizes[rng.randrange(len(sizes))]
            out.append(
                TraceRequest(
                    t, prompt, output, tenant=spec.name, model=model, sla_class=spec.sla_class
                )
            )
    out.sort(key=lambda r: r.arrival_s)
    return out
