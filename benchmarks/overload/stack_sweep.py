"""The real-stack sweep: for one model and one scheduling mode, the stack as `make run` starts it
(the supervisor, one node manager, hot standby included), its capacity measured first, then the
Azure conversation trace offered at rising multiples of a capacity, one replay per point.

    two-level   the defaults: admission that prices the whole SLA (quotas, the TTFT check with
                the engine-slot wait), the nodes' fair queues (wfq)
    fcfs        STRATA_SCHEDULER_MODE=fcfs and STRATA_NODE_QUEUE=fcfs: routed by load, no
                quotas, no SLA check, first come first served on the node

What neither mode turns off: the node's engine slots still take a request only while the
running decodes keep their TPOT targets (strata.policy.scheduling.slots; the node has no switch
for it), and the worker sizes prefill chunks by them; fcfs differs in that nothing is refused
and the node's queue is one line in arrival order.

After the points, the requests each point refused as infeasible are sent again alone on the
idle stack (benchmarks.overload.alone): those that miss their targets even then are not
attainable at any load, and the goodput target leaves them out of the offer.

Every point is one evaluation run (strata.client.replay), open loop, refusals final (no retry),
each request with a client deadline (`request_timeout_s`): a request still unanswered then is
cancelled (DEADLINE_EXCEEDED), so an overloaded baseline's backlog ends with its point instead
of spilling into the next. The points of both modes are offered at the same rates: multiples of
the capacity measured on the model's first stack (`rates`); each stack measures its own
capacity too, reported beside.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from benchmarks.common.cpu import CpuMeter
from benchmarks.common.supervised import SupervisedStack
from benchmarks.isolation.stack_run import create_tenants
from benchmarks.overload.alone import measure_alone, probe_tenant
from benchmarks.overload.capacity import measure_capacity
from benchmarks.overload.points import INFEASIBLE, point_stats
from benchmarks.overload.workload import TENANTS, point_window_s, point_workload
from strata.client.replay import ReplayConfig, replay
from strata.core import defaults
from strata.core.sla import SlaTable
from strata.eval.traces import TraceRequest
from strata.eval.workload import WorkloadRequest

MODES = ("fcfs", "two-level")
MODE_ENV = {
    "fcfs": {"STRATA_SCHEDULER_MODE": "fcfs", "STRATA_NODE_QUEUE": "fcfs"},
    "two-level": {"STRATA_SCHEDULER_MODE": "two-level", "STRATA_NODE_QUEUE": "wfq"},
}


@dataclass(slots=True, frozen=True)
class SweepSettings:
    multiples: tuple[float, ...] = (0.5, 1.0, 2.0, 3.0)
    min_point_s: float = 120.0  # a point offers load at least this long ...
    min_admitted: int = 100  # ... and long enough for about this many served requests
    request_timeout_s: float = 60.0  # the client's deadline per request
    capacity_s: float = 60.0
    capacity_warmup_s: float = 10.0
    capacity_clients: int = 16
    pause_s: float = 10.0  # idle between points: the nodes' margins settle


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def run_mode(
    model: str,
    mode: str,
    trace: Sequence[TraceRequest],
    table: SlaTable,
    settings: SweepSettings,
    workdir: Path,
    rates: Sequence[float] | None = None,
    capacity_rps: float | None = None,
    seed: int = 1,
) -> dict:
    """One stack of `model` in `mode`: its capacity, then a point per rate (by default the
    settings' multiples of the capacity measured here). `capacity_rps` sizes the points'
    windows (default: this stack's). Returns the mode's results as plain data."""
    started = time.perf_counter()
    data_dir = workdir / f"{model}-{mode}"
    if data_dir.exists():
        shutil.rmtree(data_dir)
    data_dir.mkdir(parents=True)
    stack = SupervisedStack(data_dir, env=MODE_ENV[mode], model=model)
    points = []
    infeasible: list[list[WorkloadRequest]] = []  # each point's requests refused as infeasible
    try:
        stack.start()
        stack.wait_whole()
        startup_s = time.perf_counter() - started
        admin_key = (data_dir / defaults.ADMIN_KEY_FILE).read_text().strip()
        keys = asyncio.run(create_tenants(stack.gateway, admin_key, TENANTS))
        say(f"{model} {mode}: stack up in {startup_s:.0f} s; measuring capacity")
        cap = measure_capacity(
            stack.gateway,
            keys[TENANTS[0].name],
            model,
            trace,
            settings.capacity_clients,
            settings.capacity_s,
            settings.capacity_warmup_s,
        )
        say(
            f"{model} {mode}: capacity {cap.rps:.2f} requests/s ({cap.completed} completed, "
            f"{cap.refused} refused, {cap.failed} failed, {settings.capacity_clients} clients)"
        )
        if rates is None:
            rates = [m * cap.rps for m in settings.multiples]
        sizing = capacity_rps if capacity_rps is not None else cap.rps
        for i, rate in enumerate(rates):
            time.sleep(settings.pause_s)
            window = point_window_s(rate, sizing, settings.min_point_s, settings.min_admitted)
            point_seed = seed * 1000 + i
            workload, scale = point_workload(trace, rate, window, keys, model, point_seed)
            config = ReplayConfig(
                model=model,
                gateway=stack.gateway,
                metrics=stack.gateway,
                run_key=admin_key,
                out_dir=str(data_dir / "replays"),
                name=f"overload-{mode}-{rate:.2f}rps",
                params={
                    "benchmark": "overload",
                    "mode": mode,
                    "rate": rate,
                    "window_s": window,
                    "time_scale": scale,
                    "prompt_seed": point_seed,
                },
                request_timeout_s=settings.request_timeout_s,
            )
            meter = CpuMeter([stack.proc.pid])
            t0 = time.perf_counter()
            result = asyncio.run(replay(workload, config))
            wall = time.perf_counter() - t0
            cpu = meter.stop()
            stats = point_stats(result.records, window, table)
            refused = {r.index for r in result.records if r.status == INFEASIBLE}
            infeasible.append([w for w in workload if w.index in refused])
            a = stats.all
            say(
                f"{model} {mode} {rate:.2f} req/s ({window:.0f} s): sent {a.sent}, admitted "
                f"{a.admitted}, refused {a.refused}, attainment "
                f"{(a.attainment or 0):.1%}, goodput {a.goodput_rps:.2f}/s, TTFT P99 "
                f"{a.ttft.p99 or 0:.0f} ms, wall {wall:.0f} s"
            )
            points.append(
                {
                    "rate": rate,
                    "window_s": window,
                    "time_scale": scale,
                    "requests": len(workload),
                    "not_sent": result.not_sent,
                    "run_id": result.run_id,
                    "wall_s": wall,
                    "cpu": {"stack": cpu.watched, "client": cpu.own, "other": cpu.other},
                    "stats": asdict(stats),
                }
            )
        if any(infeasible):
            time.sleep(settings.pause_s)  # idle: the nodes' reports catch up
            top = max(table.lookup(t.sla_class).priority for t in TENANTS)
            probe = asyncio.run(probe_tenant(stack.gateway, admin_key, top))
            say(f"{model} {mode}: sending {sum(map(len, infeasible))} infeasible refusals alone")
            alone = measure_alone(stack.gateway, probe, model, infeasible, table)
            for point, a in zip(points, alone, strict=True):
                point["alone"] = {
                    "refused": a.refused,
                    "probed": len(a.results),
                    "missed": a.missed,
                    "unattainable": a.unattainable,
                    "results": [asdict(r) for r in a.results],
                }
    except BaseException:
        say(stack.log())
        raise
    finally:
        stack.stop()
    return {
        "model": model,
        "mode": mode,
        "startup_s": startup_s,
        "capacity": asdict(cap),
        "points": points,
        "wall_s": time.perf_counter() - started,
    }


def run_model(
    model: str,
    trace: Sequence[TraceRequest],
    table: SlaTable,
    settings: SweepSettings,
    workdir: Path,
    modes: Sequence[str] = MODES,
) -> dict:
    """Every mode of `model`, the first measuring the capacity whose multiples all offer."""
    out: dict = {"model": model, "modes": {}}
    rates: list[float] | None = None
    capacity: float | None = None
    for mode in modes:
        run = run_mode(model, mode, trace, table, settings, workdir, rates, capacity)
        if rates is None:
            capacity = run["capacity"]["rps"]
            rates = [m * capacity for m in settings.multiples]
            out["capacity_rps"] = capacity
            out["capacity_mode"] = mode
            out["multiples"] = list(settings.multiples)
        out["modes"][mode] = run
    return out
