"""Text for the real-stack part of the isolation benchmark: how the runs were set up (markdown
lines for docs/benchmarks/isolation.md) and one run's figures as a plain table (the driver)."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from benchmarks.common.tables import ms as _ms

if TYPE_CHECKING:
    from benchmarks.isolation.stack_run import StackComparison, StackRun


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def describe(c: StackComparison) -> list[str]:
    s = c.settings
    by_tenant = Counter(r.tenant for r in c.trace)
    windows = ", ".join(f"{a:.1f}-{b:.1f} s" for a, b in c.bursts.windows(c.duration_s))
    static = c.runs.get("static")
    lines = [
        f"The compose services as processes on this machine (benchmarks/common/stack.py, "
        f"benchmarks/isolation/stack_pool.py), with {s.nodes} node managers, each with its own "
        f"KV tier store and one replica of {s.model} ({s.torch_threads} torch thread, "
        f"{s.max_seqs} batch slots, {s.max_batched_tokens}-token steps, no hot standby); a "
        f"fresh stack and SQLite store for every way. Tenants are created through the gateway's "
        f"Admin API; the trace is replayed open loop (strata.client.replay) as one evaluation "
        f"run, a refused request retried after its retry-after hint until {s.give_up_s:.0f} s "
        f"after its first attempt and counted once, from that attempt. Figures come from the "
        f"gateway's rows in the store and the nodes' samples (every {s.sample_interval_s:g} s) "
        f"over the {c.duration_s:.0f} s of traffic.",
        "",
        f"Trace: {len(c.trace)} requests ("
        + ", ".join(f"{t} {n}" for t, n in sorted(by_tenant.items()))
        + f"), "
        f"{c.rate:g} requests/s outside the bursts, the aggressor at {c.bursts.factor:g}x "
        f"its rate in {windows}; sizes of the Azure conversation trace divided by 2, prompts "
        f"at most 1,024 tokens and answers 256 ({s.model}'s context is 2,048). SLA classes: "
        f"`{c.table.spec()}`.",
        "",
    ]
    if static is not None:
        groups: dict[str, list[str]] = {}
        for tenant, ids in static.partitions.items():
            groups.setdefault(",".join(ids), []).append(tenant)
        lines += [
            "Static partitioning: "
            + "; ".join(f"{' + '.join(ts)} on {nodes}" for nodes, ts in groups.items())
            + ". With two nodes a partition per tenant is impossible; the victims (steady "
            "tenants with an SLA) get the nodes the aggressor never uses, the aggressor and "
            "the best-effort tenants the others, the nodes split between the two groups by "
            "offered work (at least one each).",
            "",
        ]
    lines += [
        "The nodes share this machine's 2 cores with each other and with the gateway, "
        "scheduler, metrics service and the replay client, so a burst served by one node "
        "slows the other too: partitions isolate here less than separate machines would. The "
        "CPU columns say how busy the machine was (cores, during the replay; `other` is work "
        "that was not this benchmark's).",
        "",
        "| way | startup s | replay s | whole way s | CPU stack / client / other | "
        "busy by node | rows from the client |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for way, r in c.runs.items():
        lines.append(
            f"| {way} | {r.startup_s:.0f} | {r.replay_s:.0f} | {r.wall_s:.0f} | "
            f"{r.cpu.watched:.2f} / {r.cpu.own:.2f} / {r.cpu.other:.2f} | "
            + ", ".join(f"{n} {u:.0%}" for n, u in r.utilization_by_node.items())
            + f" | {r.client_only} |"
        )
    return lines


def format_run(run: StackRun) -> str:
    f = run.figures
    lines = [
        f"way {run.way}: {run.requests} requests ({run.not_sent} not sent, "
        f"{run.client_only} rows from the client), run {run.run_id}",
        f"  time: startup {run.startup_s:.1f} s, replay {run.replay_s:.1f} s, "
        f"whole way {run.wall_s:.1f} s",
        f"  cpu during the replay (cores): stack {run.cpu.watched:.2f}, client "
        f"{run.cpu.own:.2f}, other work {run.cpu.other:.2f}",
        f"  utilization {_x(f.utilization)} ("
        + ", ".join(f"{n} {u:.2f}" for n, u in run.utilization_by_node.items())
        + ")",
        f"  jain {_x(f.jain)}; worst SLA tenant P99 TTFT {_ms(f.worst_ttft_p99_ms)} ms, "
        f"E2E {_ms(f.worst_e2e_p99_ms)} ms; victims' P99 inflation in bursts TTFT "
        f"{_x(f.victim_ttft_inflation)}, E2E {_x(f.victim_e2e_inflation)}",
    ]
    if run.refusals:
        lines.append(
            "  refused attempts by reason: "
            + ", ".join(f"{t}/{why} {n}" for (t, why), n in run.refusals.items())
        )
    if run.partitions:
        lines.append(
            "  partitions: " + "; ".join(f"{t}={','.join(n)}" for t, n in run.partitions.items())
        )
    refused = Counter()
    for (tenant, _), n in run.refusals.items():
        refused[tenant] += n
    lines.append(
        f"  {'tenant':8} {'class':12} {'reqs':>5} {'refused':>8} {'gave up':>7} "
        f"{'failed':>6} {'TTFT p50':>9} {'TTFT p99':>9} {'E2E p50':>8} {'E2E p99':>8} "
        f"{'attain':>6} {'served':>6} {'infl TTFT':>9} {'infl E2E':>8}"
    )
    for t in f.tenants:
        lines.append(
            f"  {t.tenant:8} {t.sla_class:12} {t.requests:5d} {refused[t.tenant]:8d} "
            f"{t.refused:7d} {t.failed:6d} {_ms(t.ttft_p50_ms):>9} {_ms(t.ttft_p99_ms):>9} "
            f"{_ms(t.e2e_p50_ms):>8} {_ms(t.e2e_p99_ms):>8} {t.attainment:6.2f} "
            f"{t.served_fraction:6.2f} {_x(t.ttft_inflation):>9} {_x(t.e2e_inflation):>8}"
        )
    return "\n".join(lines)
