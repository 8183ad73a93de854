"""`make bench-sim`: the cluster simulator at 1,000 GPUs over one hour of the Azure conversation
trace, its exact-stepping baseline at a smaller size in the same run, and the fidelity test's
numbers; then docs/benchmarks/sim.md.

    python -m benchmarks.sim [--nodes 1000] [--profile libs/strata/core/profiles/dummy-1b-cpu.json]
                             [--target-util 0.65] [--out docs/benchmarks/sim.md] [--no-fidelity]

Each GPU runs the profiled model (one replica per one-GPU node, placed by first-fit-decreasing);
the trace keeps its hour and its shape, its rate multiplied by superposing shifted copies
(strata.sim.workload.superpose) by the factor that loads the GPUs to --target-util, found by
pilot runs on a slice of the cluster. The fidelity numbers come from running
tests/integration/test_sim_fidelity.py (the real stack next to the simulator) in a subprocess.
The KV tiers and prefix-aware routing section (benchmarks.sim.kv_tiers: the Mooncake trace three
ways on 8 simulated nodes) comes from the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from benchmarks.common.machine import host_line
from benchmarks.sim.kv_tiers import run_kv_tiers
from benchmarks.sim.report import SimBench, render, speed_verdict
from benchmarks.sim.run import find_rate_factor, simulate
from strata.core.profile import load_profile
from strata.eval.traces import read_trace
from strata.sim.report import sim_report, write_report

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT.parent / "shared" / "data" / "traces" / "AzureLLMInferenceTrace_conv_2023.csv"
PROFILES = ROOT / "libs" / "strata" / "core" / "profiles"
PROFILE = PROFILES / "dummy-1b-cpu.json"
DEFAULT_MODEL_PROFILE = (
    ROOT / "benchmarks" / "profiles" / "smollm2-135m-instruct-cpu-2026-11-29.json"
)
EXIT_ERROR = 2


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.sim",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--nodes", type=int, default=1000, help="one-GPU nodes (default 1000)")
    p.add_argument("--hours", type=float, default=1.0, help="trace hours to replay (default 1)")
    p.add_argument("--profile", default=str(PROFILE), help="engine profile JSON")
    p.add_argument("--trace", default=str(TRACE), help="Azure conversation trace CSV")
    p.add_argument("--target-util", type=float, default=0.65)
    p.add_argument(
        "--also-profile",
        default=str(DEFAULT_MODEL_PROFILE),
        help="a second profile run at full size over --also-minutes of the trace "
        "(default: the default model's, whose GPUs serve ~7x more requests)",
    )
    p.add_argument("--also-minutes", type=float, default=10.0, help="0 skips the second run")
    p.add_argument("--baseline-nodes", type=int, default=100)
    p.add_argument("--baseline-minutes", type=float, default=20.0)
    p.add_argument(
        "--no-fidelity",
        action="store_true",
        help="skip the fidelity test (it starts the real stack, about a minute)",
    )
    p.add_argument("--out", default=str(ROOT / "docs" / "benchmarks" / "sim.md"))
    p.add_argument("--command", default="", help="the command to print in the report")
    return p.parse_args(argv)


def fidelity() -> dict | None:
    """Run the fidelity test; its numbers, or None when it could not produce them."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fidelity.json"
        env = {**os.environ, "STRATA_SIM_FIDELITY_OUT": str(path)}
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "tests/integration/test_sim_fidelity.py",
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
        )
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-1:]
        print(f"fidelity test: {' '.join(tail)}", file=sys.stderr)
        if not path.exists():
            return None
        doc = json.loads(path.read_text())
        doc["passed"] = proc.returncode == 0
        doc["pytest"] = " ".join(tail)
        return doc


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not Path(args.trace).is_file():
        print(
            f"error: no trace at {args.trace}; this benchmark reads the Azure conversation "
            f"trace from ../shared/data/traces (see its README)",
            file=sys.stderr,
        )
        return EXIT_ERROR
    profile = load_profile(args.profile)
    trace = read_trace(args.trace, "azure").requests
    span = args.hours * 3600
    say = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731
    started = time.perf_counter()
    factor, pilots = find_rate_factor(
        profile, trace, args.nodes, args.target_util, pilot_nodes=40, pilot_s=600.0, start=1.0
    )
    for p in pilots:
        say(f"pilot: rate x{p.rate_factor:.2f} -> {p.utilization * 100:.1f}% busy")
    main_run, result = simulate(profile, trace, args.nodes, span, factor)
    say(f"main: {main_run.requests} requests on {args.nodes} GPUs in {main_run.wall_s:.1f} s")
    raw = ROOT / "docs" / "benchmarks" / "raw"
    report_path = raw / "sim-report.json"
    write_report(
        sim_report(
            result,
            1_700_000_000_000,
            f"sim: {args.nodes} GPUs, Azure conv x{factor:.2f}",
            json.dumps({"nodes": args.nodes, "rate_factor": factor}),
        ),
        report_path,
    )
    del result
    also = None
    if args.also_minutes > 0:
        other = load_profile(args.also_profile)
        other_factor, other_pilots = find_rate_factor(
            other, trace, args.nodes, args.target_util, pilot_nodes=40, pilot_s=600.0, start=1.0
        )
        also, _ = simulate(other, trace, args.nodes, args.also_minutes * 60, other_factor)
        also_label = (
            f"`{other.model}` as profiled in "
            f"`{os.path.relpath(args.also_profile, ROOT)}`; pilots "
            + ", ".join(f"x{q.rate_factor:.2f} -> {q.utilization * 100:.1f}%" for q in other_pilots)
        )
        say(f"also: {also.requests} requests of {other.model} in {also.wall_s:.1f} s")
    scale = args.baseline_nodes / args.nodes
    base_s = args.baseline_minutes * 60
    exact, exact_result = simulate(
        profile, trace, args.baseline_nodes, base_s, factor * scale, fast_forward=False
    )
    fast, fast_result = simulate(profile, trace, args.baseline_nodes, base_s, factor * scale)
    say(f"baseline: exact {exact.wall_s:.1f} s, fast-forward {fast.wall_s:.1f} s")
    tiers = run_kv_tiers()
    say(f"kv tiers: {tiers.wall_s:.1f} s")
    a = {r.request_id: r for r in exact_result.rows}
    diffs = [
        max(
            abs((r.ttft_ms or 0) - (a[r.request_id].ttft_ms or 0)),
            abs(r.e2e_ms - a[r.request_id].e2e_ms),
        )
        for r in fast_result.rows
    ]
    bench = SimBench(
        when=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        command=args.command or "python -m benchmarks.sim " + shlex.join(argv or sys.argv[1:]),
        machine=host_line(),
        profile_path=os.path.relpath(args.profile, ROOT),
        profile=profile,
        target_util=args.target_util,
        pilots=pilots,
        main=main_run,
        also=also,
        also_label=also_label if also else "",
        exact=exact,
        fast=fast,
        max_diff_ms=max(diffs, default=0.0),
        fidelity=None if args.no_fidelity else fidelity(),
        kv_tiers=tiers.describe(),
        report_path=os.path.relpath(report_path, ROOT),
        total_s=time.perf_counter() - started,
    )
    Path(args.out).write_text(render(bench), encoding="utf-8")
    say(speed_verdict(main_run).line())
    say(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
