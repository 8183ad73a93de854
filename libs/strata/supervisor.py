"""`make run`: the whole stack as local processes on loopback, under one supervisor.

Start order follows dependencies (metrics collector, scheduler, KV tier stores, node managers,
placement planner, gateway), each waited on through its gRPC health service. The supervisor
prints one ready line once a model replica serves, and on Ctrl-C (or when any service dies)
stops everything in reverse order.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from strata import defaults
from strata.rpc.server import channel
from strata.rpc.v1 import common_pb2, scheduler_pb2_grpc

REPO_ROOT = Path(__file__).resolve().parents[2]
KV_DISK_BYTES = 2 << 30   # each node's disk tier under the data folder (host tier: 1 GiB default)


@dataclass(slots=True)
class Service:
    name: str
    module: str
    address: str
    env: dict[str, str] = field(default_factory=dict)
    proc: asyncio.subprocess.Process | None = None


def plan_services(nodes: int, models: list[str], data_dir: str) -> list[Service]:
    host = defaults.GATEWAY_ADDR.rsplit(":", 1)[0]
    services = [
        Service("metrics", "services.metrics", defaults.METRICS_ADDR,
                {"STRATA_METRICS_BIND": defaults.METRICS_ADDR,
                 "STRATA_OTLP_BIND": defaults.OTLP_ADDR}),
        Service("scheduler", "services.scheduler", defaults.SCHEDULER_ADDR,
                {"STRATA_SCHEDULER_BIND": defaults.SCHEDULER_ADDR}),
    ]
    for i in range(nodes):
        node_addr = defaults.NODE_ADDR if i == 0 else f"{host}:{50200 + 2 * i}"
        kv_addr = defaults.KVSTORE_ADDR if i == 0 else f"{host}:{50201 + 2 * i}"
        services.append(Service(f"kvstore-{i}", "services.kvstore", kv_addr, {
            "STRATA_KVSTORE_BIND": kv_addr, "STRATA_KVSTORE_NODE_ID": f"node-{i}",
            "STRATA_SCHEDULER_ADDR": defaults.SCHEDULER_ADDR,
            "STRATA_KVSTORE_DISK_DIR": os.path.join(data_dir, "kv", f"node-{i}"),
            "STRATA_KVSTORE_DISK_BYTES": str(KV_DISK_BYTES)}))
        services.append(Service(f"node-{i}", "services.node", node_addr, {
            "STRATA_NODE_ID": f"node-{i}", "STRATA_NODE_BIND": node_addr,
            "STRATA_NODE_ADVERTISE": node_addr, "STRATA_KVSTORE_ADDR": kv_addr,
            "STRATA_SCHEDULER_ADDR": defaults.SCHEDULER_ADDR}))
    services.append(Service("placement", "services.placement", defaults.PLACEMENT_ADDR, {
        "STRATA_PLACEMENT_BIND": defaults.PLACEMENT_ADDR,
        "STRATA_SCHEDULER_ADDR": defaults.SCHEDULER_ADDR, "STRATA_MODELS": ",".join(models)}))
    services.append(Service("gateway", "services.gateway", defaults.GATEWAY_ADDR, {
        "STRATA_GATEWAY_BIND": defaults.GATEWAY_ADDR,
        "STRATA_SCHEDULER_ADDR": defaults.SCHEDULER_ADDR}))
    common = {"STRATA_DATA_DIR": data_dir, "STRATA_OTLP_ENDPOINT": defaults.OTLP_ADDR,
              "PYTHONUNBUFFERED": "1"}
    for s in services:
        s.env = {**common, **s.env}
    return services


async def wait_healthy(address: str, timeout_s: float, proc: asyncio.subprocess.Process) -> None:
    deadline = time.monotonic() + timeout_s
    async with channel(address) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        while True:
            if proc.returncode is not None:
                raise RuntimeError(f"exited with code {proc.returncode} during start")
            try:
                resp = await stub.Check(health_pb2.HealthCheckRequest(), timeout=1.0)
                if resp.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.aio.AioRpcError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"not healthy on {address} after {timeout_s:.0f}s")
            await asyncio.sleep(0.2)


async def wait_models(models: list[str], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    async with channel(defaults.SCHEDULER_ADDR) as ch:
        stub = scheduler_pb2_grpc.SchedulerStub(ch)
        while True:
            resp = await stub.ListModels(common_pb2.ListModelsRequest(), timeout=2.0)
            if set(models) <= {m.name for m in resp.models}:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"models {models} not served after {timeout_s:.0f}s")
            await asyncio.sleep(0.5)


async def supervise(nodes: int, models: list[str], data_dir: str, ready_timeout_s: float,
                    then: str | None = None) -> int:
    """Run the stack until Ctrl-C, a service dies, or (when given) the `then` command ends;
    returns the exit code (the command's own, when it ran)."""
    services = plan_services(nodes, models, data_dir)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    started: list[Service] = []
    code = 0
    try:
        for s in services:
            s.proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", s.module, cwd=str(REPO_ROOT), env={**os.environ, **s.env},
                start_new_session=True)  # Ctrl-C reaches only us; we stop them in order
            started.append(s)
            try:
                await wait_healthy(s.address, 60.0, s.proc)
            except RuntimeError as err:
                print(f"strata: {s.name} failed to start: {err}", file=sys.stderr, flush=True)
                return 1
        await wait_models(models, ready_timeout_s)
        key_file = Path(data_dir) / defaults.DEMO_KEY_FILE
        key = key_file.read_text().strip() if key_file.exists() else "(none)"
        print(f"strata ready: gateway {defaults.GATEWAY_ADDR}, models {', '.join(models)}, "
              f"demo API key {key} (Ctrl-C stops)", flush=True)
        died = [asyncio.create_task(s.proc.wait()) for s in started]
        stopper = asyncio.create_task(stop.wait())
        waiting = [stopper, *died]
        command = None
        if then:
            env = {**os.environ, "STRATA_DATA_DIR": data_dir}
            command = await asyncio.create_subprocess_shell(then, cwd=str(REPO_ROOT), env=env)
            waiting.append(asyncio.create_task(command.wait()))
        done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        if command is not None and command.returncode is not None:
            code = command.returncode
        elif stopper not in done:
            dead = [s.name for s in started if s.proc.returncode is not None]
            print(f"strata: {', '.join(dead)} exited; stopping the stack", file=sys.stderr)
            code = 1
        if command is not None and command.returncode is None:
            command.terminate()
            await command.wait()
        for t in waiting:
            t.cancel()
    except RuntimeError as err:
        print(f"strata: {err}", file=sys.stderr, flush=True)
        code = 1
    finally:
        await shutdown(started)
    return code


async def shutdown(started: list[Service], grace_s: float = 15.0) -> None:
    for s in reversed(started):
        if s.proc is not None and s.proc.returncode is None:
            s.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(s.proc.wait(), grace_s)
            except TimeoutError:
                s.proc.kill()
                await s.proc.wait()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="strata-run", description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1, help="node managers to start (default 1)")
    ap.add_argument("--models", default=defaults.DEFAULT_MODEL,
                    help="comma-separated models to place (default %(default)s)")
    ap.add_argument("--data-dir", default=os.environ.get("STRATA_DATA_DIR",
                                                         str(REPO_ROOT / ".strata")))
    ap.add_argument("--ready-timeout", type=float, default=600.0)
    ap.add_argument("--then", help="a shell command to run once the stack is ready; the stack "
                                   "stops when it ends and its exit code is ours")
    args = ap.parse_args(argv)
    if args.nodes < 1:
        ap.error(f"--nodes must be at least 1, got {args.nodes}")
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    os.makedirs(args.data_dir, exist_ok=True)
    return asyncio.run(supervise(args.nodes, models, os.path.abspath(args.data_dir),
                                 args.ready_timeout, args.then))


if __name__ == "__main__":
    sys.exit(main())
