"""`make run`: the whole stack as local processes on loopback, under one supervisor.

Start order follows dependencies (metrics collector, scheduler, KV tier stores, node managers,
placement planner, gateway), each waited on through its gRPC health service. The supervisor
prints one ready line once a model replica serves. Before anything starts, the cluster's secrets
(internal token, CA, per-service certificates) are written to <data dir>/secrets unless present;
every internal call then runs over mutual TLS with the token. A service that dies is restarted
after a backoff and the restart is logged (strata.policy.restart), as compose's restart policy and
Kubernetes would; the stack stops on Ctrl-C (or SIGTERM), on a crash loop, or when the `--then`
command ends. Services die with the supervisor, even under `kill -9` (strata.core.lifeline).
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

from strata.core import defaults
from strata.core.lifeline import child_env
from strata.kvtier.shm_segment import DEFAULT_DIR as SHM_DIR
from strata.kvtier.shm_segment import segment_path
from strata.policy.restart import RestartPolicy
from strata.rpc.channels import install, public_channel
from strata.rpc.server import channel
from strata.security.settings import SecuritySettings
from strata.v1 import common_pb2, scheduler_pb2_grpc

REPO_ROOT = Path(__file__).resolve().parents[2]
KV_DISK_BYTES = 2 << 30  # each node's disk tier under the data folder (host tier: 1 GiB default)
START_TIMEOUT_S = 120.0  # a service's health check after a (re)start; a busy 2-core host is slow
STANDBY_WORKERS = 1  # hot standby workers per model and node, as compose runs


@dataclass(frozen=True, slots=True)
class Ports:
    """Where the stack listens: the shared defaults, or a block of ports from `base` (tests run
    a second stack beside a developer's `make run`)."""

    base: int = int(defaults.GATEWAY_ADDR.rsplit(":", 1)[1])
    host: str = defaults.GATEWAY_ADDR.rsplit(":", 1)[0]

    def addr(self, offset: int) -> str:
        return f"{self.host}:{self.base + offset}"

    @property
    def gateway(self) -> str:
        return self.addr(0)

    @property
    def scheduler(self) -> str:
        return self.addr(1)

    def node(self, i: int) -> str:
        return self.addr(2) if i == 0 else self.addr(149 + 2 * i)

    def kvstore(self, i: int) -> str:
        return self.addr(3) if i == 0 else self.addr(150 + 2 * i)

    @property
    def placement(self) -> str:
        return self.addr(4)

    @property
    def metrics(self) -> str:
        return self.addr(5)

    @property
    def otlp(self) -> str:
        return self.addr(6)

    def _default_block(self) -> bool:
        default = Ports()
        return (self.base, self.host) == (default.base, default.host)

    @property
    def http(self) -> str:
        """The gateway's HTTP port: 8000 beside the default ports, else the block's own."""
        return defaults.GATEWAY_HTTP_ADDR if self._default_block() else self.addr(7)

    def prometheus(self, service: str, i: int = 0) -> str:
        """Where `service` (node and kvstore: the i-th) serves /metrics: the shared defaults
        (9101-9105) for the first of each beside the default ports, else the block's own."""
        offsets = {"scheduler": 8, "placement": 9, "metrics": 10, "node": 11, "kvstore": 12}
        if i == 0 and self._default_block():
            return getattr(defaults, f"{service.upper()}_PROMETHEUS_ADDR")
        return self.addr(offsets[service] + (0 if i == 0 else 300 + 2 * i))


@dataclass(slots=True)
class Service:
    name: str
    module: str
    address: str
    env: dict[str, str] = field(default_factory=dict)
    proc: asyncio.subprocess.Process | None = None
    started_at: float = 0.0
    shm_path: Path | None = None  # a KV tier store's shared-memory segment
    public: bool = False  # the gateway: its port takes no cluster credential


def plan_services(
    nodes: int, models: list[str], data_dir: str, ports: Ports = Ports()
) -> list[Service]:
    services = [
        Service(
            "metrics",
            "services.metrics",
            ports.metrics,
            {
                "STRATA_METRICS_BIND": ports.metrics,
                "STRATA_OTLP_BIND": ports.otlp,
                "STRATA_METRICS_PROMETHEUS_BIND": ports.prometheus("metrics"),
            },
        ),
        Service(
            "scheduler",
            "services.scheduler",
            ports.scheduler,
            {
                "STRATA_SCHEDULER_BIND": ports.scheduler,
                "STRATA_SCHEDULER_PROMETHEUS_BIND": ports.prometheus("scheduler"),
            },
        ),
    ]
    for i in range(nodes):
        node_addr, kv_addr = ports.node(i), ports.kvstore(i)
        services.append(
            Service(
                f"kvstore-{i}",
                "services.kvstore",
                kv_addr,
                {
                    "STRATA_KVSTORE_BIND": kv_addr,
                    "STRATA_KVSTORE_PROMETHEUS_BIND": ports.prometheus("kvstore", i),
                    "STRATA_KVSTORE_NODE_ID": f"node-{i}",
                    "STRATA_SCHEDULER_ADDR": ports.scheduler,
                    "STRATA_KVSTORE_DISK_DIR": os.path.join(data_dir, "kv", f"node-{i}"),
                    "STRATA_KVSTORE_DISK_BYTES": str(KV_DISK_BYTES),
                },
                shm_path=segment_path(SHM_DIR, f"node-{i}", int(kv_addr.rsplit(":", 1)[1])),
            )
        )
        services.append(
            Service(
                f"node-{i}",
                "services.node",
                node_addr,
                {
                    "STRATA_NODE_ID": f"node-{i}",
                    "STRATA_NODE_BIND": node_addr,
                    "STRATA_NODE_PROMETHEUS_BIND": ports.prometheus("node", i),
                    "STRATA_NODE_ADVERTISE": node_addr,
                    "STRATA_KVSTORE_ADDR": kv_addr,
                    "STRATA_SCHEDULER_ADDR": ports.scheduler,
                    "STRATA_METRICS_ADDR": ports.metrics,
                    "STRATA_NODE_STANDBY": str(STANDBY_WORKERS),
                },
            )
        )
    services.append(
        Service(
            "placement",
            "services.placement",
            ports.placement,
            {
                "STRATA_PLACEMENT_BIND": ports.placement,
                "STRATA_PLACEMENT_PROMETHEUS_BIND": ports.prometheus("placement"),
                "STRATA_METRICS_ADDR": ports.metrics,
                "STRATA_SCHEDULER_ADDR": ports.scheduler,
                "STRATA_MODELS": ",".join(models),
            },
        )
    )
    services.append(
        Service(
            "gateway",
            "services.gateway",
            ports.gateway,
            {
                "STRATA_GATEWAY_BIND": ports.gateway,
                "STRATA_GATEWAY_HTTP_BIND": ports.http,
                "STRATA_METRICS_ADDR": ports.metrics,
                "STRATA_SCHEDULER_ADDR": ports.scheduler,
            },
            public=True,
        )
    )
    common = {
        "STRATA_DATA_DIR": data_dir,
        "STRATA_OTLP_ENDPOINT": ports.otlp,
        "PYTHONUNBUFFERED": "1",
        **security_settings(data_dir).env(),
    }
    for s in services:
        s.env = {**common, **s.env}
    return services


def security_settings(data_dir: str) -> SecuritySettings:
    return SecuritySettings(secrets_dir=os.path.join(data_dir, "secrets"))


def say(message: str) -> None:
    print(f"strata: {message}", file=sys.stderr, flush=True)


async def wait_healthy(
    address: str, timeout_s: float, proc: asyncio.subprocess.Process, public: bool = False
) -> None:
    deadline = time.monotonic() + timeout_s
    async with public_channel(address) if public else channel(address) as ch:
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


async def wait_models(scheduler: str, models: list[str], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    async with channel(scheduler) as ch:
        stub = scheduler_pb2_grpc.SchedulerStub(ch)
        while True:
            try:
                resp = await stub.ListModels(common_pb2.ListModelsRequest(), timeout=2.0)
                if set(models) <= {m.name for m in resp.models}:
                    return
            except grpc.aio.AioRpcError:
                pass  # restarting: the keeper brings it back
            if time.monotonic() > deadline:
                raise RuntimeError(f"models {models} not served after {timeout_s:.0f}s")
            await asyncio.sleep(0.5)


class Supervisor:
    """Starts the planned services in order and keeps each one running."""

    def __init__(self, services: list[Service], policy: RestartPolicy | None = None):
        self.services = services
        self.policy = policy or RestartPolicy(time.monotonic)
        self.fatal = asyncio.Event()  # a crash loop, or a restart that never came up
        self.stopping = False
        self._keepers: list[asyncio.Task[None]] = []

    async def _spawn(self, s: Service) -> asyncio.subprocess.Process:
        """Start s's process, record it as s.proc, and return it."""
        s.proc = proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            s.module,
            cwd=str(REPO_ROOT),
            env=child_env({**os.environ, **s.env}, signal.SIGTERM),
            start_new_session=True,
        )  # Ctrl-C reaches only us; we stop them in order
        s.started_at = time.monotonic()
        return proc

    async def start_all(self) -> None:
        """Start every service in order, each healthy before the next; RuntimeError naming the
        one that failed."""
        for s in self.services:
            remove_segment(s)
            proc = await self._spawn(s)
            try:
                await wait_healthy(s.address, START_TIMEOUT_S, proc, s.public)
            except RuntimeError as err:
                raise RuntimeError(f"{s.name} failed to start: {err}") from None
            self._keepers.append(asyncio.create_task(self._keep(s, proc), name=f"keep-{s.name}"))

    async def _keep(self, s: Service, proc: asyncio.subprocess.Process) -> None:
        """Restart s whenever proc, its current process, exits, until the stack stops."""
        while True:
            code = await proc.wait()
            if self.stopping:
                return
            ran = time.monotonic() - s.started_at
            delay = self.policy.after_exit(s.name, ran)
            if delay is None:
                say(
                    f"{s.name} exited with code {code}; it crashed "
                    f"{self.policy.max_restarts + 1} times within "
                    f"{self.policy.window_s:.0f} s: stopping the stack"
                )
                self.fatal.set()
                return
            say(
                f"{s.name} exited with code {code} after {ran:.1f} s; restarting it in "
                f"{delay:.1f} s (restart {self.policy.restarts(s.name)} in the last "
                f"{self.policy.window_s:.0f} s)"
            )
            await asyncio.sleep(delay)
            if self.stopping:
                return
            proc = await self._spawn(s)
            try:
                await wait_healthy(s.address, START_TIMEOUT_S, proc, s.public)
                say(f"{s.name} is serving again (pid {proc.pid})")
            except RuntimeError as err:
                say(f"{s.name} did not come back: {err}")
                if proc.returncode is None:
                    proc.kill()

    async def shutdown(self, grace_s: float = 15.0) -> None:
        self.stopping = True
        for t in self._keepers:
            t.cancel()
        for s in reversed(self.services):
            if s.proc is not None and s.proc.returncode is None:
                s.proc.send_signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(s.proc.wait(), grace_s)
                except TimeoutError:
                    s.proc.kill()
                    await s.proc.wait()
            remove_segment(s)


def remove_segment(s: Service) -> None:
    """A KV tier store killed before it could clean up leaves its segment in /dev/shm: remove it
    (a new store makes its own)."""
    if s.shm_path is not None:
        s.shm_path.unlink(missing_ok=True)


async def supervise(
    nodes: int,
    models: list[str],
    data_dir: str,
    ready_timeout_s: float,
    then: str | None = None,
    ports: Ports = Ports(),
) -> int:
    """Run the stack until Ctrl-C, a crash loop, or (when given) the `then` command ends;
    returns the exit code (the command's own, when it ran)."""
    # The supervisor's own health checks are internal calls too.
    install(security_settings(data_dir).identity("operator"))
    supervisor = Supervisor(plan_services(nodes, models, data_dir, ports))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    code = 0
    try:
        starting = asyncio.create_task(_start(supervisor, ports, models, ready_timeout_s))
        stopped = asyncio.create_task(stop.wait())
        await asyncio.wait([starting, stopped], return_when=asyncio.FIRST_COMPLETED)
        if not starting.done():  # Ctrl-C while starting
            starting.cancel()
            await asyncio.gather(starting, return_exceptions=True)
            return 130
        stopped.cancel()
        await starting  # its RuntimeError, if it failed
        key_file = Path(data_dir) / defaults.DEMO_KEY_FILE
        key = key_file.read_text().strip() if key_file.exists() else "(none)"
        print(
            f"strata ready: gateway {ports.gateway}, OpenAI API http://{ports.http}/v1, "
            f"models {', '.join(models)}, demo API key {key} (Ctrl-C stops)",
            flush=True,
        )
        waiting: list[asyncio.Task[object]] = [
            asyncio.create_task(stop.wait()),
            asyncio.create_task(supervisor.fatal.wait()),
        ]
        command = None
        if then:
            env = {**os.environ, "STRATA_DATA_DIR": data_dir}
            command = await asyncio.create_subprocess_shell(then, cwd=str(REPO_ROOT), env=env)
            waiting.append(asyncio.create_task(command.wait()))
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        if command is not None and command.returncode is not None:
            code = command.returncode
        elif supervisor.fatal.is_set():
            code = 1
        if command is not None and command.returncode is None:
            command.terminate()
            await command.wait()
        for t in waiting:
            t.cancel()
    except RuntimeError as err:
        say(str(err))
        code = 1
    finally:
        await supervisor.shutdown()
    return code


async def _start(
    supervisor: Supervisor, ports: Ports, models: list[str], ready_timeout_s: float
) -> None:
    await supervisor.start_all()
    await wait_models(ports.scheduler, models, ready_timeout_s)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="strata-run", description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1, help="node managers to start (default 1)")
    ap.add_argument(
        "--models",
        default=defaults.DEFAULT_MODEL,
        help="comma-separated models to place (default %(default)s)",
    )
    ap.add_argument(
        "--data-dir", default=os.environ.get("STRATA_DATA_DIR", str(REPO_ROOT / ".strata"))
    )
    ap.add_argument(
        "--port-base",
        type=int,
        default=Ports().base,
        help="the gateway's port; the other services take the next ones (default %(default)s)",
    )
    ap.add_argument("--ready-timeout", type=float, default=600.0)
    ap.add_argument(
        "--then",
        help="a shell command to run once the stack is ready; the stack "
        "stops when it ends and its exit code is ours",
    )
    args = ap.parse_args(argv)
    if args.nodes < 1:
        ap.error(f"--nodes must be at least 1, got {args.nodes}")
    if not 1024 <= args.port_base <= 65535 - 200:
        ap.error(f"--port-base must leave 200 ports below 65536, got {args.port_base}")
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    os.makedirs(args.data_dir, exist_ok=True)
    return asyncio.run(
        supervise(
            args.nodes,
            models,
            os.path.abspath(args.data_dir),
            args.ready_timeout,
            args.then,
            Ports(base=args.port_base),
        )
    )


if __name__ == "__main__":
    sys.exit(main())
