"""The real-stack section of docs/benchmarks/placement.md: how the comparison was set up and each
way's figures, side by side."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import TYPE_CHECKING

from benchmarks.common.tables import ms as _ms
from benchmarks.common.tables import pct as _pct
from benchmarks.placement.stack_ways import BASELINE_SHARE, memory_overrides
from benchmarks.placement.stack_workload import ROLES

if TYPE_CHECKING:
    from benchmarks.placement.stack import StackComparison
    from benchmarks.placement.stack_run import StackRun
    from benchmarks.placement.stack_workload import ModelRate


def _mb(b: int) -> str:
    return f"{b / 1e6:,.0f} MB"


def _placement(p: dict[str, list[str]]) -> str:
    return "; ".join(f"{n}: {' + '.join(ms)}" for n, ms in p.items()) or "none"


def _shape(r: ModelRate) -> str:
    role = r.role
    parts = []
    if role.amplitude:
        parts.append(f"diurnal, amplitude {role.amplitude:g}, phase {role.phase:g} period")
    else:
        parts.append("steady")
    if role.burst:
        b = role.burst
        start = b.start * r.period_s
        parts.append(f"{b.factor:g}x for {b.length_s:g} s from {start:g} s into the period")
    return "; ".join(parts)


def _shapes(roles) -> list:
    """The roles without their prompt lengths, which the comparison fits."""
    return [replace(r, prompt_tokens=1) for r in roles]


def _setup(c: StackComparison) -> list[str]:
    s = c.settings
    models = [r.role.model for r in c.traces.rates]
    ffd = memory_overrides("ffd", models, s)
    aware = memory_overrides("batch-aware", models, s)
    count = Counter(q.model for q in c.traces.evaluation)
    history = Counter(q.model for q in c.traces.history)
    reused = all(v == 0 for v in c.profiled_s.values())
    lines = [
        f"The compose services as processes on this machine (benchmarks/common/stack.py, "
        f'benchmarks/isolation/stack_pool.py) with {s.nodes} node managers as the "GPUs" '
        f"({s.node_memory_bytes / 2**30:g} GiB each, each with its own KV tier store; every "
        f"worker one torch thread, a {s.kv_cache_bytes >> 20} MiB KV pool, no hot standby) and "
        f"the placement planner replanning every {s.replan_interval_s:g} s over arrival curves "
        f'of {s.windows} windows of {s.window_s:g} s (a "day" of {s.period_s:g} s). Both ways '
        f"run on a fresh stack and SQLite store, with the same history in it and the same "
        f"evaluation trace replayed open loop (strata.client.replay, one run per model started "
        f"together: the replay client sends one model per run). One tenant, class "
        f"`{c.sla.name}` (P99 TTFT {c.sla.ttft_ms:g} ms, TPOT {c.sla.tpot_ms:g} ms): the "
        f"planner's red line and the SLA judged here. The scheduler's SLA admission is off "
        f"(STRATA_SLA_ADMISSION=0): refusing requests predicted to miss their target is "
        f"admission, not placement, and would count as failures neither placement caused.",
        "",
        f"- **ffd**: the planner's first-fit-decreasing (STRATA_PLACEMENT_POLICY=ffd) with each "
        f"replica taking {BASELINE_SHARE:.0%} of a node's memory as vLLM reserves by default "
        f"(STRATA_MODEL_MEMORY_BYTES {_mb(next(iter(ffd.values())))} each): one replica per "
        f"node, blind to when models are busy.",
        "- **batch-aware**: the planner's batch-aware policy with replicas taking their fp32 "
        "weights plus the KV pool ("
        + ", ".join(f"{m} {_mb(b)}" for m, b in aware.items())
        + "), priced by engine profiles of each model on this machine (`strata profile "
        "--quick`, one thread; "
        + ("reused from " if reused else "measured into ")
        + f"{c.profiles_dir}).",
        "",
        "| model | prompt / answer tokens | prefill ms | one replica sustains | mean rate | "
        "peak rate | shape | evaluation requests | history requests |",
        "|---|---|---:|---:|---:|---:|---|---:|---:|",
    ]
    for r in c.traces.rates:
        cost = c.costs[r.role.model]
        lines.append(
            f"| {r.role.model} | {r.role.prompt_tokens} / {r.role.output_tokens} | "
            f"{cost.prefill_ms:.0f} | {cost.capacity:.2f} req/s | {r.mean_rate:.2f} req/s | "
            f"{r.peak_rate:.2f} req/s | {_shape(r)} | {count[r.role.model]} | "
            f"{history[r.role.model]} |"
        )
    lines += [
        "",
        "Rates are set in units of one replica's capacity by the planner's own capacity model "
        "(the most requests/s a replica alone serves within the class's P99 targets), as in "
        "the simulated benchmark."
        + (
            f" The two diurnal models are in antiphase: together they ask for "
            f"{ROLES[0].mean_load + ROLES[1].mean_load:g} of a replica at every moment, so they "
            f"fit one node; the steady one asks for {ROLES[2].mean_load:g} all day and more in "
            f"its burst, which fits beside neither partner at its peak."
            if _shapes(c.roles) == _shapes(ROLES)
            else ""
        )
        + f" Prompt lengths are fitted so that one replica sustains {c.capacity:g} req/s by "
        f"that model on these profiles (stack_profiles.fit_prompt): under a TTFT target a "
        f"replica's capacity falls steeply with its prefill time, and two profiles of one "
        f"machine, one taken while other work ran, can price the same prompt 3x apart; "
        f"fitting keeps the rates, the machine's load and each window's request count the "
        f"same from run to run.",
        "",
        f"History: the planner learns its curves from request rows in the collector's store. "
        f"Replaying a period of history before the measured one would double each way's "
        f"length on a machine where the comparison must fit in minutes, so the history trace "
        f"({c.traces.history_s:g} s, same curves, other draws) is written as rows of a stored "
        f"run (arrivals and token counts, no latencies) before the planner starts, ending "
        f"where the evaluation replay starts {s.lead_s:g} s later; the planner's last "
        f"{s.windows} windows then always hold a whole day, first of history and then more "
        f"and more of the evaluation.",
        "",
        "The node managers share this machine's 2 cores with each other, with the gateway, "
        "scheduler, metrics service and planner, and with the replay client: a node's "
        "utilization is the time its engines spent stepping, stretched when another process "
        "holds the core, and latencies include the wait for a core. Both figures are "
        "indicative of how the placements compare, not of a GPU's numbers. The CPU column says "
        "how busy the machine was during the replay (cores: the stack, the client, other "
        "work).",
        "",
    ]
    return lines


def _summary(c: StackComparison) -> list[str]:
    lines = [
        "| way | placement during the evaluation | nodes used | utilization (nodes used) | "
        "by node | SLA attainment | E2E P99 ms | migrations (loads + unloads) | failed | "
        "CPU stack / client / other | startup / replay / way s |",
        "|---|---|---:|---:|---|---:|---:|---:|---:|---|---|",
    ]
    for run in c.runs.values():
        f = run.figures
        placed = _placement(f.at_start)
        if f.at_end != f.at_start:
            placed += f" -> {_placement(f.at_end)}"
        lines.append(
            f"| {run.way} | {placed} | {len(f.nodes_used)} | {_pct(f.utilization)} | "
            + ", ".join(f"{n} {_pct(u)}" for n, u in f.utilization_by_node.items())
            + f" | {_pct(f.sla)} | {_ms(f.e2e_p99_ms)} | {f.migrations} ({f.loads} + "
            f"{f.unloads}) | {f.failed} of {f.requests} | {run.cpu.watched:.2f} / "
            f"{run.cpu.own:.2f} / {run.cpu.other:.2f} | {run.startup_s:.0f} / "
            f"{run.replay_s:.0f} / {run.wall_s:.0f} |"
        )
    return lines


def _per_model(run: StackRun) -> list[str]:
    lines = [
        f"**{run.way}** (plan v{run.plan_version}, policy {run.plan_policy or '?'}):",
        "",
        "| model | requests | failed | TTFT P50 / P99 ms | TPOT P99 ms | E2E P99 ms | "
        "SLA attainment |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for m in run.figures.models:
        lines.append(
            f"| {m.model} | {m.requests} | {m.failed} | {_ms(m.ttft_p50_ms)} / "
            f"{_ms(m.ttft_p99_ms)} | {_ms(m.tpot_p99_ms)} | {_ms(m.e2e_p99_ms)} | "
            f"{_pct(m.sla)} |"
        )
    notes = []
    if run.client_only:
        notes.append(f"{run.client_only} row(s) from the client's record (span not stored)")
    if run.not_sent:
        notes.append(f"{run.not_sent} request(s) not sent")
    if run.late_s > 0.5:
        notes.append(
            f"the replay began {run.late_s:.1f} s after the history's end (the stack "
            f"was not serving every model yet), a gap the curves see as no traffic"
        )
    if run.watch_misses:
        notes.append(f"{run.watch_misses} replica listing(s) unanswered")
    return lines + ([""] + ["Note: " + "; ".join(notes) + "."] if notes else [])


def _verdict(c: StackComparison) -> list[str]:
    base, aware = c.runs.get("ffd"), c.runs.get("batch-aware")
    if base is None or aware is None:
        return []
    b, a = base.figures, aware.figures
    lines = [
        f"Batch-aware used {len(a.nodes_used)} node(s) where first-fit-decreasing used "
        f"{len(b.nodes_used)}; utilization of the nodes used {_pct(a.utilization)} vs "
        f"{_pct(b.utilization)}"
    ]
    if b.utilization:
        lines[0] += f" ({a.utilization / b.utilization - 1:+.0%})"
    if a.e2e_p99_ms and b.e2e_p99_ms:
        lines[0] += (
            f"; E2E P99 {_ms(a.e2e_p99_ms)} vs {_ms(b.e2e_p99_ms)} ms "
            f"({a.e2e_p99_ms / b.e2e_p99_ms - 1:+.0%})"
        )
    lines[0] += (
        f"; SLA attainment {_pct(a.sla)} vs {_pct(b.sla)}; migrations {a.migrations} "
        f"vs {b.migrations}; failed requests {a.failed} vs {b.failed}."
    )
    return lines


def describe(c: StackComparison) -> str:
    lines = [f"## Real stack (this machine, seed {c.seed}, {c.wall_s / 60:.1f} min)", ""]
    lines += _setup(c) + _summary(c) + [""]
    for run in c.runs.values():
        lines += _per_model(run) + [""]
    lines += _verdict(c)
    return "\n".join(lines).rstrip() + "\n"
