"""The simulator's part of the overload benchmark: 64 GPUs shared by several tenants, one of them
bursting to 10x its rate, scheduled two ways on the same requests: a static partition of the
guaranteed shares (each tenant alone on round(share x GPUs), the unguaranteed rest split among
the best-effort tenants) and Strata's two-level scheduler on the whole pool (pooled FCFS beside
them for context). The sharing incentive is judged per tenant against the static run:

    steady SLA tenants  (within their guaranteed share) P99 TTFT and E2E no higher, SLA
                        attainment no lower than on their own partition
    the bursting tenant at least the SLA attainment and served tokens its partition gives it
    victims             P99 inflation inside the bursts (strata.eval.isolation) <= 1.2x

The engine costs, SLA classes and sizes are the isolation benchmark's (the committed CPU profile
of SmolLM2-135M, the Azure conversation sizes / 4). A refused client retries after the hint until
the run's horizon, as patient as the static run's client, whose request waits in its partition's
queue however long it takes: served tokens then compare like with like.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass

from benchmarks.isolation.sim_run import (
    CLASSES,
    MAX_BATCHED_TOKENS,
    MAX_SEQS,
    PROFILE,
    SIZES,
    SimRun,
    run_way,
)
from benchmarks.isolation.workload import Bursts, TenantSpec, isolation_trace, trace_sizes
from strata.core.profile import load_profile
from strata.core.sla import SlaTable, parse_classes

TENANTS = (
    TenantSpec("chat", "interactive", 0.25, guaranteed_share=0.3, burst_share=0.6),
    TenantSpec("api", "standard", 0.3, guaranteed_share=0.35, burst_share=0.7),
    TenantSpec("batch", "batch", 0.3, guaranteed_share=0.0, burst_share=1.0),
    TenantSpec("agg", "standard", 0.15, guaranteed_share=0.15, burst_share=0.3, aggressor=True),
)
BURSTS = Bursts(factor=10.0, every_s=120.0, len_s=30.0)
WAYS = ("static", "fcfs", "two-level")
INFLATION_MAX = 1.2


@dataclass(slots=True, frozen=True)
class SimSettings:
    gpus: int = 64
    duration_s: float = 600.0
    rate: float = 18.0  # requests/s of all tenants outside the bursts
    seeds: tuple[int, ...] = (1, 2)
    trace_seed: int = 1


def guaranteed_partition(tenants: Sequence[TenantSpec], nodes: list[str]) -> dict[str, list[str]]:
    """Nodes per tenant: round(guaranteed share x nodes) for a tenant with a guarantee (largest
    remainder, at least one), the nodes left split evenly among the tenants without one."""
    n = len(nodes)
    sure = [t for t in tenants if t.guaranteed_share > 0]
    rest = [t for t in tenants if t.guaranteed_share <= 0]
    exact = {t.name: n * t.guaranteed_share for t in sure}
    count = {name: max(1, math.floor(x)) for name, x in exact.items()}
    budget = n - len(rest)  # every tenant without a guarantee keeps at least one node
    for name in sorted(exact, key=lambda k: exact[k] - math.floor(exact[k]), reverse=True):
        if sum(count.values()) >= min(budget, round(sum(exact.values()))):
            break
        count[name] += 1
    left = n - sum(count.values())
    if left < len(rest):
        raise ValueError(f"{n} nodes cannot hold the guarantees and one node per other tenant")
    for i, t in enumerate(rest):
        count[t.name] = left // len(rest) + (1 if i < left % len(rest) else 0)
    out, i = {}, 0
    for t in tenants:
        out[t.name] = nodes[i : i + count[t.name]]
        i += count[t.name]
    return out


@dataclass(slots=True)
class SimOverload:
    settings: SimSettings
    requests: int
    per_tenant_requests: dict[str, int]
    runs: dict[int, dict[str, tuple[SimRun, float]]]  # seed -> way -> (run, wall seconds)
    partitions: dict[str, list[str]]
    table: SlaTable


def run(settings: SimSettings = SimSettings(), say=print) -> SimOverload:
    profile = load_profile(PROFILE)
    table = parse_classes(CLASSES)
    sizes = trace_sizes(scaling=SIZES)
    trace = isolation_trace(
        TENANTS,
        settings.rate,
        settings.duration_s,
        BURSTS,
        sizes,
        random.Random(settings.trace_seed),
        profile.model,
    )
    nodes = [f"gpu-{i:03d}" for i in range(settings.gpus)]
    parts = guaranteed_partition(TENANTS, nodes)
    windows = BURSTS.windows(settings.duration_s)
    say(f"sim: {len(trace)} requests over {settings.duration_s:.0f} s on {settings.gpus} GPUs")
    runs: dict[int, dict[str, tuple[SimRun, float]]] = {}
    horizon_s = settings.duration_s + 300.0
    for seed in settings.seeds:
        runs[seed] = {}
        for way in WAYS:
            started = time.perf_counter()
            r = run_way(
                way,
                settings.gpus,
                profile,
                trace,
                TENANTS,
                table,
                windows,
                horizon_s,
                settings.duration_s,
                seed=seed,
                max_batched_tokens=MAX_BATCHED_TOKENS,
                max_seqs=MAX_SEQS,
                parts=parts,
                refuse_infeasible=True,
                give_up_s=horizon_s,
            )
            wall = time.perf_counter() - started
            runs[seed][way] = (r, wall)
            f = r.figures
            say(
                f"sim seed {seed} {way}: utilization {f.utilization or 0:.1%}, victims' "
                f"inflation {f.victim_ttft_inflation or 0:.2f}/{f.victim_e2e_inflation or 0:.2f}"
                f", {wall:.0f} s"
            )
    counts: dict[str, int] = {}
    for r in trace:
        counts[r.tenant] = counts.get(r.tenant, 0) + 1
    return SimOverload(settings, len(trace), counts, runs, parts, table)
