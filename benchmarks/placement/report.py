"""docs/benchmarks/placement.md from one run's figures (targets checked, nothing hidden)."""

from __future__ import annotations

import datetime

from benchmarks.common.machine import host_line
from benchmarks.common.tables import pct as _pct
from benchmarks.common.targets import Target, Verdict, reported, target_table

# Issue 6's targets, judged on the first batch-aware run against the baseline.
TARGETS = {
    "utilization": Target("average utilization vs baseline", ">=", 0.20, "{:.0%}", " higher"),
    "e2e_p99": Target("E2E P99 vs baseline", "<=", 0.03, "{:.0%}", " higher"),
}


def _change(a: float, b: float) -> float:
    return a / b - 1 if b else 0.0


def describe_profile(profile, path: str) -> str:
    """One sentence on the engine profile pricing every simulated model."""
    decodes = [m.seconds for m in profile.measurements if m.kind == "decode"]
    gpu = profile.machine.get("gpu")
    where = f"on an {gpu}" if gpu else f"on {profile.threads} thread(s) of this machine's CPU"
    shares = (
        "co-location shares as measured there (strata.engine.colocation): a neighbour's "
        f"decode step adds {profile.colocation_share:.2f} of itself to each of mine, a "
        f"neighbour's prefill {profile.prefill_colocation_share:.2f}"
        if profile.colocation
        else "co-location not measured: engines sharing a GPU take strict turns"
    )
    return (
        f"the engine profile {path} ({profile.model}, {profile.dtype}, {where}; decode "
        f"steps {min(decodes) * 1e3:.1f}-{max(decodes) * 1e3:.1f} ms over batches "
        f"{min(m.batch for m in profile.measurements if m.kind == 'decode')}-"
        f"{max(m.batch for m in profile.measurements if m.kind == 'decode')}; {shares})"
    )


def judge(base: dict, aware: dict) -> list[Verdict]:
    """The targets on `aware` against `base`, and the work per GPU reported beside them."""
    gain = _change(aware["utilization"], base["utilization"])
    p99 = _change(aware["e2e_p99"], base["e2e_p99"])
    return [
        TARGETS["utilization"].judge(
            gain,
            f"{gain:+.1%} ({_pct(aware['utilization'])} vs {_pct(base['utilization'])})",
        ),
        TARGETS["e2e_p99"].judge(
            p99, f"{p99:+.1%} ({aware['e2e_p99']:.0f} vs {base['e2e_p99']:.0f} ms)"
        ),
        reported(
            "requests per GPU-hour vs baseline",
            "(reported: busy time also grows when more replicas share the same work)",
            f"{_change(aware['per_gpu_hour'], base['per_gpu_hour']):+.1%} "
            f"({aware['per_gpu_hour']:,.0f} vs {base['per_gpu_hour']:,.0f})",
        ),
    ]


def render(
    results: list[dict],
    args,
    counts: dict[str, int],
    cap: float,
    mean_rate: float,
    requests: int,
    stack: str,
    command: str,
    profile: str,
    other: tuple[str, list[dict]] | None = None,
) -> str:
    """The simulated comparison, then the judged pair on `other` (another profile's
    description and its baseline and class-target results), then `stack` (the real-stack
    section, markdown; "" when it was not run)."""
    base, aware = results[0], results[1]
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Placement benchmark (simulated cluster)",
        "",
        f"Run {now} with `{command}` on {host_line()}.",
        "",
        f"{args.models} models on {args.gpus} simulated GPUs, one 'day' of {args.period:.0f} s in "
        f"{args.windows} windows: diurnal curves (amplitude 0.8) at four phases a quarter period "
        f"apart, bursts of 3x for 20 s in every 300 s (each model's at its own random times); "
        f"prompts 64-256 tokens, outputs 16-64. "
        f"Every model is priced by {profile}: one replica alone sustains "
        f"{cap:.2f} req/s within the interactive SLA (P99 TTFT 2000 ms, TPOT 200 ms) by the "
        f"planner's capacity model; each model's mean rate is {mean_rate:.2f} req/s, so its "
        f"peak needs about {args.peak_replicas:g} replicas. Arrival curves are learned from one "
        f"period of history (seed 1), with each window's busiest {args.burst_s:g} s slice "
        f"(strata.policy.placement.curves: replicas are provisioned for it, counted at the "
        f"lower 99% bound of its rate); the evaluation period (seed 2, {requests} requests) is "
        f"simulated by strata.sim for every placement, replanning every window; a replica a "
        f"replan places loads for {args.load_s:g} s while the one it replaces keeps serving.",
        "",
        "Replica counts configured for every run, each model's busiest slice's need under the "
        "class targets (batch-aware adds replicas where a tighter red line needs them: the "
        "replicas column): " + ", ".join(f"{m} {n}" for m, n in sorted(counts.items())) + ".",
        "",
        "- **baseline**: first-fit-decreasing by memory (strata.policy.placement.plan_placement) "
        "with each replica taking 90% of a GPU's memory, as vLLM reserves by default: one "
        "replica per GPU, blind to when models are busy.",
        "- **batch-aware**: strata.policy.placement.plan_batch_aware with the learned curves; "
        "replicas take their own memory (12 or 20 GiB of 80), complementary ones share a GPU, "
        "and any plan whose predicted P99 breaks the red line in a window is rejected; each "
        "window is judged at the curves' means and again with each neighbour at its busiest "
        "slice's rate (strata.policy.placement.red_line). One run per red line: F x alone = "
        "each model's predicted P99 at most F x its own running alone at its busiest window, "
        "its traffic split over its replicas (capped by the class targets); class targets = "
        "the interactive class's. The first is the judged run: "
        + results[1]["name"]
        + (
            ", the target's own tail budget given to the planner as its red line"
            if results[1]["name"].endswith("1.03x alone")
            else ""
        )
        + (
            f"; and one run judging only the coming {args.lookahead} windows "
            f"(`--lookahead`: models share off-peak and part before a peak)"
            if args.lookahead
            else ""
        )
        + ".",
        "",
        "Utilization is busy time over wall time, averaged over the node samples (every 10 s) "
        "of GPUs that host a replica at the time; GPUs used counts every GPU that hosted one; "
        "replicas is the most any plan of the run placed; requests per GPU-hour divides the "
        "requests served by the hours GPUs hosted replicas (the same work on fewer GPUs).",
        "",
        "| placement | GPUs used | replicas | utilization | requests per GPU-hour | E2E P50 ms "
        "| E2E P99 ms | TTFT P99 ms | SLA attainment | failed | migrations | sim wall s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r['name']} | {r['gpus_used']} | {r['replicas']} | "
            f"{_pct(r['utilization'])} | {r['per_gpu_hour']:,.0f} | "
            f"{r['e2e_p50']:.0f} | {r['e2e_p99']:.0f} | {r['ttft_p99']:.0f} | "
            f"{_pct(r['sla'])} | {r['failed']} | {r['migrations']} | "
            f"{r['bench_wall_s']:.0f} |"
        )
    lines += [
        "",
        "The trade-off, each batch-aware run against the baseline:",
        "",
        "| placement | utilization | E2E P99 | TTFT P99 | both targets |",
        "|---|---:|---:|---:|---|",
    ]
    for r in results[1:]:
        g, e = (
            _change(r["utilization"], base["utilization"]),
            _change(r["e2e_p99"], base["e2e_p99"]),
        )
        t = _change(r["ttft_p99"], base["ttft_p99"])
        lines.append(
            f"| {r['name']} | {g:+.1%} | {e:+.1%} | {t:+.1%} | "
            f"{'yes' if g >= 0.20 and e <= 0.03 else 'no'} |"
        )
    lines += [
        "",
        f"P99 per model, baseline against {aware['name']} (E2E ms / TTFT ms / TPOT ms, "
        f"SLA attainment):",
        "",
        "| model | baseline | batch-aware |",
        "|---|---|---|",
    ]
    for m in sorted(base["per_model"]):
        b, a = base["per_model"][m], aware["per_model"].get(m, {})
        lines.append(
            f"| {m} | {b['e2e_p99']:.0f} / {b['ttft_p99']:.0f} / {b['tpot_p99']:.0f}, "
            f"{_pct(b['sla'])} | {a.get('e2e_p99', 0):.0f} / "
            f"{a.get('ttft_p99', 0):.0f} / {a.get('tpot_p99', 0):.0f}, "
            f"{_pct(a.get('sla', 0))} |"
        )
    lines += [
        "",
        f"## Targets (issue 6), judged on {aware['name']}",
        "",
        *target_table(judge(base, aware)),
        "",
    ]
    meets = [
        r["name"]
        for r in results[1:]
        if TARGETS["utilization"].met(_change(r["utilization"], base["utilization"]))
        and TARGETS["e2e_p99"].met(_change(r["e2e_p99"], base["e2e_p99"]))
    ]
    tpot = [
        _change(aware["per_model"][m]["tpot_p99"], base["per_model"][m]["tpot_p99"])
        for m in base["per_model"]
        if m in aware["per_model"] and base["per_model"][m]["tpot_p99"] > 0
    ]
    e2e = sorted(
        _change(aware["per_model"][m]["e2e_p99"], base["per_model"][m]["e2e_p99"])
        for m in base["per_model"]
        if m in aware["per_model"] and base["per_model"][m]["e2e_p99"] > 0
    )
    lines += [
        "## Notes",
        "",
        "- Runs meeting both targets: " + (", ".join(meets) if meets else "none") + ".",
        f"- The judged figure is the E2E P99 over every request. Per model, the judged "
        f"run's E2E P99 moved between {e2e[0] if e2e else 0:+.1%} and "
        f"{e2e[-1] if e2e else 0:+.1%} (median {e2e[len(e2e) // 2] if e2e else 0:+.1%}); "
        f"its TTFT P99 over every request moved "
        f"{_change(aware['ttft_p99'], base['ttft_p99']):+.1%}.",
        f"- Where the tail goes: a co-located model's steps share its GPU with its "
        f"neighbours' by the profile's co-location shares (capacity.py's model, and the "
        f"simulator's: strata.sim.replica.shared_factor). In the judged run the models' "
        f"TPOT P99 moved by {sum(tpot) / max(1, len(tpot)):+.1%} on average (median "
        f"{sorted(tpot)[len(tpot) // 2] if tpot else 0:+.1%}), while TTFT P99 moved "
        f"{_change(aware['ttft_p99'], base['ttft_p99']):+.1%}.",
        "- Tighter red lines trade the utilization back: the planner co-locates only "
        "where the predicted P99 stays within the factor (and a model needs more replicas "
        "to stay within its own tighter target).",
        "",
    ]
    if other is not None:
        desc, pair = other
        ob, oa = pair[0], pair[1]
        lines += [
            "## The same comparison priced by another profile",
            "",
            f"Baseline and {oa['name']} again, every model priced by {desc}; same "
            f"models, same arrival curves in units of one replica's capacity on that "
            f"profile.",
            "",
            "| placement | GPUs used | utilization | E2E P99 ms | TTFT P99 ms | SLA "
            "attainment | failed |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for r in pair:
            lines.append(
                f"| {r['name']} | {r['gpus_used']} | {_pct(r['utilization'])} | "
                f"{r['e2e_p99']:.0f} | {r['ttft_p99']:.0f} | {_pct(r['sla'])} | "
                f"{r['failed']} |"
            )
        lines += [
            "",
            f"Against the baseline: utilization "
            f"{_change(oa['utilization'], ob['utilization']):+.1%}, E2E P99 "
            f"{_change(oa['e2e_p99'], ob['e2e_p99']):+.1%}.",
            "",
        ]
    if stack:
        lines += [stack.strip(), ""]
    return "\n".join(lines) + "\n"
