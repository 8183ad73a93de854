"""Batch-aware placement against first-fit-decreasing at small size on the real stack.

    python -m benchmarks.placement.stack [--window 25] [--windows 6] [--seed 1]
        [--capacity 2.5] [--ways ffd,batch-aware] [--workdir .strata/placement-stack]

Three node managers ("GPUs", 8 GiB each) and three dummy models with phase-shifted load: two in
antiphase, one steady with a burst (stack_workload). Each way runs on a fresh stack with the
same history in its store and replays the same evaluation trace (stack_run):

    ffd          the planner's first-fit-decreasing with every replica taking 90% of a node
    batch-aware  the planner's batch-aware policy over the arrival curves the collector computes
                 from the request rows, priced by engine profiles measured here

Reported per way: the nodes that held a replica, their utilization from the collector's node
samples, P99 TTFT/TPOT/E2E and SLA attainment per model, migrations (loads and unloads the
planner applied after the evaluation began) and failed requests. The node managers share this
machine's cores, so utilization and latency are indicative, not a GPU's.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.placement.stack_format import describe
from benchmarks.placement.stack_profiles import (
    ModelCost,
    capacities,
    ensure_profiles,
    fit_roles,
    model_costs,
)
from benchmarks.placement.stack_run import StackRun, run_way
from benchmarks.placement.stack_ways import WAYS, StackSettings
from benchmarks.placement.stack_workload import (
    ROLES,
    ModelRole,
    StackTrace,
    build_traces,
)
from strata.core.sla import SlaClass, SlaTable

WORKDIR = Path(".strata/placement-stack")
# Requests/s one replica sustains within the class's targets, prompts fitted to it: about 2.7
# requests/s in all, which the stack serves on this 2-core machine with a core to spare.
CAPACITY = 2.5
HISTORY_MARGIN_S = 10.0  # history beyond period + lead: the planner's first look is early


@dataclass(slots=True)
class StackComparison:
    """The ways on the same trace, in the order they ran."""

    runs: dict[str, StackRun]
    settings: StackSettings
    roles: tuple[ModelRole, ...]
    costs: dict[str, ModelCost]
    profiled_s: dict[str, float]  # model -> seconds its profile took (0: reused)
    profiles_dir: Path
    traces: StackTrace
    sla: SlaClass
    seed: int
    wall_s: float
    capacity: float  # what prompts were fitted to, req/s a replica

    def describe(self) -> str:
        return describe(self)


def run_stack_comparison(
    duration_s: float = 150.0,
    seed: int = 1,
    *,
    windows: int = 6,
    ways: Sequence[str] = WAYS,
    roles: Sequence[ModelRole] = ROLES,
    capacity: float = CAPACITY,
    workdir: Path = WORKDIR,
    settings: StackSettings | None = None,
    progress: bool = True,
) -> StackComparison:
    """Each way on a fresh stack, the same history and evaluation trace. `duration_s` is the
    evaluation period, one "day" of `windows` planning windows; prompts are fitted so that one
    replica sustains `capacity` requests/s (stack_profiles.fit_roles). Each way takes about
    duration_s + 50 s; the first call also profiles the models (about 20 s)."""
    started = time.perf_counter()
    if settings is None:
        settings = StackSettings(window_s=duration_s / windows, windows=windows)
    unknown = [w for w in ways if w not in WAYS]
    if unknown:
        raise ValueError(f"ways must be among {', '.join(WAYS)}, got {', '.join(unknown)}")
    sla = SlaTable().lookup(settings.sla_class)
    profiles_dir = Path(workdir) / "profiles"
    profiled = ensure_profiles([r.model for r in roles], profiles_dir, settings.torch_threads)
    roles = fit_roles(roles, profiles_dir, sla, capacity)
    costs = model_costs(roles, profiles_dir, sla)
    traces = build_traces(
        roles,
        capacities(costs),
        settings.period_s,
        settings.period_s + settings.lead_s + HISTORY_MARGIN_S,
        seed,
    )
    if progress:
        print(
            "capacities (req/s a replica): "
            + ", ".join(f"{m} {c.capacity:.2f}" for m, c in costs.items())
            + f"; {len(traces.history)} history and {len(traces.evaluation)} evaluation "
            f"requests",
            file=sys.stderr,
            flush=True,
        )
    runs = {}
    for way in ways:
        runs[way] = run_way(way, traces, sla, settings, profiles_dir, Path(workdir), seed, progress)
        if progress:
            f = runs[way].figures
            print(
                f"{way}: nodes {', '.join(f.nodes_used)}, utilization {f.utilization:.1%}, "
                f"SLA {f.sla:.1%}, migrations {f.migrations}, failed {f.failed}, "
                f"{runs[way].wall_s:.0f} s",
                file=sys.stderr,
                flush=True,
            )
    return StackComparison(
        runs,
        settings,
        tuple(roles),
        costs,
        profiled,
        profiles_dir,
        traces,
        sla,
        seed,
        time.perf_counter() - started,
        capacity,
    )


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.placement.stack",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--window", type=float, default=25.0, help="planning window, s")
    p.add_argument("--windows", type=int, default=6, help="windows in the day (the period)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--capacity",
        type=float,
        default=CAPACITY,
        help="req/s one replica sustains within the SLA; prompts are fitted to it",
    )
    p.add_argument("--ways", default=",".join(WAYS))
    p.add_argument("--workdir", type=Path, default=WORKDIR)
    args = p.parse_args(argv)
    comparison = run_stack_comparison(
        args.window * args.windows,
        args.seed,
        windows=args.windows,
        capacity=args.capacity,
        ways=[w.strip() for w in args.ways.split(",") if w.strip()],
        workdir=args.workdir,
    )
    print(comparison.describe())
    return 0


if __name__ == "__main__":
    sys.exit(main())
