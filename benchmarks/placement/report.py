"""docs/benchmarks/placement.md from one run's figures (targets checked, nothing hidden)."""

from __future__ import annotations

import datetime
import platform


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def render(results: list[dict], args, counts: dict[str, int], cap: float, mean_rate: float,
           requests: int, command: str) -> str:
    base, aware = results
    gain = aware["utilization"] / base["utilization"] - 1 if base["utilization"] else 0.0
    p99 = aware["e2e_p99"] / base["e2e_p99"] - 1 if base["e2e_p99"] else 0.0
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Placement benchmark (simulated cluster)", "",
        f"Run {now} with `{command}` on {platform.machine()}, {platform.python_version()}.", "",
        f"{args.models} models on {args.gpus} simulated GPUs, one 'day' of {args.period:.0f} s in "
        f"{args.windows} windows: diurnal curves (amplitude 0.8) at four phases a quarter period "
        f"apart, bursts of 3x for 20 s in every 300 s; prompts 64-256 tokens, outputs 16-64. "
        f"Every model is priced by the committed SmolLM2-135M CPU engine profile "
        f"(libs/strata/sim/profiles/smollm2-135m-instruct-cpu.json): one replica alone sustains "
        f"{cap:.2f} req/s within the interactive SLA (P99 TTFT 2000 ms, TPOT 200 ms) by the "
        f"planner's capacity model; each model's mean rate is {mean_rate:.2f} req/s, so its "
        f"peak needs about {args.peak_replicas:g} replicas. Arrival curves are learned from one "
        f"period of history (seed 1); the evaluation period (seed 2, {requests} requests) is "
        f"simulated by strata.sim with both placements, replanning every window.", "",
        "Replica counts (both placements): " + ", ".join(f"{m} {n}" for m, n in
                                                          sorted(counts.items())) + ".", "",
        "- **baseline**: first-fit-decreasing by memory (strata.policy.placement.plan_placement) "
        "with each replica taking 90% of a GPU's memory, as vLLM reserves by default: one "
        "replica per GPU, blind to when models are busy.",
        "- **batch-aware**: strata.policy.placement.plan_batch_aware with the learned curves; "
        "replicas take their own memory (12 or 20 GiB of 80), complementary ones share a GPU, "
        "and any plan whose predicted P99 breaks the red line in a window is rejected. Red line "
        "in this run: " + ("the class targets (P99 TTFT 2000 ms, TPOT 200 ms)."
                           if args.p99_inflation is None else
                           f"each model's predicted P99 at most {args.p99_inflation:g}x its own "
                           f"running alone at its busiest window (capped by the class targets)."),
        "",
        "| placement | GPUs used | utilization (used GPUs) | E2E P50 ms | E2E P99 ms | "
        "TTFT P99 ms | SLA attainment | failed | migrations | sim wall s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        lines.append(f"| {r['name']} | {r['gpus_used']} | {_pct(r['utilization'])} | "
                     f"{r['e2e_p50']:.0f} | {r['e2e_p99']:.0f} | {r['ttft_p99']:.0f} | "
                     f"{_pct(r['sla'])} | {r['failed']} | {r['migrations']} | "
                     f"{r['bench_wall_s']:.0f} |")
    lines += ["", "P99 per model (E2E ms / TTFT ms / TPOT ms, SLA attainment):", "",
              "| model | baseline | batch-aware |", "|---|---|---|"]
    for m in sorted(base["per_model"]):
        b, a = base["per_model"][m], aware["per_model"].get(m, {})
        lines.append(f"| {m} | {b['e2e_p99']:.0f} / {b['ttft_p99']:.0f} / {b['tpot_p99']:.0f}, "
                     f"{_pct(b['sla'])} | {a.get('e2e_p99', 0):.0f} / "
                     f"{a.get('ttft_p99', 0):.0f} / {a.get('tpot_p99', 0):.0f}, "
                     f"{_pct(a.get('sla', 0))} |")
    util_ok = gain >= 0.20
    p99_ok = p99 <= 0.03
    lines += ["", "## Targets (issue 6)", "",
              "| target | wanted | measured | result |", "|---|---|---|---|",
              f"| average utilization vs baseline | >= 20% higher | {gain:+.1%} "
              f"({_pct(aware['utilization'])} vs {_pct(base['utilization'])}) | "
              f"{'PASS' if util_ok else 'FAIL'} |",
              f"| E2E P99 vs baseline | <= 3% higher | {p99:+.1%} ({aware['e2e_p99']:.0f} vs "
              f"{base['e2e_p99']:.0f} ms) | {'PASS' if p99_ok else 'FAIL'} |", ""]
    return "\n".join(lines) + "\n"
