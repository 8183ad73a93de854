"""One way of the placement benchmark on the real stack: a fresh stack, history, one period.

1. the compose services as processes (benchmarks.isolation.stack_pool: N node managers,
   each with its own KV tier store), all but the placement planner
2. the benchmark's tenant through the gateway's Admin API (its class is the planner's red
   line), and the history rows in the store, ending lead_s from now (stack_history)
3. the placement planner, configured for the way (stack_ways); then until every model has
   a READY replica
4. at the end of the history, the evaluation trace replayed open loop: one replay per model
   (strata.client.replay sends one model per run), all started together, while ReplicaWatch
   lists the replicas every half second
5. the runs' rows (the gateway's, from its spans; a request whose row never reached the store
   from the client's record) and the nodes' samples over the period, then the stack stops
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.common.cpu import CpuMeter, CpuShare
from benchmarks.common.stack import ROOT, StackProcess, wait_serving
from benchmarks.isolation.stack_pool import PoolStack
from benchmarks.isolation.stack_rows import merge_rows
from benchmarks.isolation.stack_run import create_tenants
from benchmarks.isolation.stack_store import read_run
from benchmarks.isolation.workload import TenantSpec
from benchmarks.placement.stack_figures import WayFigures, way_figures
from benchmarks.placement.stack_history import write_history
from benchmarks.placement.stack_watch import ReplicaWatch, replica_changes
from benchmarks.placement.stack_ways import StackSettings, way_overrides
from benchmarks.placement.stack_workload import StackTrace
from strata.client.replay import ReplayConfig, ReplayResult, replay
from strata.core import defaults
from strata.core.lifeline import child_env
from strata.core.sla import SlaClass
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
from strata.rpc.channels import sync_channel
from strata.v1 import (
    common_pb2,
    placement_pb2,
    placement_pb2_grpc,
    scheduler_pb2,
    scheduler_pb2_grpc,
)

PLANNER = "placement"


@dataclass
class PlacementStack(PoolStack):
    """PoolStack whose placement planner starts only when asked (after the history is in)."""

    held: StackProcess | None = None

    def plan(self) -> list[StackProcess]:
        planned = super().plan()
        self.held = next(p for p in planned if p.name == PLANNER)
        return [p for p in planned if p.name != PLANNER]

    def start_planner(self, timeout_s: float = 60.0) -> None:
        p = self.held
        p.log_path = self.data_dir / f"{p.name}.log"
        with open(p.log_path, "w") as log:
            p.proc = subprocess.Popen(
                [sys.executable, *p.command[1:]],
                cwd=ROOT,
                env=child_env({**os.environ, "PYTHONUNBUFFERED": "1", **p.env}),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.processes[p.name] = p
        wait_serving(p, timeout_s, self.identity)

    def wait_until(self, ready, what: str, timeout_s: float) -> None:
        """Until ready(ListNodes reply) is true; RuntimeError with the logs after timeout_s."""
        deadline = time.monotonic() + timeout_s
        with sync_channel(self.addr("scheduler"), self.identity) as ch:
            stub = scheduler_pb2_grpc.SchedulerStub(ch)
            while not ready(stub.ListNodes(scheduler_pb2.ListNodesRequest(), timeout=5).nodes):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{what} not within {timeout_s:.0f} s:\n{self.logs()}")
                time.sleep(0.25)


def ready_models(nodes) -> set[str]:
    return {r.model for n in nodes for r in n.replicas if r.state == common_pb2.REPLICA_STATE_READY}


@dataclass(slots=True)
class StackRun:
    way: str
    figures: WayFigures
    run_ids: dict[str, int]  # model -> its replay's run
    history_run: int
    client_only: int  # rows built from the client's record (span not stored)
    not_sent: int
    plan_version: int
    plan_policy: str
    late_s: float  # how much later than the history's end the replay began
    startup_s: float  # stack start until every model had a READY replica
    replay_s: float
    wall_s: float
    cpu: CpuShare
    watch_misses: int = 0


def workloads(
    evaluation: Sequence[TraceRequest], models: Sequence[str], tenant: str, key: str, seed: int
) -> dict[str, list[WorkloadRequest]]:
    """Each model's part of the trace as text for its tokenizer, exact sizes, one tenant."""
    scaling = Scaling(max_prompt=1 << 30, max_output=1 << 30)
    out = {}
    for i, model in enumerate(models):
        mine = [r for r in evaluation if r.model == model]
        out[model] = build_workload(
            mine,
            scaling,
            Window(),
            TenantMapper([TenantKey(tenant, key)]),
            PromptSynth(text_for_model(model), scaling.block_tokens, seed * 100 + i),
        )
    return out


async def _evaluate(
    stack: PlacementStack,
    loads: dict[str, list[WorkloadRequest]],
    start_unix_s: float,
    data_dir: Path,
    way: str,
    progress: bool,
) -> tuple[dict[str, ReplayResult], ReplicaWatch, CpuShare]:
    stop = asyncio.Event()
    watch = ReplicaWatch(stack.addr("scheduler"), stack.identity)
    watcher = asyncio.create_task(watch.run(stop))
    try:
        await asyncio.sleep(max(0.0, start_unix_s - time.time()))
        meter = CpuMeter(p.proc.pid for p in stack.processes.values())
        configs = [
            ReplayConfig(
                model=m,
                gateway=stack.addr("gateway"),
                metrics=stack.addr("gateway"),
                run_key=(data_dir / defaults.ADMIN_KEY_FILE).read_text().strip(),
                out_dir=str(data_dir / "replays"),
                name=f"placement-{way}-{m}",
                params={"benchmark": "placement", "way": way, "model": m},
            )
            for m in loads
        ]
        results = await asyncio.gather(
            *(
                replay(
                    loads[c.model], c, progress_stream=sys.stderr if progress and i == 0 else None
                )
                for i, c in enumerate(configs)
            )
        )
        cpu = meter.stop()
    finally:
        stop.set()
        await watcher
    return {c.model: r for c, r in zip(configs, results)}, watch, cpu


def _plan(stack: PlacementStack) -> placement_pb2.PlacementPlan:
    with sync_channel(stack.addr(PLANNER), stack.identity) as ch:
        return placement_pb2_grpc.PlacementStub(ch).GetPlan(
            placement_pb2.GetPlanRequest(), timeout=10
        )


def run_way(
    way: str,
    traces: StackTrace,
    sla: SlaClass,
    settings: StackSettings,
    profiles_dir: Path,
    workdir: Path,
    seed: int,
    progress: bool = True,
) -> StackRun:
    started = time.perf_counter()
    data_dir = Path(workdir) / way
    if data_dir.exists():
        shutil.rmtree(data_dir)
    data_dir.mkdir(parents=True)
    models = [r.role.model for r in traces.rates]
    db_url = f"sqlite+aiosqlite:///{data_dir}/strata.db"
    stack = PlacementStack(
        data_dir=data_dir,
        db_url=db_url,
        nodes=settings.nodes,
        overrides=way_overrides(way, models, settings, str(profiles_dir)),
    )
    try:
        stack.start()
        stack.wait_until(
            lambda nodes: len(nodes) >= settings.nodes, f"{settings.nodes} nodes registered", 60
        )
        admin_key = (data_dir / defaults.ADMIN_KEY_FILE).read_text().strip()
        tenant = TenantSpec(
            settings.tenant, settings.sla_class, 1.0, guaranteed_share=1.0, burst_share=1.0
        )
        key = asyncio.run(create_tenants(stack.addr("gateway"), admin_key, [tenant]))[tenant.name]
        start_unix_s = time.time() + settings.lead_s
        history_run = asyncio.run(
            write_history(
                db_url,
                traces.history,
                round(start_unix_s * 1000),
                settings.tenant,
                round(time.time() * 1000),
            )
        )
        stack.start_planner()
        stack.wait_until(
            lambda nodes: set(models) <= ready_models(nodes),
            f"a READY replica of each of {', '.join(models)}",
            120,
        )
        startup_s = time.perf_counter() - started
        late_s = max(0.0, time.time() - start_unix_s)
        results, watch, cpu = asyncio.run(
            _evaluate(
                stack,
                workloads(traces.evaluation, models, settings.tenant, key, seed),
                start_unix_s,
                data_dir,
                way,
                progress,
            )
        )
        origin = min(r.summary_json["started_unix_ms"] for r in results.values())
        end = max(
            r.summary_json["started_unix_ms"] + round(r.summary.duration_s * 1000)
            for r in results.values()
        )
        rows, client_only, samples = [], 0, None
        for model, result in results.items():
            served = {r.request_id for r in result.records if r.ok and r.request_id}
            stored = asyncio.run(
                read_run(
                    db_url, result.run_id, served, (origin, origin + round(traces.period_s * 1000))
                )
            )
            merged = merge_rows(
                result.records,
                result.attempts,
                stored.rows,
                result.summary_json["started_unix_ms"],
                model,
            )
            rows += merged.rows
            client_only += merged.client_only
            samples = stored.samples
        plan = _plan(stack)
    except BaseException:
        print(stack.logs(), file=sys.stderr)
        raise
    finally:
        stack.stop()
    changes = replica_changes(watch.listings, origin, end)
    figures = way_figures(way, rows, samples or [], changes, sla, models)
    return StackRun(
        way,
        figures,
        {m: r.run_id for m, r in results.items()},
        history_run,
        client_only,
        sum(r.not_sent for r in results.values()),
        plan.version,
        plan.policy,
        late_s,
        startup_s,
        (end - origin) / 1000,
        time.perf_counter() - started,
        cpu,
        watch.misses,
    )
