"""The compose stack as local processes: the same commands and environment as docker-compose.yml.
The benchmarks that run the real stack start it from here, and so do the integration tests.

Each strata service of the compose file is started with its `command` and `environment`, with
four rewrites a single machine needs: every `host:port` of another service becomes a free
loopback port, the OpenTelemetry Collector's address becomes the metrics service's OTLP receiver
(no collector runs here, and it would only forward), and PostgreSQL becomes the URL the caller
passes (SQLite or a local PostgreSQL), and folders on the /data and /secrets volumes move under
the caller's data folder. One-shot jobs (the `secrets` job: no listening address) run to
completion first, as compose's service_completed_successfully orders them. Overrides (a dummy
model, small KV pools) come last.

`replicas` runs more than one process of a service, as `docker compose up --scale` or a
Kubernetes Deployment would: `name-2`, `name-3`, ... with ports of their own, started right
after the first; every comma-list setting of the other services that names the first (the
schedulers a node heartbeats to, a gateway routes through) names them all.

The stack runs with the cluster's credential, as compose does: `identity` is the operator's, for
the caller's own calls to internal services. Ports come from benchmarks.common.ports.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc

from benchmarks.common.ports import free_port
from strata.core.lifeline import child_env
from strata.rpc.channels import public_sync_channel, sync_channel
from strata.security.identity import ClusterIdentity
from strata.security.settings import SecuritySettings

ROOT = Path(__file__).resolve().parents[2]
INFRA = {"postgres", "jaeger", "otel-collector", "prometheus", "grafana"}


@dataclass
class StackProcess:
    name: str
    command: list[str]
    env: dict[str, str]
    address: str
    proc: subprocess.Popen | None = None
    log_path: Path | None = None
    public: bool = False  # the gateway's port: no cluster credential


@dataclass
class ComposeStack:
    data_dir: Path
    db_url: str
    overrides: dict[str, dict[str, str]] = field(default_factory=dict)
    replicas: dict[str, int] = field(default_factory=dict)  # service -> processes (default 1)
    processes: dict[str, StackProcess] = field(default_factory=dict)

    @property
    def identity(self) -> ClusterIdentity:
        return operator_identity(self.data_dir)

    def _local(self, value: str) -> str:
        """A path on a compose volume, moved under the data folder: /data/x to
        <data>/x, /secrets to <data>/secrets."""
        if value == "/data" or value.startswith("/data/"):
            return str(self.data_dir / value[len("/data") :].lstrip("/"))
        if value == "/secrets" or value.startswith("/secrets/"):
            return str(self.data_dir / value.lstrip("/"))
        return value

    def run_jobs(self) -> None:
        """Compose's one-shot services (no environment, no listening address), to completion."""
        compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
        for name, svc in compose.items():
            if name in INFRA or svc.get("environment"):
                continue
            command = [self._local(a) for a in svc["command"]]
            done = subprocess.run(
                [sys.executable, *command[1:]],
                cwd=ROOT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
                capture_output=True,
                text=True,
                timeout=300,
            )
            if done.returncode != 0:
                raise RuntimeError(
                    f"compose job {name} failed ({done.returncode}):\n{done.stdout}{done.stderr}"
                )

    def plan(self) -> list[StackProcess]:
        compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
        compose = {n: s for n, s in compose.items() if s.get("environment") or n in INFRA}
        ports: dict[str, int] = {}  # "service:port" -> loopback port
        for name, svc in compose.items():
            if name in INFRA:
                continue
            for key, value in svc["environment"].items():
                if key.endswith("_BIND") and str(value).startswith("0.0.0.0:"):
                    ports[f"{name}:{value.split(':')[1]}"] = free_port()
        otlp = next(p for k, p in ports.items() if k == "metrics:50057")

        def rewrite(value: str) -> str:
            value = re.sub(r"\botel-collector:4317\b", f"127.0.0.1:{otlp}", value)
            return re.sub(
                r"\b([a-z-]+):(\d+)\b",
                lambda m: f"127.0.0.1:{ports[m.group(0)]}" if m.group(0) in ports else m.group(0),
                value,
            )

        order = _topological([n for n in compose if n not in INFRA], compose)
        planned = []
        for name in order:
            svc = compose[name]
            env = {}
            for key, value in svc["environment"].items():
                value = str(value)
                if key.endswith("_BIND"):
                    port = ports[name + ":" + value.split(":")[1]]
                    value = f"127.0.0.1:{port}"
                elif key == "STRATA_DB_URL":
                    value = self.db_url
                elif key == "STRATA_DATA_DIR":
                    value = str(self.data_dir)
                elif value.startswith(("/data/", "/secrets")):  # on a compose volume
                    value = self._local(value)
                else:
                    value = rewrite(value)
                env[key] = value
            env.update(self.overrides.get(name, {}))
            bind = next(
                v for k, v in env.items() if k.endswith("_BIND") and k != "STRATA_OTLP_BIND"
            )
            planned.append(
                StackProcess(name, list(svc["command"]), env, bind, public=name == "gateway")
            )
        return self._scaled(planned)

    def _scaled(self, planned: list[StackProcess]) -> list[StackProcess]:
        """`planned` with each service's extra replicas after its first (module docstring)."""
        out: list[StackProcess] = []
        more: dict[str, list[str]] = {}  # the first's address -> the replicas' addresses
        for p in planned:
            out.append(p)
            for i in range(2, self.replicas.get(p.name, 1) + 1):
                env = dict(p.env)
                for key, value in env.items():
                    if key.endswith("_BIND") and value.startswith("127.0.0.1:"):
                        env[key] = f"127.0.0.1:{free_port()}"
                bind = next(v for k, v in env.items() if k == _bind_key(p))
                out.append(StackProcess(f"{p.name}-{i}", p.command, env, bind, public=p.public))
                more.setdefault(p.address, []).append(bind)
        for p in out:
            for key, value in p.env.items():
                if key.endswith("_ADDR") and value in more:
                    p.env[key] = ",".join([value, *more[value]])
        return out

    def start(self, timeout_s: float = 240.0) -> None:
        self.run_jobs()
        for p in self.plan():
            p.log_path = self.data_dir / f"{p.name}.log"
            log = open(p.log_path, "w")
            p.proc = subprocess.Popen(
                [sys.executable if p.command[0] == "python" else p.command[0], *p.command[1:]],
                cwd=ROOT,
                env=child_env({**os.environ, "PYTHONUNBUFFERED": "1", **p.env}),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            self.processes[p.name] = p
            wait_serving(p, timeout_s, None if p.public else self.identity)

    def stop(self) -> None:
        for p in reversed(list(self.processes.values())):
            if p.proc is not None and p.proc.poll() is None:
                p.proc.send_signal(signal.SIGTERM)
                try:
                    p.proc.wait(30)
                except subprocess.TimeoutExpired:
                    p.proc.kill()
                    p.proc.wait()

    def addr(self, name: str) -> str:
        return self.processes[name].address

    def http_url(self, gateway: str = "gateway") -> str:
        """A gateway's HTTP front (the OpenAI API, /metrics), as a base URL."""
        return f"http://{self.processes[gateway].env['STRATA_GATEWAY_HTTP_BIND']}"

    def logs(self) -> str:
        return "\n".join(
            f"==== {p.name}\n{p.log_path.read_text()[-3000:]}"
            for p in self.processes.values()
            if p.log_path
        )


def _bind_key(p: StackProcess) -> str:
    """The setting holding `p`'s own (gRPC) listening address."""
    return next(k for k, v in p.env.items() if k.endswith("_BIND") and v == p.address)


def operator_identity(data_dir: Path) -> ClusterIdentity:
    """The operator's credential for the cluster whose secrets are in <data_dir>/secrets (as a
    service started with STRATA_DATA_DIR=data_dir keeps them), written first if missing."""
    return SecuritySettings(str(Path(data_dir) / "secrets")).identity("operator")


def wait_serving(
    p: StackProcess, timeout_s: float, identity: ClusterIdentity | None = None
) -> None:
    """Wait until p's health service answers SERVING: over the cluster credential when given
    (an internal service), else in plaintext (the gateway's public port)."""
    deadline = time.monotonic() + timeout_s
    with (
        sync_channel(p.address, identity)
        if identity is not None
        else public_sync_channel(p.address)
    ) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        while time.monotonic() < deadline:
            if p.proc.poll() is not None:
                raise RuntimeError(
                    f"{p.name} exited with {p.proc.returncode}:\n{p.log_path.read_text()[-3000:]}"
                )
            try:
                if (
                    stub.Check(health_pb2.HealthCheckRequest(), timeout=1).status
                    == health_pb2.HealthCheckResponse.SERVING
                ):
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.2)
    raise RuntimeError(f"{p.name} not serving on {p.address} after {timeout_s}s")


def _topological(names: list[str], compose: dict) -> list[str]:
    done: list[str] = []

    def visit(n: str) -> None:
        if n in done or n in INFRA or n not in compose:  # not in compose: a one-shot job
            return
        for dep in compose[n].get("depends_on", {}):
            visit(dep)
        done.append(n)

    for n in names:
        visit(n)
    return done
