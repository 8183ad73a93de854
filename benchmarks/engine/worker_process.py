"""The decode worker as the benchmark runs it: `python -m services.worker` in a subprocess,
configured only through its documented environment, started, awaited until it answers GetStats,
and stopped with SIGTERM (the graceful path) when the sweep is over. It runs with the cluster's
credential, as in the stack: its secrets in <data_dir>/secrets, and `identity` (the operator's)
is what a client calls it with.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import grpc

from benchmarks.common.ports import free_port
from benchmarks.common.stack import operator_identity
from strata.rpc.server import channel
from strata.v1 import worker_pb2, worker_pb2_grpc


@dataclass(slots=True, frozen=True)
class WorkerSettings:
    model: str
    dtype: str
    torch_threads: int
    kv_cache_bytes: int = 256 << 20
    max_batched_tokens: int = 2048
    max_seqs: int = 64

    def env(self, bind: str, data_dir: str) -> dict[str, str]:
        return {
            "STRATA_WORKER_BIND": bind,
            "STRATA_DATA_DIR": data_dir,
            "STRATA_SECRETS_DIR": "",
            "STRATA_MODEL": self.model,
            "STRATA_DTYPE": self.dtype,
            "STRATA_TORCH_THREADS": str(self.torch_threads),
            "STRATA_KV_CACHE_BYTES": str(self.kv_cache_bytes),
            "STRATA_MAX_BATCHED_TOKENS": str(self.max_batched_tokens),
            "STRATA_MAX_SEQS": str(self.max_seqs),
            "STRATA_KVSTORE_ADDR": "",
            "STRATA_OTLP_ENDPOINT": "",
        }


class WorkerProcess:
    """`async with WorkerProcess(settings, log_path) as w:` gives a ready worker at w.address."""

    def __init__(
        self,
        settings: WorkerSettings,
        log_path: str,
        data_dir: str,
        start_timeout_s: float = 120.0,
    ):
        self.settings = settings
        self.log_path = log_path
        self.data_dir = data_dir
        self.identity = operator_identity(Path(data_dir))  # writes the secrets when missing
        self.start_timeout_s = start_timeout_s
        self.address = f"127.0.0.1:{free_port()}"
        self.proc: subprocess.Popen | None = None
        self.load_seconds = 0.0

    async def __aenter__(self) -> WorkerProcess:
        env = {**os.environ, **self.settings.env(self.address, self.data_dir)}
        self._log = open(self.log_path, "w", encoding="utf-8")
        started = time.perf_counter()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "services.worker"],
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        try:
            await self._wait_ready()
        except BaseException:
            self._stop()
            raise
        self.load_seconds = time.perf_counter() - started
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._stop()

    async def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        async with channel(self.address, self.identity) as ch:
            stub = worker_pb2_grpc.WorkerStub(ch)
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(
                        f"the worker exited with code {self.proc.returncode} "
                        f"before answering; its log: {self.log_path}"
                    )
                try:
                    await stub.GetStats(worker_pb2.GetStatsRequest(), timeout=1.0)
                    return
                except grpc.aio.AioRpcError:
                    if time.monotonic() > deadline:
                        raise RuntimeError(
                            f"the worker did not answer within "
                            f"{self.start_timeout_s:.0f} s; its log: "
                            f"{self.log_path}"
                        ) from None
                    await asyncio.sleep(0.5)

    def _stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
