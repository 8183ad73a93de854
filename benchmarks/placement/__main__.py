"""Batch-aware placement against the batch-unaware baseline, same trace, same simulated cluster.

    python -m benchmarks.placement [--gpus 64] [--models 32] [--period 1800] [--burst-s 15]
        [--red-lines 1.03,1.05,1.1,class] [--lookahead 2] [--load-s 10]
        [--profile h200|cpu|PATH] [--compare-profile cpu|h200|PATH|'']

Workload: `models` small models (each one's diurnal peak needs --peak-replicas of a replica:
the long tail of a fleet, where dedicated GPUs idle most of the day) with phase-shifted diurnal
curves (four phases a quarter period apart, assigned by a fixed shuffle) and bursts (3x for
20 s in every 300 s); one period of history to learn arrival curves from (seed 1), with each
window's busiest --burst-s slice, and one period to evaluate on (seed 2). Engines: every model
is priced by one committed engine profile (--profile; default the H200 one, TinyLlama-1.1B's
shape in bfloat16 measured on an NVIDIA H200 with its co-location shares:
benchmarks/placement/gpu_profile.sh), with its own name, memory and SLA; the baseline and the
judged run are repeated priced by a second profile (--compare-profile; default SmolLM2-135M on
this machine's CPU, where co-located engines take strict turns).

    baseline     first-fit-decreasing by memory, each replica taking 90% of a GPU's memory
                 (the vLLM default gpu_memory_utilization): one replica per GPU, provisioned
                 for its model's busiest slice; blind to when each model is busy
    batch-aware  strata.policy.placement.plan_batch_aware with the learned curves: replicas
                 take their weights + KV pool, complementary ones share a GPU under the SLA
                 red line (judged at window means and again while each neighbour bursts); one
                 run per red line (the first is the judged one: by default each model's P99
                 within 3% of its own alone, the target's tail budget; then looser ones and
                 the class targets), and one run that judges only the coming windows
                 (--lookahead), replanning every window

Every run is configured with the same replica counts (each model's busiest slice's need,
decided by the batch-aware planner's capacity model under the class targets); a tighter red
line makes the batch-aware planner add replicas where a replica's share of the traffic must be
smaller to stay within it. All run in the same simulator (strata.sim) on the same requests.
Utilization is busy time over wall time averaged over the samples of GPUs that host a replica
at the time (an idle GPU is a GPU the operator can give back); also requests served per GPU
hour, P99s per model, SLA attainment, migrations. Then the same comparison at small size on
the real stack (benchmarks.placement.stack: three node managers, three models; --no-stack
skips it).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

from benchmarks.placement.report import describe_profile
from strata.core.profile import load_profile
from strata.core.stats import percentile
from strata.eval.model_mix import ModelLoad, model_mix
from strata.eval.synthetic import Uniform
from strata.eval.workload import Scaling, Window
from strata.policy.placement import ModelDemand, NodeCapacity, plan_placement
from strata.policy.placement.batch_aware import plan_batch_aware
from strata.policy.placement.capacity import (
    Demand,
    SlaTarget,
    predict,
    replica_capacity,
)
from strata.policy.placement.curves import (
    RequestRow,
    WindowGrid,
    arrival_curves,
    upcoming,
)
from strata.policy.placement.profiles import ProfileCosts
from strata.sim.cluster import SimConfig, Simulator, model_spec
from strata.sim.workload import sim_requests

ROOT = Path(__file__).resolve().parents[2]
PROFILES = {
    "h200": ROOT / "libs/strata/core/profiles/dummy-1b-h200.json",
    "cpu": ROOT / "benchmarks/profiles/smollm2-135m-instruct-cpu-2026-11-29.json",
}
OUT = ROOT / "docs/benchmarks/placement.md"
GPU_BYTES = 80 << 30
BASELINE_SHARE = 0.9  # vLLM's default gpu_memory_utilization
SLA = SlaTarget("interactive", ttft_ms=2000.0, tpot_ms=200.0)


def _loads(models: int, mean_rate: float, period_s: float) -> list[ModelLoad]:
    phases = [i % 4 for i in range(models)]
    random.Random(7).shuffle(phases)
    return [
        ModelLoad(
            f"m{i}",
            mean_rate,
            Uniform(64, 256),
            Uniform(16, 64),
            period_s=period_s,
            amplitude=0.8,
            phase_s=phases[i] * period_s / 4,
            burst_factor=3.0,
            burst_every_s=300.0,
            burst_len_s=20.0,
            sla_class=SLA.name,
        )
        for i in range(models)
    ]


def _memory(i: int) -> int:
    return (12 if i % 2 else 20) << 30  # weights + KV pool of a replica, two sizes


def _p(values: list[float], q: float) -> float:
    return percentile(values, q) if values else float("nan")


def _figures(name: str, result, span_s: float) -> dict:
    # A GPU counts while it hosts a replica (its samples show a KV pool): with a replan loop the
    # set of GPUs in use changes, and an empty GPU is one the operator can give back.
    busy = [s.utilization for s in result.samples if s.kv_blocks_device_total > 0]
    util = sum(busy) / max(1, len(busy))
    nodes = {s.node_id for s in result.samples}
    per_sample = len(result.samples) / max(1, len(nodes))
    gpus_mean = len(busy) / max(1.0, per_sample)
    hosted = {a.node_id for p in result.placements for a in p.assignments}
    per_model: dict[str, dict] = {}
    ok = total = failed = 0
    by_model: dict[str, list] = defaultdict(list)
    for r in result.rows:
        by_model[r.model].append(r)
    for model, rows in sorted(by_model.items()):
        good = [r for r in rows if not r.error_code]
        failed += len(rows) - len(good)
        ttft = [r.ttft_ms for r in good if r.ttft_ms is not None]
        e2e = [r.e2e_ms for r in good if r.e2e_ms is not None]
        tpot = [r.tpot_ms for r in good if r.tpot_ms is not None]
        met = sum(
            1 for r in good if (r.ttft_ms or 0) <= SLA.ttft_ms and (r.tpot_ms or 0) <= SLA.tpot_ms
        )
        ok += met
        total += len(rows)
        per_model[model] = {
            "requests": len(rows),
            "ttft_p99": _p(ttft, 99),
            "e2e_p99": _p(e2e, 99),
            "tpot_p99": _p(tpot, 99),
            "sla": met / len(rows) if rows else 1.0,
        }
    all_e2e = [r.e2e_ms for r in result.rows if not r.error_code and r.e2e_ms is not None]
    all_ttft = [r.ttft_ms for r in result.rows if not r.error_code and r.ttft_ms is not None]
    loads = sum(len(p.loads) for p in result.placements[1:])
    unloads = sum(len(p.unloads) for p in result.placements[1:])
    replicas = max((len(p.assignments) for p in result.placements), default=0)
    return {
        "name": name,
        "gpus_used": len(hosted),
        "gpus_mean": gpus_mean,
        "utilization": util,
        "replicas": replicas,
        "per_gpu_hour": total / max(1e-9, gpus_mean * span_s / 3600),
        "ttft_p99": _p(all_ttft, 99),
        "e2e_p99": _p(all_e2e, 99),
        "e2e_p50": _p(all_e2e, 50),
        "sla": ok / total if total else 1.0,
        "failed": failed,
        "requests": total,
        "migrations": loads + unloads,
        "per_model": per_model,
        "wall_s": result.wall_s,
        "span_s": span_s,
    }


def _relative_sla(costs, curve, factor: float, replicas: int) -> SlaTarget:
    """The model's P99s alone at its busiest window, its traffic split over `replicas`."""
    peak = max(range(curve.windows), key=lambda w: curve.rates[w])
    [alone] = predict(
        [
            (
                costs,
                Demand(
                    curve.rates[peak] / replicas,
                    curve.prompt_tokens[peak],
                    curve.output_tokens[peak],
                ),
            )
        ]
    )
    return SlaTarget(
        SLA.name,
        ttft_ms=min(SLA.ttft_ms, factor * alone.ttft_p99_ms),
        tpot_ms=min(SLA.tpot_ms, factor * alone.tpot_p99_ms),
    )


class _Lookahead:
    """plan_batch_aware over the coming windows of the learned day: the window the simulated
    clock is in and the next `count - 1` (strata.policy.placement.curves.upcoming)."""

    def __init__(self, curves, sla, lookup, count: int) -> None:
        self.curves, self.sla, self.lookup, self.count = curves, sla, lookup, count
        self.clock = None
        self.cache: dict = {}

    def __call__(self, ns, ms):
        some = next(iter(self.curves.values()))
        first = int(self.clock.now() // some.window_s) % some.windows
        cut = upcoming(self.curves, first, self.count)
        return plan_batch_aware(
            ns, ms, cut, self.sla, self.lookup, capacity_cache=self.cache
        ).applicable()


def _red_line_name(factor: float | None) -> str:
    return "class targets" if factor is None else f"{factor:g}x alone"


def _compare(profile, args, red_lines: list[float | None], lookahead_windows: int):
    """Baseline and one batch-aware run per red line (and the lookahead run), every model
    priced by `profile`: (figures per run, replica counts, one replica's capacity, a model's
    mean rate, evaluation requests)."""
    costs = ProfileCosts(profile)
    names = [f"m{i}" for i in range(args.models)]
    cap = replica_capacity(costs, SLA, 160.0, 40.0)
    mean_rate = args.peak_replicas * cap / 1.8
    loads = _loads(args.models, mean_rate, args.period)
    history = model_mix(loads, args.period, random.Random(1))
    evaluation = model_mix(loads, args.period, random.Random(2))
    grid = WindowGrid.recent(args.period / args.windows, args.windows, args.period)
    curves = arrival_curves(
        [RequestRow(r.model, r.arrival_s, r.prompt_tokens, r.output_tokens) for r in history],
        grid,
        args.burst_s,
    )
    class_sla = {m: SLA for m in names}

    def red_line(factor: float | None) -> dict[str, SlaTarget]:
        # Relative to running alone: a model may share a GPU only while its predicted P99s
        # stay within `factor` of its own at its busiest window alone.
        if factor is None:
            return class_sla
        return {m: _relative_sla(costs, curves[m], factor, counts[m]) for m in names}

    nodes = [NodeCapacity(f"gpu-{i:03d}", GPU_BYTES) for i in range(args.gpus)]
    memory = {m: _memory(i) for i, m in enumerate(names)}

    def lookup(model: str, device: str):
        return costs

    first = plan_batch_aware(
        nodes, [ModelDemand(m, memory[m], 1) for m in names], curves, class_sla, lookup
    )
    counts = {mp.model: max(1, mp.replicas) for mp in first.explanation.models}
    print(
        f"capacity {cap:.3f} req/s a replica, mean rate {mean_rate:.3f} req/s a model, "
        f"replicas {counts}",
        flush=True,
    )
    base_spec = model_spec(profile, 0)
    requests = sim_requests(
        evaluation, Scaling(max_prompt=1024, max_output=256), Window(), names[0]
    )
    ways: list[tuple[str, object, float | None, int]] = [("baseline", None, None, 0)]
    ways += [(f"batch-aware, {_red_line_name(f)}", f, f, 0) for f in red_lines]
    if lookahead_windows:
        ways.append(
            (
                f"batch-aware, class targets, lookahead {lookahead_windows}",
                None,
                None,
                lookahead_windows,
            )
        )
    results = []
    for name, _, factor, lookahead in ways:
        share = int(BASELINE_SHARE * GPU_BYTES) if name == "baseline" else None
        specs = [replace(base_spec, name=m, memory_bytes=share or memory[m]) for m in names]
        demands = [ModelDemand(m, share or memory[m], counts[m]) for m in names]
        sla = red_line(factor)
        if name == "baseline":
            placement = plan_placement
        elif lookahead:
            placement = _Lookahead(curves, sla, lookup, lookahead)
        else:

            def placement(ns, ms, sla=sla):
                return plan_batch_aware(ns, ms, curves, sla, lookup).applicable()

        sim = Simulator(
            [(n.node_id, n.memory_bytes) for n in nodes],
            specs,
            lambda now, d=demands: d,
            SimConfig(
                sample_s=10.0, replan_s=args.period / args.windows, seed=3, load_s=args.load_s
            ),
            placement,
        )
        if isinstance(placement, _Lookahead):
            placement.clock = sim.clock
        started = time.perf_counter()
        result = sim.run(requests)
        fig = _figures(name, result, args.period)
        fig["bench_wall_s"] = time.perf_counter() - started
        results.append(fig)
        errors = defaultdict(int)
        for r in result.rows:
            if r.error_code:
                errors[(r.model, r.error_code)] += 1
        if errors:
            print(f"{name}: failed requests by model and code: {dict(errors)}", flush=True)
        print(
            f"{name}: {fig['gpus_used']} GPUs, utilization {fig['utilization']:.1%}, "
            f"E2E P99 {fig['e2e_p99']:.0f} ms, SLA {fig['sla']:.1%}, "
            f"migrations {fig['migrations']}, {fig['bench_wall_s']:.0f} s",
            flush=True,
        )
    return results, counts, cap, mean_rate, len(requests)


def _rel(path) -> str:
    return (
        str(Path(path).resolve().relative_to(ROOT))
        if str(path).startswith(str(ROOT))
        else str(path)
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.placement",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--gpus", type=int, default=64)
    p.add_argument("--models", type=int, default=32)
    p.add_argument("--period", type=float, default=1800.0, help="seconds of one 'day'")
    p.add_argument("--windows", type=int, default=12)
    p.add_argument(
        "--burst-s",
        type=float,
        default=15.0,
        help="the curves' burst slice: replicas are provisioned for each window's "
        "busiest slice of this many seconds (must divide the window; 0: window "
        "means only)",
    )
    p.add_argument(
        "--peak-replicas",
        type=float,
        default=0.6,
        help="replicas a model's diurnal peak needs (sets the request rate)",
    )
    p.add_argument(
        "--red-lines",
        default="1.03,1.05,1.1,class",
        help="batch-aware runs, one per red line: 'class' = the class targets, F = "
        "each model's P99 at most F x its own alone at its busiest window "
        "(capped by the class targets); the first is the one judged: by "
        "default the target's own tail budget, P99 within 3%% of alone",
    )
    p.add_argument(
        "--lookahead",
        type=int,
        default=2,
        help="one more batch-aware run (class targets) judging only the window in "
        "progress and the next N-1, the replan loop moving replicas before "
        "peaks; 0 = no such run",
    )
    p.add_argument(
        "--load-s",
        type=float,
        default=10.0,
        help="seconds a replica placed by a replan loads and warms before it serves "
        "(the replica it replaces keeps serving meanwhile)",
    )
    p.add_argument(
        "--profile",
        default="h200",
        help="engine profile pricing every model: h200 (TinyLlama-1.1B's shape in "
        "bfloat16 on an H200), cpu (SmolLM2-135M on this machine's cores) or a "
        "path",
    )
    p.add_argument(
        "--compare-profile",
        default="cpu",
        help="price the baseline and the class-target run again by this profile "
        "(the same names as --profile; '' for none)",
    )
    p.add_argument(
        "--no-stack",
        action="store_true",
        help="skip the real-stack comparison (benchmarks.placement.stack, ~7 min)",
    )
    p.add_argument("--out", default=str(OUT))
    p.add_argument("--command", default="")
    args = p.parse_args(argv)
    red_lines = [None if x.strip() == "class" else float(x) for x in args.red_lines.split(",")]
    path = PROFILES.get(args.profile, args.profile)
    profile = load_profile(path)
    results, counts, cap, mean_rate, n_requests = _compare(profile, args, red_lines, args.lookahead)
    other = None
    if args.compare_profile:
        other_path = PROFILES.get(args.compare_profile, args.compare_profile)
        other_profile = load_profile(other_path)
        print(f"== the judged pair again, priced by {other_path}", flush=True)
        pair = _compare(other_profile, args, red_lines[:1], 0)[0]
        other = (describe_profile(other_profile, _rel(other_path)), pair)
    stack = ""
    if not args.no_stack:
        from benchmarks.placement.stack import run_stack_comparison

        stack = run_stack_comparison().describe()
    from benchmarks.placement.report import judge, render

    Path(args.out).write_text(
        render(
            results,
            args,
            counts,
            cap,
            mean_rate,
            n_requests,
            stack,
            args.command or " ".join(["python -m benchmarks.placement", *sys.argv[1:]]),
            describe_profile(profile, _rel(path)),
            other,
        )
    )
    for verdict in judge(results[0], results[1]):
        print(verdict.line())
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
