"""One isolation run on the real stack: the multi-tenant trace through the compose services as
processes, on a pool of two node managers that each serve one replica of the model, scheduled
one of three ways:

    static      STRATA_SCHEDULER_MODE=static, node queues fcfs: the tenants split in two groups,
                the steady tenants with an SLA on node-0, the aggressor and the best-effort
                tenants on node-1 (static_partitions: the operator's obvious partition, the
                victims never share a node with the bursts; the nodes split between the groups
                in proportion to offered work, at least one each, which with two nodes is one
                each)
    fcfs        STRATA_SCHEDULER_MODE=fcfs, node queues fcfs: the pool shared first come first
                served
    two-level   STRATA_SCHEDULER_MODE=two-level, node queues wfq: quotas, priorities, the fair
                queue

Every way gets a fresh stack (data dir, SQLite store, SLA table set to the caller's table through
STRATA_SLA_CLASSES on the gateway and the metrics service). The tenants are created through the
gateway's Admin API with their classes, weights and shares, one API key each; the trace is
replayed open loop (strata.eval.replay) as one evaluation run, a refused request retried after its
retry-after hint until give_up_s after its first attempt. The figures come from the run's rows in
the store (strata.eval.isolation.isolation_figures; stack_rows.merge_rows counts a retried
request once, from its first attempt) and the nodes' samples over the trace's span.

    python -m benchmarks.isolation.stack_run --way two-level [--duration 120] [--rate 10]
        [--max-seqs 8] [--burst-factor 5 --burst-every 60 --burst-len 15] [--seed 0]

Hot standby workers are off (STRATA_NODE_STANDBY=0): they take no part in scheduling, and two
more engine processes would only take memory and CPU from a 2-core machine.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from strata import defaults
from strata.eval.isolation import IsolationFigures, isolation_figures
from strata.eval.replay import ReplayConfig, RetryPolicy, replay
from strata.eval.sla import DEFAULT_CLASSES, SlaTable
from strata.eval.traces import TraceRequest
from strata.eval.workload import (PromptSynth, Scaling, TenantKey, TenantMapper, Window,
                                  WorkloadRequest, build_workload, text_for_model)
from strata.rpc.server import CHANNEL_OPTIONS
from strata.rpc.v1 import admin_pb2, admin_pb2_grpc

from benchmarks.isolation.stack_cpu import CpuMeter, CpuShare
from benchmarks.isolation.stack_pool import PoolStack, node_ids
from benchmarks.isolation.stack_rows import merge_rows
from benchmarks.isolation.stack_store import read_run
from benchmarks.isolation.workload import Bursts, TenantSpec, isolation_trace, trace_sizes

WAYS = ("static", "fcfs", "two-level")


@dataclass(slots=True, frozen=True)
class PoolSettings:
    """The pool every way runs on; the node settings are compose's unless named here."""

    model: str = "dummy-tiny"
    nodes: int = 2
    # Each worker's batch slots. Compose's 32 never fill at this size (dummy-tiny's steps are
    # short, a few requests run at once), so no request would wait in a node's queue and the
    # queue policy (wfq or fcfs) would decide nothing; with 8 the bursts queue at the nodes.
    max_seqs: int = 8
    max_batched_tokens: int = 2048
    torch_threads: int = 1
    sample_interval_s: float = 2.0
    give_up_s: float = 30.0        # a refused request's client retries this long
    prompt_seed: int = 0


@dataclass(slots=True)
class StackRun:
    way: str
    figures: IsolationFigures
    refusals: dict[str, int]          # refused attempts per tenant, retried ones included
    # (tenant, reason) -> refused attempts the store saw: the scheduler's burst | pool_full |
    # sla | partition, or node; the gateway's rate limit leaves no row (refusals has those too)
    refusal_reasons: dict[tuple[str, str], int]
    partitions: dict[str, list[str]]  # static: tenant -> its nodes; otherwise empty
    requests: int
    not_sent: int
    client_only: int                  # rows from the client's record alone (stack_rows)
    run_id: int
    startup_s: float                  # stack start until every node serves the model
    replay_s: float                   # first request until the last answer
    wall_s: float                     # the way as a whole, stack start to stop
    cpu: CpuShare                     # cores used during the replay: stack, client, other
    utilization_by_node: dict[str, float] = field(default_factory=dict)


def static_partitions(tenants: Sequence[TenantSpec], trace: Sequence[TraceRequest],
                      table: SlaTable, nodes: Sequence[str]) -> dict[str, list[str]]:
    """The steady tenants with an SLA on the first nodes, the aggressor and the best-effort
    tenants on the rest; nodes split by the groups' offered work (prompt + output tokens,
    bursts included), at least one each."""
    if len(nodes) < 2:
        raise ValueError(f"static partitioning needs at least 2 nodes, got {len(nodes)}")
    protected = [t.name for t in tenants
                 if not t.aggressor and not table.lookup(t.sla_class).best_effort]
    rest = [t.name for t in tenants if t.name not in protected]
    if not protected or not rest:
        raise ValueError("static partitioning here needs steady tenants with an SLA and an "
                         "aggressor or a best-effort tenant")
    work: dict[str, int] = defaultdict(int)
    for r in trace:
        work[r.tenant] += r.prompt_tokens + r.output_tokens
    total = sum(work.values()) or 1
    first = round(len(nodes) * sum(work[n] for n in protected) / total)
    first = min(len(nodes) - 1, max(1, first))
    return {**{n: list(nodes[:first]) for n in protected},
            **{n: list(nodes[first:]) for n in rest}}


def way_overrides(way: str, settings: PoolSettings, table: SlaTable,
                  partitions: dict[str, list[str]]) -> dict[str, dict[str, str]]:
    if way not in WAYS:
        raise ValueError(f"way must be one of {', '.join(WAYS)}, got {way!r}")
    spec = ";".join(f"{t}={','.join(ids)}" for t, ids in partitions.items())
    classes = table.spec()
    return {
        "scheduler": {"STRATA_SCHEDULER_MODE": way,
                      "STRATA_SCHEDULER_PARTITIONS": spec if way == "static" else ""},
        "node": {"STRATA_NODE_QUEUE": "wfq" if way == "two-level" else "fcfs",
                 "STRATA_NODE_STANDBY": "0",
                 "STRATA_TORCH_THREADS": str(settings.torch_threads),
                 "STRATA_MAX_SEQS": str(settings.max_seqs),
                 "STRATA_MAX_BATCHED_TOKENS": str(settings.max_batched_tokens),
                 "STRATA_SAMPLE_INTERVAL_S": str(settings.sample_interval_s)},
        # dummy-tiny's blocks are small: 64 MiB of host tier instead of compose's 1 GiB each
        "kvstore": {"STRATA_KVSTORE_HOST_BYTES": str(64 << 20),
                    "STRATA_KVSTORE_SLAB_BYTES": str(4 << 20)},
        # one replica per node; replans every few seconds only place them (one per node at most)
        "placement": {"STRATA_MODELS": settings.model, "STRATA_REPLICAS": str(settings.nodes),
                      "STRATA_REPLAN_INTERVAL_S": "2.0"},
        "gateway": {"STRATA_SLA_CLASSES": classes},
        "metrics": {"STRATA_SLA_CLASSES": classes},
    }


async def create_tenants(gateway: str, admin_key: str, tenants: Sequence[TenantSpec]
                         ) -> dict[str, str]:
    """Each tenant through the Admin API with its class and shares; tenant -> its API key."""
    keys = {}
    metadata = (("authorization", f"Bearer {admin_key}"),)
    async with grpc.aio.insecure_channel(gateway, options=CHANNEL_OPTIONS) as ch:
        admin = admin_pb2_grpc.AdminStub(ch)
        for t in tenants:
            reply = await admin.CreateTenant(admin_pb2.CreateTenantRequest(
                tenant=admin_pb2.TenantRecord(
                    name=t.name, sla_class=t.sla_class, weight=t.weight,
                    guaranteed_share=t.guaranteed_share, burst_share=t.burst_share),
                issue_key=True), metadata=metadata, timeout=10)
            keys[t.name] = reply.api_key
    return keys


def workload_for(trace: Sequence[TraceRequest], keys: dict[str, str], model: str, seed: int
                 ) -> list[WorkloadRequest]:
    """The trace as text, sizes as they are (the caller scaled them), each tenant's key."""
    scaling = Scaling(max_prompt=1 << 30, max_output=1 << 30)
    mapper = TenantMapper([TenantKey(name, key) for name, key in keys.items()])
    return build_workload(trace, scaling, Window(), mapper,
                          PromptSynth(text_for_model(model), scaling.block_tokens, seed))


def run_stack(way: str, trace: list[TraceRequest], tenants: Sequence[TenantSpec],
              table: SlaTable, windows: list[tuple[float, float]], duration_s: float,
              workdir: Path, settings: PoolSettings = PoolSettings(),
              progress: bool = True) -> StackRun:
    """`trace` on a fresh stack scheduled `way`; `windows` are the aggressor's bursts and
    `duration_s` the trace's span, both in seconds from the trace's start."""
    started = time.perf_counter()
    data_dir = Path(workdir) / way
    if data_dir.exists():
        shutil.rmtree(data_dir)
    data_dir.mkdir(parents=True)
    nodes = node_ids(settings.nodes)
    partitions = static_partitions(tenants, trace, table, nodes) if way == "static" else {}
    db_url = f"sqlite+aiosqlite:///{data_dir}/strata.db"
    stack = PoolStack(data_dir=data_dir, db_url=db_url, nodes=settings.nodes,
                      overrides=way_overrides(way, settings, table, partitions))
    try:
        stack.start()
        stack.wait_replicas(settings.model)
        startup_s = time.perf_counter() - started
        admin_key = (data_dir / defaults.ADMIN_KEY_FILE).read_text().strip()
        keys = asyncio.run(create_tenants(stack.addr("gateway"), admin_key, tenants))
        workload = workload_for(trace, keys, settings.model, settings.prompt_seed)
        config = ReplayConfig(
            model=settings.model, gateway=stack.addr("gateway"), metrics=stack.addr("metrics"),
            out_dir=str(data_dir / "replays"), name=f"isolation-{way}",
            params={"benchmark": "isolation", "way": way, "duration_s": duration_s,
                    "tenants": [t.name for t in tenants], "partitions": partitions},
            retry=RetryPolicy(settings.give_up_s))
        meter = CpuMeter(p.proc.pid for p in stack.processes.values())
        result = asyncio.run(replay(workload, config,
                                    progress_stream=sys.stderr if progress else None))
        cpu = meter.stop()
        origin = result.summary_json["started_unix_ms"]
        served = {r.request_id for r in result.records if r.ok and r.request_id}
        stored = asyncio.run(read_run(
            db_url, result.run_id, served, (origin, origin + round(duration_s * 1000))))
    except BaseException:
        print(stack.logs(), file=sys.stderr)
        raise
    finally:
        stack.stop()
    merged = merge_rows(result.records, result.attempts, stored.rows, origin, settings.model)
    offered: dict[str, int] = defaultdict(int)
    for r in trace:
        offered[r.tenant] += r.output_tokens
    figures = isolation_figures(
        merged.rows, stored.samples, {t.name: t.sla_class for t in tenants}, offered, table,
        next(t.name for t in tenants if t.aggressor),
        [(origin + a * 1000, origin + b * 1000) for a, b in windows],
        (origin, origin + duration_s * 1000))
    by_node: dict[str, list[float]] = defaultdict(list)
    for s in stored.samples:
        by_node[s.node_id].append(s.utilization)
    return StackRun(
        way, figures, merged.refused_attempts, stored.refusal_reasons, partitions,
        len(result.records), result.not_sent, merged.client_only, result.run_id, startup_s,
        result.summary.duration_s, time.perf_counter() - started, cpu,
        {n: sum(v) / len(v) for n, v in sorted(by_node.items())})


# -- the driver ---------------------------------------------------------------------------------

# A default cast for the driver (the benchmark passes its own): two steady tenants with an SLA,
# an aggressor of the standard class that bursts, and a best-effort batch tenant.
DEFAULT_TENANTS = (
    TenantSpec("chat", "interactive", 0.35, weight=2.0, guaranteed_share=0.3, burst_share=0.7),
    TenantSpec("api", "standard", 0.35, weight=1.0, guaranteed_share=0.3, burst_share=0.7),
    TenantSpec("noisy", "standard", 0.15, weight=1.0, guaranteed_share=0.1, burst_share=0.5,
               aggressor=True),
    TenantSpec("batch", "batch", 0.15, weight=0.5, guaranteed_share=0.0, burst_share=1.0),
)
# dummy-tiny's context is 2048 tokens: the Azure conversation sizes divided by 2, prompts capped
# at 1024 and answers at 256 (both well inside it)
STACK_SCALING = Scaling(length_scale=2.0, max_prompt=1024, max_output=256)
# Requests/s outside the bursts, measured on this 2-core machine (two dummy-tiny workers, one
# torch thread and 8 slots each; mean prompt 457, answer 104 tokens). A steady ramp: 4/s kept the
# engines 47% busy, 6/s 58%, 10/s 71%. With the aggressor's bursts (x5 on its 15% share, 16/s
# inside them) runs of all three ways averaged 68-78% busy while the stack's processes used
# 1.6-1.7 of the 2 cores (the replay client 0.13 more): the machine, not the engines, is what
# runs out first, so a higher rate only melts it.
DEFAULT_RATE = 10.0


def format_run(run: StackRun) -> str:
    f = run.figures

    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v:.0f}"

    def x(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}"

    lines = [f"way {run.way}: {run.requests} requests ({run.not_sent} not sent, "
             f"{run.client_only} rows from the client), run {run.run_id}",
             f"  time: startup {run.startup_s:.1f} s, replay {run.replay_s:.1f} s, "
             f"whole way {run.wall_s:.1f} s",
             f"  cpu during the replay (cores): stack {run.cpu.stack:.2f}, client "
             f"{run.cpu.client:.2f}, other work {run.cpu.other:.2f}",
             f"  utilization {x(f.utilization)} ("
             + ", ".join(f"{n} {u:.2f}" for n, u in run.utilization_by_node.items()) + ")",
             f"  jain {x(f.jain)}; worst SLA tenant P99 TTFT {ms(f.worst_ttft_p99_ms)} ms, "
             f"E2E {ms(f.worst_e2e_p99_ms)} ms; victims' P99 inflation in bursts TTFT "
             f"{x(f.victim_ttft_inflation)}, E2E {x(f.victim_e2e_inflation)}"]
    if run.refusal_reasons:
        lines.append("  refusals by reason (store): " + ", ".join(
            f"{t}/{why} {n}" for (t, why), n in run.refusal_reasons.items()))
    if run.partitions:
        lines.append("  partitions: " + "; ".join(f"{t}={','.join(n)}"
                                                  for t, n in run.partitions.items()))
    lines.append(f"  {'tenant':8} {'class':12} {'reqs':>5} {'refused':>8} {'gave up':>7} "
                 f"{'failed':>6} {'TTFT p50':>9} {'TTFT p99':>9} {'E2E p50':>8} {'E2E p99':>8} "
                 f"{'attain':>6} {'served':>6} {'infl TTFT':>9} {'infl E2E':>8}")
    for t in f.tenants:
        lines.append(
            f"  {t.tenant:8} {t.sla_class:12} {t.requests:5d} {run.refusals.get(t.tenant, 0):8d} "
            f"{t.refused:7d} {t.failed:6d} {ms(t.ttft_p50_ms):>9} {ms(t.ttft_p99_ms):>9} "
            f"{ms(t.e2e_p50_ms):>8} {ms(t.e2e_p99_ms):>8} {t.attainment:6.2f} "
            f"{t.served_fraction:6.2f} {x(t.ttft_inflation):>9} {x(t.e2e_inflation):>8}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--way", choices=WAYS, default="two-level")
    p.add_argument("--duration", type=float, default=120.0, help="trace span, s")
    p.add_argument("--rate", type=float, default=DEFAULT_RATE,
                   help="requests/s over all tenants outside the bursts")
    p.add_argument("--burst-factor", type=float, default=5.0)
    p.add_argument("--burst-every", type=float, default=60.0,
                   help="s between burst starts (at most the duration)")
    p.add_argument("--burst-len", type=float, default=15.0, help="s per burst")
    p.add_argument("--max-seqs", type=int, default=PoolSettings().max_seqs,
                   help="each worker's batch slots: beyond them requests wait in the node's queue")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workdir", type=Path, default=Path(".strata/isolation-stack"))
    args = p.parse_args(argv)
    bursts = Bursts(args.burst_factor, min(args.burst_every, args.duration), args.burst_len)
    table = SlaTable(DEFAULT_CLASSES)
    sizes = trace_sizes(scaling=STACK_SCALING)
    settings = PoolSettings(max_seqs=args.max_seqs)
    trace = isolation_trace(DEFAULT_TENANTS, args.rate, args.duration, bursts, sizes,
                            random.Random(args.seed), settings.model)
    run = run_stack(args.way, trace, DEFAULT_TENANTS, table, bursts.windows(args.duration),
                    args.duration, args.workdir, settings)
    print(format_run(run))
    return 0


if __name__ == "__main__":
    sys.exit(main())
