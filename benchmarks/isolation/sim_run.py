"""One isolation run in the simulator: the same requests on the same simulated GPUs, scheduled
three ways (static partitioning, pooled FCFS, two-level), with engine costs from the profile the
real engine measured (strata.core.profile)."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.isolation.workload import TenantSpec
from strata.core.profile import EngineProfile
from strata.core.sla import SlaTable
from strata.eval.isolation import IsolationFigures, isolation_figures
from strata.eval.traces import TraceRequest
from strata.eval.workload import Scaling, Window
from strata.policy.placement import Assignment, PlacementPlan
from strata.policy.scheduling.global_scheduler import Mode, SchedulerSettings
from strata.sim.cluster import SimConfig, SimResult, Simulator, model_spec
from strata.sim.tenancy import GIVE_UP_S, Tenancy
from strata.sim.workload import sim_requests

WAYS = ("static", "fcfs", "two-level")
ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "benchmarks/profiles/smollm2-135m-instruct-cpu-2026-11-29.json"
# Targets scaled to this engine: a 1,024-token prompt alone takes ~3.5 s to prefill on it.
CLASSES = "interactive=3000/300@2,standard=8000/500@1,batch=best-effort"
SIZES = Scaling(length_scale=4.0, max_prompt=1024, max_output=256)
MAX_BATCHED_TOKENS = 256  # prefill chunk per step: ~0.9 s of this engine
MAX_SEQS = 16
NODE_BYTES = 80 << 30


@dataclass(slots=True)
class SimRun:
    way: str
    result: SimResult
    figures: IsolationFigures
    partitions: dict[str, list[str]]
    refusals: dict[tuple[str, str], int] | None = None  # refused attempts by tenant, reason


def partition(
    tenants: Sequence[TenantSpec], trace: Sequence[TraceRequest], nodes: list[str]
) -> dict[str, list[str]]:
    """Nodes per tenant in proportion to its offered work (prompt + output tokens over the
    run, bursts included), largest remainder, at least one each."""
    work: dict[str, int] = defaultdict(int)
    for r in trace:
        work[r.tenant] += r.prompt_tokens + r.output_tokens
    total = sum(work.values())
    names = [t.name for t in tenants]
    exact = {n: len(nodes) * work[n] / total for n in names}
    count = {n: max(1, int(exact[n])) for n in names}
    for n in sorted(names, key=lambda n: exact[n] - int(exact[n]), reverse=True):
        if sum(count.values()) >= len(nodes):
            break
        count[n] += 1
    out, i = {}, 0
    for n in names:
        out[n] = nodes[i : i + count[n]]
        i += count[n]
    return out


def tenancy_for(
    way: str,
    tenants: Sequence[TenantSpec],
    table: SlaTable,
    parts: dict[str, list[str]],
    refuse_infeasible: bool = False,
    give_up_s: float = GIVE_UP_S,
) -> Tenancy:
    """The way's scheduling. The isolation benchmark serves every request (`refuse_infeasible`
    off): its long prompts exceed the interactive class's TTFT even alone. A refused client
    retries after the hint until `give_up_s` after its first attempt."""
    policies = {t.name: t.policy(table) for t in tenants}
    if way == "static":
        return Tenancy(
            SchedulerSettings(
                mode=Mode.STATIC, partitions={t: frozenset(ids) for t, ids in parts.items()}
            ),
            policies,
            queue="fcfs",
            give_up_s=give_up_s,
        )
    if way == "fcfs":
        return Tenancy(
            SchedulerSettings(mode=Mode.FCFS), policies, queue="fcfs", give_up_s=give_up_s
        )
    return Tenancy(
        SchedulerSettings(mode=Mode.TWO_LEVEL, refuse_infeasible=refuse_infeasible),
        policies,
        queue="wfq",
        give_up_s=give_up_s,
    )


def run_way(
    way: str,
    gpus: int,
    profile: EngineProfile,
    trace: Sequence[TraceRequest],
    tenants: Sequence[TenantSpec],
    table: SlaTable,
    windows: Sequence[tuple[float, float]],
    horizon_s: float,
    load_s: float,
    seed: int = 0,
    max_batched_tokens: int = 512,
    max_seqs: int = 32,
    parts: dict[str, list[str]] | None = None,
    refuse_infeasible: bool = False,
    give_up_s: float = GIVE_UP_S,
) -> SimRun:
    """One way on `gpus` GPUs. `parts` is the static way's nodes per tenant (default:
    `partition`, by offered work)."""
    nodes = [f"gpu-{i:03d}" for i in range(gpus)]
    if parts is None:
        parts = partition(tenants, trace, nodes)
    spec = model_spec(
        profile, memory_bytes=8 << 30, max_batched_tokens=max_batched_tokens, max_seqs=max_seqs
    )

    def place(capacities, demands) -> PlacementPlan:
        loads = [
            Assignment(profile.model, c.node_id, f"{profile.model}@{c.node_id}", "one per GPU")
            for c in capacities
            if not c.replicas
        ]
        return PlacementPlan(assignments=list(loads), loads=loads)

    cfg = SimConfig(seed=seed, horizon_s=horizon_s)
    sim = Simulator(
        [(n, NODE_BYTES) for n in nodes],
        [spec],
        lambda t: [],
        cfg,
        place,
        tenancy_for(way, tenants, table, parts, refuse_infeasible, give_up_s),
    )
    requests = sim_requests(
        trace, Scaling(max_prompt=1 << 30, max_output=1 << 30), Window(), profile.model
    )
    result = sim.run(requests)
    offered: dict[str, int] = defaultdict(int)
    for r in trace:
        offered[r.tenant] += r.output_tokens
    epoch = cfg.epoch_unix_ms
    figures = isolation_figures(
        result.rows,
        result.samples,
        {t.name: t.sla_class for t in tenants},
        offered,
        table,
        next(t.name for t in tenants if t.aggressor),
        [(epoch + a * 1000, epoch + b * 1000) for a, b in windows],
        (epoch, epoch + load_s * 1000),
    )
    return SimRun(way, result, figures, parts, dict(sim.refusals))


def timed(fn, *args, **kwargs):
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t0
