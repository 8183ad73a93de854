"""Multi-tenant isolation: static partitioning vs pooled FCFS vs Strata's two-level scheduler,
same pool, same trace, in one run; plus the level-1 decision latency at 1,000 nodes.

    python -m benchmarks.isolation [--gpus 64] [--duration 600] [--rate 24] [--no-stack]
                                   [--out docs/benchmarks/isolation.md]

Simulated part (strata.sim with the services' policy objects): `gpus` GPUs, each one replica of
SmolLM2-135M priced by the committed CPU profile of the real engine
(benchmarks/profiles/smollm2-135m-instruct-cpu-2026-11-29.json); the multi-tenant trace of
benchmarks/isolation/workload.py (real Azure conversation sizes, steady tenants plus an
aggressor bursting to 5x). Real-stack part (benchmarks/isolation/stack_run.py): the same three
ways on two node managers of this machine, when --no-stack is not given.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

from benchmarks.common.targets import Verdict
from benchmarks.isolation import route_latency
from benchmarks.isolation.sim_run import (
    CLASSES,
    MAX_BATCHED_TOKENS,
    MAX_SEQS,
    PROFILE,
    SIZES,
    WAYS,
    run_way,
)
from benchmarks.isolation.workload import (
    Bursts,
    TenantSpec,
    isolation_trace,
    trace_sizes,
)
from strata.core.profile import load_profile
from strata.core.sla import parse_classes

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "docs/benchmarks/isolation.md"
# The real stack serves dummy-tiny, ~50x faster per token: the compose defaults fit it.
STACK_CLASSES = "interactive=500/100@2,standard=2000/200,batch=best-effort"
TENANTS = (
    TenantSpec("chat", "interactive", 0.25, guaranteed_share=0.25, burst_share=0.5),
    TenantSpec("api", "standard", 0.25, guaranteed_share=0.25, burst_share=0.5),
    TenantSpec("batch", "batch", 0.35, guaranteed_share=0.0, burst_share=1.0),
    TenantSpec("agg", "standard", 0.15, guaranteed_share=0.15, burst_share=0.6, aggressor=True),
)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.isolation")
    p.add_argument("--gpus", type=int, default=64)
    p.add_argument("--duration", type=float, default=600.0)
    p.add_argument("--rate", type=float, default=24.0, help="steady requests/s, all tenants")
    p.add_argument("--seed", type=int, default=1, help="the trace's seed")
    p.add_argument(
        "--sim-seeds",
        default="1,2,3",
        help="the simulator's seeds (routing draws): every way runs with each",
    )
    p.add_argument("--nodes", type=int, default=1000, help="registered nodes, decision latency")
    p.add_argument("--no-stack", action="store_true", help="skip the real-stack part")
    p.add_argument("--stack-duration", type=float, default=90.0)
    p.add_argument("--out", default=str(OUT))
    p.add_argument("--command", default="")
    args = p.parse_args(argv)

    profile = load_profile(PROFILE)
    table = parse_classes(CLASSES)
    bursts = Bursts(5.0, 120.0, 30.0)
    sizes = trace_sizes(scaling=SIZES)
    trace = isolation_trace(
        TENANTS, args.rate, args.duration, bursts, sizes, random.Random(args.seed), profile.model
    )
    windows = bursts.windows(args.duration)
    print(
        f"{len(trace)} requests over {args.duration:.0f} s on {args.gpus} simulated GPUs",
        flush=True,
    )
    sim: dict[int, dict] = {}
    for seed in (int(x) for x in args.sim_seeds.split(",")):
        sim[seed] = {}
        for way in WAYS:
            started = time.perf_counter()
            run = run_way(
                way,
                args.gpus,
                profile,
                trace,
                TENANTS,
                table,
                windows,
                args.duration + 300.0,
                args.duration,
                seed=seed,
                max_batched_tokens=MAX_BATCHED_TOKENS,
                max_seqs=MAX_SEQS,
            )
            wall = time.perf_counter() - started
            sim[seed][way] = (run, wall)
            f = run.figures
            print(
                f"sim seed {seed} {way}: utilization {f.utilization:.1%}, worst P99 TTFT "
                f"{f.worst_ttft_p99_ms:.0f} ms, E2E {f.worst_e2e_p99_ms:.0f} ms, victims' "
                f"inflation {f.victim_ttft_inflation:.2f}/{f.victim_e2e_inflation:.2f}, "
                f"{wall:.0f} s",
                flush=True,
            )
    latency = route_latency.run(nodes=args.nodes)
    for r in latency:
        print(f"route {r.name}: P50 {r.p50_us:.0f} us, P99 {r.p99_us:.0f} us", flush=True)
    stack = None
    if not args.no_stack:
        from benchmarks.isolation.stack_run import run_all

        stack = run_all(TENANTS, parse_classes(STACK_CLASSES), args.stack_duration)
    from benchmarks.isolation.report import render

    command = args.command or " ".join(["python -m benchmarks.isolation", *sys.argv[1:]])
    engine = {"max_batched_tokens": MAX_BATCHED_TOKENS, "max_seqs": MAX_SEQS}
    text, data = render(args, TENANTS, engine, trace, sim, latency, stack, table, command)
    Path(args.out).write_text(text)
    Path(args.out).with_suffix(".json").write_text(json.dumps(data, indent=1, sort_keys=True))
    for v in data["targets"]["verdicts"]:
        print(Verdict(**v).line())
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
