"""docs/benchmarks/overload.md (and .json) from one run: the real-stack curves of both modes
side by side with the goodput plot, the simulator's per-tenant tables against the static
partition of guaranteed shares, and the targets judged on Strata's two-level mode."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import asdict

from benchmarks.common.machine import host_line
from benchmarks.common.tables import ms, pct, table
from benchmarks.common.targets import Target, Verdict, target_table
from benchmarks.overload.sim_part import INFLATION_MAX, TENANTS, SimOverload
from strata.eval.isolation import TenantIsolation

JUDGED_CLASSES = ("standard", "interactive")
TARGETS = {
    "attainment": Target("SLA attainment of admitted requests", ">=", 0.90, "{:.0%}"),
    # No collapse: at each load, goodput within 90% of the best the curve reached, or of what
    # was offered where that is less (below capacity the whole offer can be met), leaving out
    # the requests that missed their targets even alone on the idle stack (benchmarks.overload.
    # alone): no load or policy can meet those.
    "goodput": Target("goodput vs min(best on the curve, attainable offer)", ">=", 0.90, "{:.0%}"),
    "ttft": Target("P99 TTFT vs static partition", "<=", 1.0, "{:.2f}x"),
    "e2e": Target("P99 E2E vs static partition", "<=", 1.0, "{:.2f}x"),
    "attain_vs_static": Target("SLA attainment vs static partition", ">=", 0.0, "{:+.1%}"),
    "served_vs_static": Target("served tokens vs static partition", ">=", 0.0, "{:+.1%}"),
    "inflation": Target("victims' P99 inflation in bursts", "<=", INFLATION_MAX, "{:g}x"),
}


def _stats(point: dict) -> dict:
    return point["stats"]


def attainable_rps(point: dict) -> float:
    """The point's offer without the requests that missed their targets even alone (its
    `alone` measurement; the whole offer without one)."""
    a = _stats(point)["all"]
    unattainable = point.get("alone", {}).get("unattainable", 0.0)
    return max(0.0, a["sent"] - unattainable) / point["window_s"]


def stack_verdicts(model_run: dict, max_multiple: float = 3.0) -> list[Verdict]:
    """Every two-level point offered at most `max_multiple` x capacity: attainment of the
    admitted requests per judged class, and goodput against the best point of the curve."""
    two = model_run["modes"].get("two-level")
    if two is None:
        return []
    capacity = model_run["capacity_rps"]
    points = [p for p in two["points"] if p["rate"] <= max_multiple * capacity * 1.0001]
    best = max((_stats(p)["all"]["goodput_rps"] for p in two["points"]), default=0.0)
    out = []
    for p in points:
        m = p["rate"] / capacity if capacity else 0.0
        for c in JUDGED_CLASSES:
            cs = _stats(p)["by_class"].get(c)
            if cs is None or not cs["admitted"]:
                continue
            out.append(
                TARGETS["attainment"].judge(
                    cs["attainment"],
                    f"{cs['attainment']:.1%} of {cs['admitted']}",
                    name=f"{model_run['model']} {m:.1f}x: {c} attainment of admitted",
                )
            )
        g = _stats(p)["all"]["goodput_rps"]
        offered = attainable_rps(p)
        bar = min(best, offered)
        out.append(
            TARGETS["goodput"].judge(
                g / bar if bar else None,
                f"{g:.2f} of {bar:.2f} req/s" if bar else None,
                name=f"{model_run['model']} {m:.1f}x: goodput vs min(best, attainable offer)",
            )
        )
    return out


def sim_verdicts(sim: SimOverload) -> list[Verdict]:
    """Per seed, per tenant against the static partition (module docstring of sim_part)."""
    out = []
    aggressor = next(t.name for t in TENANTS if t.aggressor)
    for seed, ways in sim.runs.items():
        static, ours = ways["static"][0].figures, ways["two-level"][0].figures
        for spec in TENANTS:
            if sim.table.lookup(spec.sla_class).best_effort:
                continue
            s, o = static.tenant(spec.name), ours.tenant(spec.name)
            label = f"seed {seed} {spec.name}"
            if spec.name == aggressor:
                out.append(
                    TARGETS["attain_vs_static"].judge(
                        o.attainment - s.attainment,
                        f"{o.attainment:.1%} vs {s.attainment:.1%}",
                        name=f"{label} (bursting): SLA attainment vs static",
                    )
                )
                out.append(
                    TARGETS["served_vs_static"].judge(
                        o.served_fraction - s.served_fraction,
                        f"{o.served_fraction:.1%} vs {s.served_fraction:.1%} of offered",
                        name=f"{label} (bursting): served tokens vs static",
                    )
                )
                continue
            for key, attr in (("ttft", "ttft_p99_ms"), ("e2e", "e2e_p99_ms")):
                a, b = getattr(o, attr), getattr(s, attr)
                out.append(
                    TARGETS[key].judge(
                        a / b if a is not None and b else None,
                        f"{ms(a)} vs {ms(b)} ms",
                        name=f"{label}: P99 {key.upper()} vs static",
                    )
                )
            out.append(
                TARGETS["attain_vs_static"].judge(
                    o.attainment - s.attainment,
                    f"{o.attainment:.1%} vs {s.attainment:.1%}",
                    name=f"{label}: SLA attainment vs static",
                )
            )
        for metric, value in (
            ("TTFT", ours.victim_ttft_inflation),
            ("E2E", ours.victim_e2e_inflation),
        ):
            out.append(
                TARGETS["inflation"].judge(
                    value, name=f"seed {seed}: victims' P99 {metric} inflation in bursts"
                )
            )
    return out


def _lat(c: dict, key: str) -> str:
    lat = c[key]
    return f"{ms(lat['p50'])} / {ms(lat['p95'])} / {ms(lat['p99'])}"


def _point_rows(model_run: dict) -> list[list[object]]:
    rows = []
    capacity = model_run["capacity_rps"]
    for mode, run in model_run["modes"].items():
        for p in run["points"]:
            a = _stats(p)["all"]
            by = _stats(p)["by_class"]
            rows.append(
                [
                    mode,
                    f"{p['rate'] / capacity:.1f}x" if capacity else "-",
                    f"{a['offered_rps']:.2f}",
                    a["sent"],
                    a["admitted"],
                    a["refused"],
                    ", ".join(f"{k} {v}" for k, v in _stats(p)["refusals"].items()) or "-",
                    _alone_cell(p),
                    f"{attainable_rps(p):.2f}",
                    a["failed"],
                    _lat(a, "ttft"),
                    _lat(a, "tpot"),
                    _lat(a, "e2e"),
                    pct(a["attainment"]),
                    " / ".join(
                        pct(by[c]["attainment"]) if c in by else "-" for c in JUDGED_CLASSES
                    ),
                    f"{a['goodput_rps']:.2f}",
                ]
            )
    return rows


def _alone_cell(point: dict) -> str:
    alone = point.get("alone")
    if not alone or not alone["probed"]:
        return "-"
    return f"{alone['missed']} of {alone['probed']}"


def goodput_chart(model_run: dict) -> list[str]:
    """A mermaid line chart of goodput against offered load, one line per mode."""
    modes = list(model_run["modes"])
    first = model_run["modes"][modes[0]]["points"]
    xs = [f'"{_stats(p)["all"]["offered_rps"]:.2f}"' for p in first]
    top = max(
        (_stats(p)["all"]["goodput_rps"] for r in model_run["modes"].values() for p in r["points"]),
        default=1.0,
    )
    lines = [
        "```mermaid",
        "xychart-beta",
        f'    title "{model_run["model"]}: goodput vs offered load ({" then ".join(modes)})"',
        f'    x-axis "offered requests/s" [{", ".join(xs)}]',
        f'    y-axis "goodput requests/s" 0 --> {max(0.1, top * 1.1):.2f}',
    ]
    for mode in modes:
        ys = [f"{_stats(p)['all']['goodput_rps']:.3f}" for p in model_run["modes"][mode]["points"]]
        lines.append(f"    line [{', '.join(ys)}]")
    lines.append("```")
    return lines


def _tenant_rows(name: str, f: TenantIsolation) -> list[object]:
    return [
        name,
        f.tenant,
        f.sla_class,
        f.requests,
        f.refused,
        ms(f.ttft_p50_ms),
        ms(f.ttft_p99_ms),
        ms(f.e2e_p50_ms),
        ms(f.e2e_p99_ms),
        pct(f.attainment),
        pct(f.served_fraction),
        "-" if f.ttft_inflation is None else f"{f.ttft_inflation:.2f}x",
        "-" if f.e2e_inflation is None else f"{f.e2e_inflation:.2f}x",
    ]


def render(
    command: str,
    stack: Sequence[dict],
    sim: SimOverload | None,
    settings: dict,
) -> tuple[str, dict]:
    verdicts: list[Verdict] = []
    for run in stack:
        verdicts += stack_verdicts(run)
    if sim is not None:
        verdicts += sim_verdicts(sim)
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Overload: SLAs that hold past capacity",
        "",
        f"Command: `{command}` ({now}; {host_line()}).",
        "",
        "Strata's two-level mode (admission that prices the whole SLA: the TTFT check with the "
        "engine-slot wait by measured slot turnover, the TPOT check of the running decodes "
        "with the worker's online step line, SLO-sized prefill chunks) against FCFS without "
        "admission (`STRATA_SCHEDULER_MODE=fcfs`, `STRATA_NODE_QUEUE=fcfs`), in the same run. "
        "Attainment and goodput count a request as met when it completed within every "
        "target of its class; a refusal is final (no retry), and an admitted request that "
        "failed (the client's deadline included) does not attain.",
        "",
        "## Targets",
        "",
        *target_table(verdicts),
        "",
    ]
    for run in stack:
        model = run["model"]
        lines += [f"## Real stack: {model}", ""]
        lines.append(
            f"The stack as `make run` starts it, serving {model}; the Azure conversation trace "
            f"(2023), lengths / 8, offered at {', '.join(f'{m:g}x' for m in run['multiples'])} "
            f"the capacity measured closed loop on the {run['capacity_mode']} stack "
            f"({run['capacity_rps']:.2f} requests/s), arrivals scaled so each point offers its "
            f"rate over its window (the trace's own burstiness kept). Capacity of each stack: "
            + ", ".join(
                f"{mode} {r['capacity']['rps']:.2f} req/s" for mode, r in run["modes"].items()
            )
            + ". Latencies in ms, P50 / P95 / P99 of the admitted requests that completed. "
            "*Infeasible: missed alone*: of the requests refused as infeasible (a sample of at "
            "most 40 a point), how many missed their class's targets when sent again alone, "
            "one at a time, on the idle stack after the sweep (at most 8 answer tokens each, "
            "through a best-effort tenant of the top priority: no check refuses it, no step cap "
            "holds it back); "
            "*attainable*: the offer without those (extrapolated from the sample), which the "
            "goodput target is judged against."
        )
        lines += ["", *goodput_chart(run), ""]
        lines += table(
            (
                "mode",
                "load",
                "offered req/s",
                "sent",
                "admitted",
                "refused",
                "why refused",
                "infeasible: missed alone",
                "attainable req/s",
                "failed",
                "TTFT",
                "TPOT",
                "E2E",
                "attainment",
                "standard / interactive",
                "goodput req/s",
            ),
            _point_rows(run),
            "llrrrrlrrrrrrrrr",
        )
        lines.append("")
    if sim is not None:
        s = sim.settings
        lines += [
            f"## Simulator: {s.gpus} GPUs, one tenant bursting to 10x",
            "",
            f"{sim.requests} requests over {s.duration_s:.0f} s ("
            + ", ".join(f"{k} {v}" for k, v in sorted(sim.per_tenant_requests.items()))
            + f"), {s.rate:g} requests/s outside the bursts; the aggressor runs at 10x its rate "
            "for 30 s in every 120 s. Tenants: "
            + "; ".join(
                f"`{t.name}` {t.sla_class}, {t.share:.0%} of the steady load, guaranteed "
                f"{t.guaranteed_share:.0%}, burst {t.burst_share:.0%}"
                for t in TENANTS
            )
            + ". Static = each tenant alone on its guaranteed share of the GPUs ("
            + ", ".join(f"{k} {len(v)}" for k, v in sim.partitions.items())
            + "). A refused client retries after the refusal's hint for as long as the run "
            "lasts: as patient as a static tenant's client, whose request waits in its "
            "partition's queue however long it takes (a prompt too long for its class even "
            "alone is refused for good). Engine costs, classes and sizes as in "
            "docs/benchmarks/isolation.md.",
            "",
        ]
        for seed, ways in sim.runs.items():
            lines += [f"Seed {seed}:", ""]
            rows = [
                _tenant_rows(way, t) for way, (run, _) in ways.items() for t in run.figures.tenants
            ]
            lines += table(
                (
                    "way",
                    "tenant",
                    "class",
                    "requests",
                    "refused",
                    "TTFT P50",
                    "TTFT P99",
                    "E2E P50",
                    "E2E P99",
                    "attainment",
                    "served",
                    "TTFT inflation",
                    "E2E inflation",
                ),
                rows,
                "lllrrrrrrrrrr",
            )
            lines.append("")
    data = {
        "command": command,
        "settings": settings,
        "stack": list(stack),
        "sim": None
        if sim is None
        else {
            "settings": asdict(sim.settings),
            "partitions": {k: len(v) for k, v in sim.partitions.items()},
            "runs": {
                str(seed): {
                    way: {"wall_s": wall, "tenants": [asdict(t) for t in r.figures.tenants]}
                    for way, (r, wall) in ways.items()
                }
                for seed, ways in sim.runs.items()
            },
        },
        "targets": {"verdicts": [asdict(v) for v in verdicts]},
    }
    return "\n".join(lines) + "\n", data
