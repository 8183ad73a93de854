"""Batch-aware placement against the batch-unaware baseline, same trace, same simulated cluster.

    python -m benchmarks.placement [--gpus 64] [--models 32] [--period 1800] [--p99-inflation F]

Workload: `models` small models (each one's diurnal peak needs --peak-replicas of a replica:
the long tail of a fleet, where dedicated GPUs idle most of the day) with phase-shifted diurnal
curves (four phases a quarter period apart, assigned by a fixed shuffle) and bursts (3x for
20 s in every 300 s); one period of history to learn arrival curves from (seed 1) and one
period to evaluate on (seed 2). Engines: every model is priced by the committed SmolLM2-135M
CPU profile (a simulated "GPU" is that engine on this machine's cores), with its own name,
memory and SLA.

    baseline     first-fit-decreasing by memory, each replica taking 90% of a GPU's memory
                 (the vLLM default gpu_memory_utilization): one replica per GPU, provisioned
                 for its model's busiest window; blind to when each model is busy
    batch-aware  strata.policy.placement.plan_batch_aware with the learned curves: replicas
                 take their weights + KV pool, complementary ones share a GPU under the SLA
                 red line

Both get the same replica counts (the busiest window's need, decided by the batch-aware
planner's capacity model) and run in the same simulator (strata.sim) on the same requests.
Utilization is busy time over wall time averaged over the GPUs that host a replica (an idle GPU
is a GPU the operator can give back); P99s per model, SLA attainment, migrations.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

from services.placement.profiles import ProfileCosts
from strata.eval.model_mix import ModelLoad, model_mix
from strata.eval.stats import percentile
from strata.eval.synthetic import Uniform
from strata.eval.workload import Scaling, Window
from strata.policy.placement import ModelDemand, NodeCapacity, plan_placement
from strata.policy.placement.batch_aware import plan_batch_aware
from strata.policy.placement.capacity import Demand, SlaTarget, predict, replica_capacity
from strata.policy.placement.curves import RequestRow, WindowGrid, arrival_curves
from strata.sim.cluster import SimConfig, Simulator, model_spec
from strata.sim.profile import load_profile
from strata.sim.workload import sim_requests

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "libs/strata/sim/profiles/smollm2-135m-instruct-cpu.json"
OUT = ROOT / "docs/benchmarks/placement.md"
GPU_BYTES = 80 << 30
BASELINE_SHARE = 0.9           # vLLM's default gpu_memory_utilization
SLA = SlaTarget("interactive", ttft_ms=2000.0, tpot_ms=200.0)


def _loads(models: int, mean_rate: float, period_s: float) -> list[ModelLoad]:
    phases = [i % 4 for i in range(models)]
    random.Random(7).shuffle(phases)
    return [ModelLoad(f"m{i}", mean_rate, Uniform(64, 256), Uniform(16, 64), period_s=period_s,
                      amplitude=0.8, phase_s=phases[i] * period_s / 4, burst_factor=3.0,
                      burst_every_s=300.0, burst_len_s=20.0, sla_class=SLA.name)
            for i in range(models)]


def _memory(i: int) -> int:
    return (12 if i % 2 else 20) << 30     # weights + KV pool of a replica, two sizes


def _p(values: list[float], q: float) -> float:
    return percentile(values, q) if values else float("nan")


def _figures(name: str, result, hosted: set[str], span_s: float) -> dict:
    busy: dict[str, list[float]] = defaultdict(list)
    for s in result.samples:
        busy[s.node_id].append(s.utilization)
    used = sorted(hosted)
    util = sum(sum(busy[n]) / max(1, len(busy[n])) for n in used) / max(1, len(used))
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
        met = sum(1 for r in good if (r.ttft_ms or 0) <= SLA.ttft_ms
                  and (r.tpot_ms or 0) <= SLA.tpot_ms)
        ok += met
        total += len(rows)
        per_model[model] = {"requests": len(rows), "ttft_p99": _p(ttft, 99),
                            "e2e_p99": _p(e2e, 99), "tpot_p99": _p(tpot, 99),
                            "sla": met / len(rows) if rows else 1.0}
    all_e2e = [r.e2e_ms for r in result.rows if not r.error_code and r.e2e_ms is not None]
    all_ttft = [r.ttft_ms for r in result.rows if not r.error_code and r.ttft_ms is not None]
    loads = sum(len(p.loads) for p in result.placements[1:])
    unloads = sum(len(p.unloads) for p in result.placements[1:])
    return {"name": name, "gpus_used": len(used), "utilization": util,
            "ttft_p99": _p(all_ttft, 99), "e2e_p99": _p(all_e2e, 99),
            "e2e_p50": _p(all_e2e, 50), "sla": ok / total if total else 1.0,
            "failed": failed, "requests": total, "migrations": loads + unloads,
            "per_model": per_model, "wall_s": result.wall_s, "span_s": span_s}


def _relative_sla(costs, curve, factor: float) -> SlaTarget:
    peak = max(range(curve.windows), key=lambda w: curve.rates[w])
    replicas = max(1, math.ceil(curve.rates[peak] / replica_capacity(
        costs, SLA, curve.prompt_tokens[peak], curve.output_tokens[peak])))
    [alone] = predict([(costs, Demand(curve.rates[peak] / replicas, curve.prompt_tokens[peak],
                                      curve.output_tokens[peak]))])
    return SlaTarget(SLA.name, ttft_ms=min(SLA.ttft_ms, factor * alone.ttft_p99_ms),
                     tpot_ms=min(SLA.tpot_ms, factor * alone.tpot_p99_ms))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.placement", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gpus", type=int, default=64)
    p.add_argument("--models", type=int, default=32)
    p.add_argument("--period", type=float, default=1800.0, help="seconds of one 'day'")
    p.add_argument("--windows", type=int, default=12)
    p.add_argument("--peak-replicas", type=float, default=0.6,
                   help="replicas a model's diurnal peak needs (sets the request rate)")
    p.add_argument("--p99-inflation", type=float, default=0.0,
                   help="red line: P99 at most this factor above running alone at the model's "
                        "busiest window (omit the class targets); 0 = the class targets only")
    p.add_argument("--out", default=str(OUT))
    p.add_argument("--command", default="")
    args = p.parse_args(argv)
    if args.p99_inflation == 0:
        args.p99_inflation = None

    profile = load_profile(PROFILE)
    costs = ProfileCosts(profile)
    names = [f"m{i}" for i in range(args.models)]
    cap = replica_capacity(costs, SLA, 160.0, 40.0)
    mean_rate = args.peak_replicas * cap / 1.8
    loads = _loads(args.models, mean_rate, args.period)
    history = model_mix(loads, args.period, random.Random(1))
    evaluation = model_mix(loads, args.period, random.Random(2))
    grid = WindowGrid.recent(args.period / args.windows, args.windows, args.period)
    curves = arrival_curves([RequestRow(r.model, r.arrival_s, r.prompt_tokens,
                                        r.output_tokens) for r in history], grid)
    sla = {m: SLA for m in names}
    if args.p99_inflation is not None:
        # A tail-latency red line relative to running alone: a model may share a GPU only while
        # its predicted P99s stay within this factor of its own at its busiest window alone.
        sla = {m: _relative_sla(costs, curves[m], args.p99_inflation) for m in names}
    nodes = [NodeCapacity(f"gpu-{i:03d}", GPU_BYTES) for i in range(args.gpus)]
    memory = {m: _memory(i) for i, m in enumerate(names)}

    def lookup(model: str, device: str):
        return costs

    first = plan_batch_aware(nodes, [ModelDemand(m, memory[m], 1) for m in names], curves, sla,
                             lookup)
    counts = {mp.model: max(1, mp.replicas) for mp in first.explanation.models}
    print(f"capacity {cap:.3f} req/s a replica, mean rate {mean_rate:.3f} req/s a model, "
          f"replicas {counts}", flush=True)
    base_spec = model_spec(profile, 0)
    requests = sim_requests(evaluation, Scaling(max_prompt=1024, max_output=256), Window(),
                            names[0])
    results = []
    for name in ("baseline", "batch-aware"):
        share = int(BASELINE_SHARE * GPU_BYTES) if name == "baseline" else None
        specs = [replace(base_spec, name=m, memory_bytes=share or memory[m]) for m in names]
        demands = [ModelDemand(m, share or memory[m], counts[m]) for m in names]
        if name == "baseline":
            placement = plan_placement
        else:
            def placement(ns, ms):
                return plan_batch_aware(ns, ms, curves, sla, lookup).applicable()
        sim = Simulator([(n.node_id, n.memory_bytes) for n in nodes], specs,
                        lambda now, d=demands: d,
                        SimConfig(sample_s=10.0, replan_s=args.period / args.windows, seed=3),
                        placement)
        started = time.perf_counter()
        result = sim.run(requests)
        hosted = {a.node_id for a in result.placements[-1].assignments}
        fig = _figures(name, result, hosted, args.period)
        fig["bench_wall_s"] = time.perf_counter() - started
        results.append(fig)
        errors = defaultdict(int)
        for r in result.rows:
            if r.error_code:
                errors[(r.model, r.error_code)] += 1
        if errors:
            print(f"{name}: failed requests by model and code: {dict(errors)}", flush=True)
        print(f"{name}: {fig['gpus_used']} GPUs, utilization {fig['utilization']:.1%}, "
              f"E2E P99 {fig['e2e_p99']:.0f} ms, SLA {fig['sla']:.1%}, "
              f"migrations {fig['migrations']}, {fig['bench_wall_s']:.0f} s", flush=True)
    from benchmarks.placement.report import render
    Path(args.out).write_text(render(results, args, counts, cap, mean_rate, len(requests),
                                     args.command or " ".join(["python -m benchmarks.placement",
                                                               *sys.argv[1:]])))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
