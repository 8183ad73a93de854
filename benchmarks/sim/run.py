"""One simulated run of the benchmark: a cluster of one-GPU nodes serving one model from an
engine profile, the Azure conversation trace superposed to a rate factor, and what it cost.

The rate factor is found, not guessed: pilot runs on a slice of the cluster and of the hour,
with the rate factor scaled by the slice (so each node sees the same load), move it towards the
target utilization until the pilot's busy time over wall time lands within a few points of it.
"""

from __future__ import annotations

import random
import resource
import time
from dataclasses import dataclass

from strata.core.profile import EngineProfile
from strata.eval.traces import TraceRequest
from strata.eval.workload import Scaling, Window
from strata.policy.model_sizes import model_memory_bytes
from strata.policy.placement import ModelDemand
from strata.sim.cluster import SimConfig, SimResult, Simulator, model_spec
from strata.sim.workload import sim_requests, superpose

MIN_NODE_BYTES = 8 << 30  # a node's memory for placement: one replica of the model fits


@dataclass(slots=True)
class RunFigures:
    nodes: int
    trace_s: float
    rate_factor: float
    fast_forward: bool
    requests: int
    failed: int
    failed_codes: dict[str, int]
    wall_s: float
    cpu_s: float  # this process's CPU time during the run
    events: int
    steps: int
    stretches: int
    simulated_s: float
    utilization: float  # busy / wall over the trace's span, mean over GPUs
    ttft_p50_ms: float
    ttft_p99_ms: float
    e2e_p50_ms: float
    e2e_p99_ms: float

    @property
    def events_per_s(self) -> float:
        return self.events / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.wall_s if self.wall_s > 0 else 0.0


def _percentile(values: list[float], q: float) -> float:
    from strata.core.stats import percentile

    return percentile(values, q) if values else float("nan")


def simulate(
    profile: EngineProfile,
    trace: list[TraceRequest],
    nodes: int,
    trace_s: float,
    rate_factor: float,
    fast_forward: bool = True,
    seed: int = 0,
    sample_s: float = 30.0,
) -> tuple[RunFigures, SimResult]:
    """The first trace_s seconds of `trace` at rate_factor times its rate on `nodes` GPUs."""
    window = [r for r in trace if r.arrival_s <= trace_s]
    requests = sim_requests(
        superpose(window, rate_factor, random.Random(seed)),
        Scaling(max_prompt=profile.max_context - 1024, max_output=1024),
        Window(),
        profile.model,
    )
    memory = model_memory_bytes(profile.model) or MIN_NODE_BYTES // 2
    spec = model_spec(profile, memory)
    sim = Simulator(
        [(f"gpu-{i:04d}", max(MIN_NODE_BYTES, 2 * memory)) for i in range(nodes)],
        [spec],
        lambda now: [ModelDemand(profile.model, memory, nodes)],
        SimConfig(sample_s=sample_s, fast_forward=fast_forward, seed=seed),
    )
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    result = sim.run(requests)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    ok = [r for r in result.rows if not r.error_code]
    return RunFigures(
        nodes=nodes,
        trace_s=trace_s,
        rate_factor=rate_factor,
        fast_forward=fast_forward,
        requests=len(requests),
        failed=len(result.rows) - len(ok),
        failed_codes=_codes(result),
        wall_s=wall,
        cpu_s=(after.ru_utime + after.ru_stime) - (cpu.ru_utime + cpu.ru_stime),
        events=result.events,
        steps=result.steps,
        stretches=result.stretches,
        simulated_s=result.end_s,
        utilization=busy_fraction(result, trace_s),
        ttft_p50_ms=_percentile([r.ttft_ms for r in ok], 50),
        ttft_p99_ms=_percentile([r.ttft_ms for r in ok], 99),
        e2e_p50_ms=_percentile([r.e2e_ms for r in ok], 50),
        e2e_p99_ms=_percentile([r.e2e_ms for r in ok], 99),
    ), result


def _codes(result: SimResult) -> dict[str, int]:
    codes: dict[str, int] = {}
    for r in result.rows:
        if r.error_code:
            codes[r.error_code] = codes.get(r.error_code, 0) + 1
    return codes


def busy_fraction(result: SimResult, until_s: float) -> float:
    """Mean over GPUs of busy time over wall time in [0, until_s], from the node samples
    (each sample's utilization covers the interval since the node's previous one)."""
    epoch = min(s.unix_ms for s in result.samples)
    by_node: dict[str, list] = {}
    for s in result.samples:
        by_node.setdefault(s.node_id, []).append(s)
    fractions = []
    for mine in by_node.values():
        mine.sort(key=lambda s: s.unix_ms)
        busy = wall = 0.0
        for prev, cur in zip(mine, mine[1:]):
            a, b = (prev.unix_ms - epoch) / 1000, (cur.unix_ms - epoch) / 1000
            if a >= until_s:
                break
            share = (min(b, until_s) - a) / (b - a) if b > a else 0.0
            busy += cur.utilization * (b - a) * share
            wall += (b - a) * share
        fractions.append(busy / wall if wall else 0.0)
    return sum(fractions) / len(fractions)


def find_rate_factor(
    profile: EngineProfile,
    trace: list[TraceRequest],
    nodes: int,
    target: float,
    pilot_nodes: int,
    pilot_s: float,
    start: float,
    tolerance: float = 0.03,
    rounds: int = 5,
) -> tuple[float, list[RunFigures]]:
    """The cluster-wide rate factor whose pilot lands within tolerance of `target`."""
    factor, pilots = start, []
    for _ in range(rounds):
        figures, _ = simulate(profile, trace, pilot_nodes, pilot_s, factor * pilot_nodes / nodes)
        figures.rate_factor = factor
        pilots.append(figures)
        if abs(figures.utilization - target) <= tolerance or figures.utilization <= 0:
            break
        # Utilization is close to linear in load below saturation; damped above it.
        factor *= (target / figures.utilization) ** (1.0 if figures.utilization < 0.9 else 0.5)
    return factor, pilots
