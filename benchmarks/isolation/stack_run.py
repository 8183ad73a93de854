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
replayed open loop (strata.client.replay) as one evaluation run, a refused request retried after its
retry-after hint until give_up_s after its first attempt. The figures come from the run's rows in
the store (strata.eval.isolation.isolation_figures; stack_rows.merge_rows counts a retried
request once, from its first attempt) and the nodes' samples over the trace's span.

    python -m benchmarks.isolation.stack_run [--way two-level|static|fcfs|all] [--duration 120]
        [--rate 10] [--max-seqs 8] [--classes SPEC] [--seed 1]

The aggressor bursts twice (stack_bursts: 5x for duration/8 s at 3/16 and 11/16 of the run).

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

from benchmarks.common.cpu import CpuMeter, CpuShare
from benchmarks.isolation.stack_format import describe, format_run
from benchmarks.isolation.stack_pool import PoolStack, node_ids
from benchmarks.isolation.stack_rows import merge_rows
from benchmarks.isolation.stack_store import read_run
from benchmarks.isolation.stack_ways import (
    WAYS,
    PoolSettings,
    static_partitions,
    way_overrides,
)
from benchmarks.isolation.workload import (
    Bursts,
    TenantSpec,
    isolation_trace,
    trace_sizes,
)
from strata.client.replay import ReplayConfig, RetryPolicy, replay
from strata.core import defaults
from strata.core.sla import SlaTable, parse_classes
from strata.eval.isolation import IsolationFigures, isolation_figures
from strata.eval.traces import TraceRequest
from strata.eval.workload import (
    PromptSynth,
    Scaling,
    TenantKey,
    TenantMapper,
    Window,
    WorkloadRequest,
    build_workload,
    text_for_model,
)
from strata.rpc.channels import public_channel
from strata.v1 import admin_pb2, admin_pb2_grpc

RATE_LIMIT = "rate_limit"


@dataclass(slots=True)
class StackRun:
    way: str
    figures: IsolationFigures
    # (tenant, reason) -> refused attempts, retried ones included, as SimRun.refusals: the
    # scheduler's burst | pool_full | sla | partition (its route span), node (refused further
    # on), rate_limit (the gateway's, before any span: what the client counted beyond those)
    refusals: dict[tuple[str, str], int]
    partitions: dict[str, list[str]]  # static: tenant -> its nodes; otherwise empty
    requests: int
    not_sent: int
    client_only: int  # rows from the client's record alone (stack_rows)
    run_id: int
    startup_s: float  # stack start until every node serves the model
    replay_s: float  # first request until the last answer
    wall_s: float  # the way as a whole, stack start to stop
    cpu: CpuShare  # cores used during the replay: the stack (watched), this client (own), other
    utilization_by_node: dict[str, float] = field(default_factory=dict)


async def create_tenants(
    gateway: str, admin_key: str, tenants: Sequence[TenantSpec]
) -> dict[str, str]:
    """Each tenant through the Admin API with its class and shares; tenant -> its API key."""
    keys = {}
    metadata = (("authorization", f"Bearer {admin_key}"),)
    async with public_channel(gateway) as ch:
        admin = admin_pb2_grpc.AdminStub(ch)
        for t in tenants:
            reply = await admin.CreateTenant(
                admin_pb2.CreateTenantRequest(
                    tenant=admin_pb2.TenantRecord(
                        name=t.name,
                        sla_class=t.sla_class,
                        weight=t.weight,
                        guaranteed_share=t.guaranteed_share,
                        burst_share=t.burst_share,
                    ),
                    issue_key=True,
                ),
                metadata=metadata,
                timeout=10,
            )
            keys[t.name] = reply.api_key
    return keys


def workload_for(
    trace: Sequence[TraceRequest], keys: dict[str, str], model: str, seed: int
) -> list[WorkloadRequest]:
    """The trace as text, sizes as they are (the caller scaled them), each tenant's key."""
    scaling = Scaling(max_prompt=1 << 30, max_output=1 << 30)
    mapper = TenantMapper([TenantKey(name, key) for name, key in keys.items()])
    return build_workload(
        trace,
        scaling,
        Window(),
        mapper,
        PromptSynth(text_for_model(model), scaling.block_tokens, seed),
    )


def run_stack(
    way: str,
    trace: list[TraceRequest],
    tenants: Sequence[TenantSpec],
    table: SlaTable,
    windows: list[tuple[float, float]],
    duration_s: float,
    workdir: Path,
    settings: PoolSettings = PoolSettings(),
    progress: bool = True,
) -> StackRun:
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
    stack = PoolStack(
        data_dir=data_dir,
        db_url=db_url,
        nodes=settings.nodes,
        overrides=way_overrides(way, settings, table, partitions),
    )
    try:
        stack.start()
        stack.wait_replicas(settings.model)
        startup_s = time.perf_counter() - started
        admin_key = (data_dir / defaults.ADMIN_KEY_FILE).read_text().strip()
        keys = asyncio.run(create_tenants(stack.addr("gateway"), admin_key, tenants))
        workload = workload_for(trace, keys, settings.model, settings.prompt_seed)
        config = ReplayConfig(
            model=settings.model,
            gateway=stack.addr("gateway"),
            metrics=stack.addr("gateway"),
            run_key=admin_key,
            out_dir=str(data_dir / "replays"),
            name=f"isolation-{way}",
            params={
                "benchmark": "isolation",
                "way": way,
                "duration_s": duration_s,
                "tenants": [t.name for t in tenants],
                "partitions": partitions,
            },
            retry=RetryPolicy(settings.give_up_s, settings.retry_min_wait_s),
        )
        meter = CpuMeter(p.proc.pid for p in stack.processes.values())
        result = asyncio.run(
            replay(workload, config, progress_stream=sys.stderr if progress else None)
        )
        cpu = meter.stop()
        origin = result.summary_json["started_unix_ms"]
        served = {r.request_id for r in result.records if r.ok and r.request_id}
        stored = asyncio.run(
            read_run(db_url, result.run_id, served, (origin, origin + round(duration_s * 1000)))
        )
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
        merged.rows,
        stored.samples,
        {t.name: t.sla_class for t in tenants},
        offered,
        table,
        next(t.name for t in tenants if t.aggressor),
        [(origin + a * 1000, origin + b * 1000) for a, b in windows],
        (origin, origin + duration_s * 1000),
    )
    by_node: dict[str, list[float]] = defaultdict(list)
    for s in stored.samples:
        by_node[s.node_id].append(s.utilization)
    refusals = dict(stored.refusal_reasons)
    for tenant, n in merged.refused_attempts.items():
        seen = sum(v for (t, _), v in stored.refusal_reasons.items() if t == tenant)
        if n > seen:
            refusals[(tenant, RATE_LIMIT)] = n - seen
    return StackRun(
        way,
        figures,
        dict(sorted(refusals.items())),
        partitions,
        len(result.records),
        result.not_sent,
        merged.client_only,
        result.run_id,
        startup_s,
        result.summary.duration_s,
        time.perf_counter() - started,
        cpu,
        {n: sum(v) / len(v) for n, v in sorted(by_node.items())},
    )


# -- all three ways, and the driver ------------------------------------------------------------

# A default cast for the driver (the benchmark passes its own): two steady tenants with an SLA,
# an aggressor of the standard class that bursts, and a best-effort batch tenant.
DEFAULT_TENANTS = (
    TenantSpec("chat", "interactive", 0.35, weight=2.0, guaranteed_share=0.3, burst_share=0.7),
    TenantSpec("api", "standard", 0.35, weight=1.0, guaranteed_share=0.3, burst_share=0.7),
    TenantSpec(
        "noisy", "standard", 0.15, weight=1.0, guaranteed_share=0.1, burst_share=0.5, aggressor=True
    ),
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
BURST_FACTOR = 5.0
WORKDIR = Path(".strata/isolation-stack")


def stack_bursts(duration_s: float, factor: float = BURST_FACTOR) -> Bursts:
    """Two bursts in the run, each a quarter of its half (120 s: 15 s at 22.5 s and 82.5 s)."""
    return Bursts(factor, duration_s / 2, duration_s / 8)


@dataclass(slots=True)
class StackComparison:
    """The three ways on the same trace; runs in WAYS order."""

    runs: dict[str, StackRun]
    settings: PoolSettings
    rate: float
    duration_s: float
    bursts: Bursts
    trace: list[TraceRequest]
    tenants: tuple[TenantSpec, ...]
    table: SlaTable

    def describe(self) -> list[str]:
        return describe(self)


def run_all(
    tenants: Sequence[TenantSpec],
    table: SlaTable,
    duration_s: float,
    *,
    rate: float = DEFAULT_RATE,
    seed: int = 1,
    workdir: Path = WORKDIR,
    settings: PoolSettings = PoolSettings(),
    ways: Sequence[str] = WAYS,
    progress: bool = True,
) -> StackComparison:
    """Each way on a fresh stack, the same trace: `rate` requests/s outside the aggressor's two
    bursts (stack_bursts), sizes STACK_SCALING. Each way takes about duration_s + 20 s."""
    bursts = stack_bursts(duration_s)
    trace = isolation_trace(
        tenants,
        rate,
        duration_s,
        bursts,
        trace_sizes(scaling=STACK_SCALING),
        random.Random(seed),
        settings.model,
    )
    windows = bursts.windows(duration_s)
    runs = {}
    for way in ways:
        runs[way] = run_stack(
            way, trace, tenants, table, windows, duration_s, workdir, settings, progress
        )
        if progress:
            print(format_run(runs[way]), file=sys.stderr, flush=True)
    return StackComparison(runs, settings, rate, duration_s, bursts, trace, tuple(tenants), table)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--way", choices=(*WAYS, "all"), default="two-level")
    p.add_argument("--duration", type=float, default=120.0, help="trace span, s")
    p.add_argument(
        "--rate",
        type=float,
        default=DEFAULT_RATE,
        help="requests/s over all tenants outside the bursts",
    )
    p.add_argument(
        "--classes",
        default="",
        help="SLA classes (name=TTFT_MS/TPOT_MS[@PRIORITY],...; default: the "
        "built-in interactive/standard/batch)",
    )
    p.add_argument(
        "--max-seqs",
        type=int,
        default=PoolSettings().max_seqs,
        help="each worker's batch slots: beyond them requests wait in the node's queue",
    )
    p.add_argument(
        "--retry-min-wait",
        type=float,
        default=0.0,
        help="s a refused client waits at least before retrying (default: the hint)",
    )
    p.add_argument("--seed", type=int, default=1, help="the trace's seed")
    p.add_argument("--workdir", type=Path, default=WORKDIR)
    args = p.parse_args(argv)
    comparison = run_all(
        DEFAULT_TENANTS,
        parse_classes(args.classes),
        args.duration,
        rate=args.rate,
        seed=args.seed,
        workdir=args.workdir,
        settings=PoolSettings(max_seqs=args.max_seqs, retry_min_wait_s=args.retry_min_wait),
        ways=WAYS if args.way == "all" else (args.way,),
        progress=False,
    )
    print("\n".join(comparison.describe()))
    for run in comparison.runs.values():
        print(format_run(run))
    return 0


if __name__ == "__main__":
    sys.exit(main())
