"""One decode worker as a child process: start, wait until it serves, stop.

The worker is `python -m services.worker`, configured by one serialized configuration in
STRATA_WORKER_CONFIG (JSON of its settings, services.worker.config): the node manager's own
STRATA_* variables are not passed on, so a worker runs exactly what its node decided. It dies
with the node manager
(SIGKILL, strata.core.lifeline), and while it runs its pid is on record (`WorkerPids`) for a
node manager started after this one to reap.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from strata.core.lifeline import child_env
from strata.node.worker_pids import WorkerPids
from strata.rpc.server import channel

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[3]
WORKER_CONFIG_ENV = "STRATA_WORKER_CONFIG"


class WorkerStartError(RuntimeError):
    """The worker process exited or did not become healthy in time."""


class WorkerProcess:
    def __init__(
        self,
        replica_id: str,
        address: str,
        settings: dict[str, object],
        pids: WorkerPids | None = None,
    ):
        self.replica_id = replica_id
        self.address = address
        self.settings = settings
        self.pids = pids
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self, ready_timeout_s: float) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("STRATA_")}
        env[WORKER_CONFIG_ENV] = json.dumps(self.settings, default=str)
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "services.worker",
            cwd=str(REPO_ROOT),
            env=child_env(env, signal.SIGKILL),
            start_new_session=True,
        )  # a terminal Ctrl-C must not bypass the node manager
        if self.pids is not None:
            self.pids.record(self.proc.pid, self.replica_id)
        log.info("worker %s started (pid %d) on %s", self.replica_id, self.proc.pid, self.address)
        await self._wait_serving(ready_timeout_s)

    async def _wait_serving(self, timeout_s: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        async with channel(self.address) as ch:
            stub = health_pb2_grpc.HealthStub(ch)
            while True:
                if self.proc is not None and self.proc.returncode is not None:
                    raise WorkerStartError(
                        f"worker {self.replica_id} exited with code "
                        f"{self.proc.returncode} while loading"
                    )
                try:
                    resp = await stub.Check(health_pb2.HealthCheckRequest(), timeout=1.0)
                    if resp.status == health_pb2.HealthCheckResponse.SERVING:
                        return
                except grpc.aio.AioRpcError:
                    pass  # not listening yet: the model is still loading
                if loop.time() > deadline:
                    await self.stop()
                    raise WorkerStartError(
                        f"worker {self.replica_id} not serving after {timeout_s:.0f}s"
                    )
                await asyncio.sleep(0.2)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def wait(self) -> int:
        assert self.proc is not None
        code = await self.proc.wait()
        self._forget()
        return code

    def _forget(self) -> None:
        if self.pids is not None and self.proc is not None:
            self.pids.forget(self.proc.pid)

    async def stop(self, grace_s: float = 10.0) -> None:
        if not self.alive:
            return
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(self.proc.wait(), grace_s)
        except TimeoutError:
            log.warning("worker %s ignored SIGTERM for %.0fs; killing it", self.replica_id, grace_s)
            self.proc.kill()
            await self.proc.wait()
        self._forget()
