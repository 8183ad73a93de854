"""The stack as `make run` starts it (the supervisor, serving a model) and a closed-loop load
against it: tests/reliability kills services under it, `make soak` runs it for half an hour.

A request's outcome is one of: completed (its last chunk carries a finish reason, and its tokens
are exactly those the prompt gave before any kill), retriable (a status a client retries:
UNAVAILABLE, RESOURCE_EXHAUSTED), or a failure: any other status, a stream that ended without a
finish reason (truncated), or tokens that differ from the reference (duplicated or corrupted).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from benchmarks.common.ports import free_port_base
from benchmarks.common.procs import children, worker_pid
from strata.client.sdk import Client
from strata.core import defaults
from strata.core.lifeline import child_env
from strata.rpc.channels import sync_channel
from strata.security.identity import ClusterIdentity
from strata.supervisor import Ports
from strata.v1 import common_pb2, node_pb2, node_pb2_grpc, scheduler_pb2_grpc

ROOT = Path(__file__).resolve().parents[2]
MODEL = "dummy-tiny"
RETRIABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED}
# Offsets of the supervisor's ports from its base (strata.supervisor.Ports).
OFFSETS = tuple(range(13))  # gateway .. otlp, the HTTP port, the Prometheus ports
READY_LINE = re.compile(r"strata ready: gateway (\S+),")


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


class SupervisedStack:
    """`python -m strata.supervisor` on a free block of ports, in its own data dir."""

    def __init__(self, data_dir: Path, env: dict[str, str] | None = None, model: str = MODEL):
        self.data_dir = data_dir
        self.model = model
        self.base = free_port_base(OFFSETS)
        self.env = env or {}
        self.proc: subprocess.Popen | None = None
        self.gateway = f"127.0.0.1:{self.base}"
        self.node = f"127.0.0.1:{self.base + 2}"
        self.http_url = f"http://{Ports(self.base, '127.0.0.1').http}"  # the OpenAI API's base
        self.log_path = data_dir / "supervisor.log"

    def start(self, timeout_s: float = 300.0) -> None:
        env = child_env({**os.environ, "PYTHONUNBUFFERED": "1", **self.env})
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "strata.supervisor",
                "--models",
                self.model,
                "--data-dir",
                str(self.data_dir),
                "--port-base",
                str(self.base),
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=open(self.log_path, "w"),
            text=True,
            start_new_session=True,
        )
        ready = threading.Event()

        def watch() -> None:
            for line in self.proc.stdout:
                if READY_LINE.search(line):
                    ready.set()

        threading.Thread(target=watch, daemon=True).start()
        deadline = time.monotonic() + timeout_s
        while not ready.wait(0.5):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the stack did not become ready:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text()[-6000:]

    @property
    def identity(self) -> ClusterIdentity:
        return ClusterIdentity.load(str(self.data_dir / "secrets"), "operator")

    @property
    def key(self) -> str:
        return (self.data_dir / defaults.DEMO_KEY_FILE).read_text().strip()

    def service_pid(self, name: str) -> int:
        """The pid of `services.<name>` (the first node manager or KV store for node, kvstore)."""
        for pid in children(self.proc.pid):
            if f"-m services.{name}" in cmdline(pid):
                return pid
        raise AssertionError(f"no {name} process under the supervisor:\n{self.log()}")

    def descendants(self) -> list[int]:
        out, todo = [], [self.proc.pid]
        while todo:
            for c in children(todo.pop()):
                out.append(c)
                todo.append(c)
        return out

    def node_status(self) -> common_pb2.NodeInfo:
        with sync_channel(self.node, self.identity) as ch:
            return node_pb2_grpc.NodeManagerStub(ch).GetNodeStatus(
                node_pb2.GetNodeStatusRequest(), timeout=10
            )

    def serving_worker_pid(self) -> int:
        """The pid of the READY worker of the first node (not its standby)."""
        [ready] = [
            r
            for r in self.node_status().replicas
            if r.model == self.model and r.state == common_pb2.REPLICA_STATE_READY
        ]
        return worker_pid(self.service_pid("node"), ready.worker_address)

    def scheduler_models(self) -> set[str]:
        with sync_channel(f"127.0.0.1:{self.base + 1}", self.identity) as ch:
            reply = scheduler_pb2_grpc.SchedulerStub(ch).ListModels(
                common_pb2.ListModelsRequest(), timeout=10
            )
        return {m.name for m in reply.models}

    def all_serving(self) -> bool:
        """Every service answers its health check (internal ones over the credential)."""
        for offset in (1, 2, 3, 4, 5):
            with sync_channel(f"127.0.0.1:{self.base + offset}", self.identity) as ch:
                reply = health_pb2_grpc.HealthStub(ch).Check(
                    health_pb2.HealthCheckRequest(), timeout=5
                )
            if reply.status != health_pb2.HealthCheckResponse.SERVING:
                return False
        return True

    def wait_whole(self, timeout_s: float = 240.0) -> None:
        """Until every service serves, the model is READY with a warm standby beside it, the
        scheduler routes it (it has heard from the node), and a request succeeds."""
        deadline = time.monotonic() + timeout_s
        last = ""
        while time.monotonic() < deadline:
            try:
                if not self.all_serving():
                    last = "a service is not serving"
                    time.sleep(0.5)
                    continue
                info = self.node_status()
                states = [r.state for r in info.replicas if r.model == self.model]
                if (
                    common_pb2.REPLICA_STATE_READY in states
                    and info.standby_workers >= 1
                    and self.model in self.scheduler_models()
                ):
                    with Client(self.gateway, self.key) as client:
                        list(client.generate(self.model, prompt="ping", max_tokens=2, timeout=30))
                    return
                last = f"replica states {states}, {info.standby_workers} warm standbys"
            except grpc.RpcError as err:
                last = f"{err.code().name}: {err.details()}"
            time.sleep(0.5)
        raise AssertionError(f"the stack did not come back whole ({last}):\n{self.log()}")

    def stop(self, timeout_s: float = 120.0) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


@dataclass(slots=True)
class Outcome:
    prompt: int
    sent_at: float
    ended_at: float
    tokens: list[int]
    finished: bool
    code: grpc.StatusCode | None = None
    details: str = ""


@dataclass
class Load:
    """`clients` threads, each sending the prompts in turn, greedy, until stopped."""

    stack: SupervisedStack
    prompts: list[str]
    clients: int = 3
    max_tokens: int = 16
    outcomes: list[Outcome] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def one(self, i: int) -> Outcome:
        sent = time.monotonic()
        tokens: list[int] = []
        finished = False
        try:
            with Client(self.stack.gateway, self.stack.key) as client:
                for chunk in client.generate(
                    self.stack.model,
                    prompt=self.prompts[i],
                    max_tokens=self.max_tokens,
                    ignore_eos=True,
                    timeout=120,
                ):
                    tokens.extend(chunk.token_ids)
                    finished = finished or bool(chunk.finish_reason)
        except grpc.RpcError as err:
            return Outcome(
                i, sent, time.monotonic(), tokens, False, err.code(), err.details() or ""
            )
        return Outcome(i, sent, time.monotonic(), tokens, finished)

    def _run(self, k: int) -> None:
        i = k
        while not self._stop.is_set():
            out = self.one(i % len(self.prompts))
            with self._lock:
                self.outcomes.append(out)
            i += 1
            if out.code is not None:
                time.sleep(0.2)  # a refused client backs off a little, as SDK users do

    def start(self) -> None:
        self._threads = [
            threading.Thread(target=self._run, args=(k,), daemon=True) for k in range(self.clients)
        ]
        for t in self._threads:
            t.start()

    def stop(self) -> list[Outcome]:
        self._stop.set()
        for t in self._threads:
            t.join(180)
        return list(self.outcomes)


def judge(outcomes: list[Outcome], reference: list[list[int]]) -> tuple[list, list]:
    """(failures, retriable): failures are described; retriable are the outcomes themselves."""
    failures, retriable = [], []
    for o in outcomes:
        if o.code is None:
            if not o.finished:
                failures.append(("truncated: the stream ended without a finish reason", o))
            elif o.tokens != reference[o.prompt]:
                failures.append(("tokens differ from the reference", o))
        elif o.code in RETRIABLE:
            retriable.append(o)
        else:
            failures.append((f"{o.code.name}: {o.details}", o))
    return failures, retriable


def first_success_after(outcomes: list[Outcome], t: float) -> float | None:
    """Seconds from t to the end of the first request sent after t that completed."""
    done = [o.ended_at for o in outcomes if o.sent_at >= t and o.code is None and o.finished]
    return min(done) - t if done else None
