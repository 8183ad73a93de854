"""A real KV tier store for the benchmark: `python -m services.kvstore` on a free local port, its
disk tier in a fresh folder, its output in a log file; its own per-tier figures via GetStats.

The store gets one thread for any numeric library it loads, so that it takes as little as it
can from the engine on a small machine. Its shared-memory segment goes into a private folder
under /dev/shm that stop() removes, so a store that dies early leaves no segment behind.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from benchmarks.common.ports import free_port
from strata.rpc.channels import sync_channel
from strata.security.settings import SecuritySettings
from strata.v1 import kvstore_pb2, kvstore_pb2_grpc

SERVICE = kvstore_pb2.DESCRIPTOR.services_by_name["KVStore"].full_name
SHM_ROOT = "/dev/shm"
READY_TIMEOUT_S = 60.0
STOP_GRACE_S = 10.0


@dataclass(slots=True, frozen=True)
class TierFigures:
    tier: str
    blocks: int
    bytes_used: int
    bytes_capacity: int
    hits: int
    evictions: int
    migrations_in: int


@dataclass(slots=True, frozen=True)
class StoreFigures:
    """KVStats as the store reported it (fields a store does not fill read as 0)."""

    blocks: int
    bytes_used: int
    bytes_capacity: int
    hits: int
    misses: int
    evictions: int
    checksum_failures: int
    reserve_refused: int
    tiers: tuple[TierFigures, ...] = field(default_factory=tuple)

    @classmethod
    def from_pb(cls, s: kvstore_pb2.KVStats) -> StoreFigures:
        return cls(
            blocks=s.blocks,
            bytes_used=s.bytes_used,
            bytes_capacity=s.bytes_capacity,
            hits=s.hits,
            misses=s.misses,
            evictions=s.evictions,
            checksum_failures=s.checksum_failures,
            reserve_refused=s.reserve_refused,
            tiers=tuple(
                TierFigures(
                    t.tier,
                    t.blocks,
                    t.bytes_used,
                    t.bytes_capacity,
                    t.hits,
                    t.evictions,
                    t.migrations_in,
                )
                for t in s.tiers
            ),
        )

    def tier(self, name: str) -> TierFigures | None:
        return next((t for t in self.tiers if t.tier == name), None)


class StoreProcess:
    """Start with `start()`, stop with `stop()`; `address` is what a TierClient dials, with
    `identity` (the store runs with a cluster credential of its own, as deployed)."""

    def __init__(
        self,
        host_bytes: int,
        disk_bytes: int,
        disk_dir: str,
        log_path: str,
        slab_bytes: int = 0,
        node_id: str = "bench-kv",
        cpu_priority: str = "normal",
    ):
        self.address = f"127.0.0.1:{free_port()}"
        self.env = {
            **os.environ,
            "STRATA_KVSTORE_BIND": self.address,
            "STRATA_KVSTORE_HOST_BYTES": str(host_bytes),
            "STRATA_KVSTORE_DISK_BYTES": str(disk_bytes),
            "STRATA_KVSTORE_DISK_DIR": disk_dir,
            "STRATA_KVSTORE_NODE_ID": node_id,
            # alone: no spans, no block events to a scheduler
            "STRATA_OTLP_ENDPOINT": "",
            "STRATA_SCHEDULER_ADDR": "",
            "STRATA_KVSTORE_CPU_PRIORITY": cpu_priority,
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "PYTHONUNBUFFERED": "1",
        }
        if slab_bytes:
            self.env["STRATA_KVSTORE_SLAB_BYTES"] = str(slab_bytes)
        self.secrets_dir = tempfile.mkdtemp(prefix="strata-bench-kv-secrets-")
        self.env["STRATA_SECRETS_DIR"] = self.secrets_dir
        self.identity = SecuritySettings(self.secrets_dir).identity("operator")
        self.shm_dir = ""
        if os.path.isdir(SHM_ROOT) and os.access(SHM_ROOT, os.W_OK):
            self.shm_dir = tempfile.mkdtemp(prefix="strata-bench-kv-", dir=SHM_ROOT)
            self.env["STRATA_KVSTORE_SHM_DIR"] = self.shm_dir
        self.log_path = log_path
        self._proc: subprocess.Popen | None = None
        self._log = None

    def start(self) -> None:
        self._log = open(self.log_path, "w", encoding="utf-8")
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "services.kvstore"],
            env=self.env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + READY_TIMEOUT_S
        with sync_channel(self.address, self.identity) as ch:
            stub = health_pb2_grpc.HealthStub(ch)
            while True:
                if self._proc.poll() is not None:
                    raise RuntimeError(
                        f"the KV tier store exited with code "
                        f"{self._proc.returncode} before serving; its last "
                        f"line: {self.log_tail()!r} (log: {self.log_path})"
                    )
                try:
                    if (
                        stub.Check(
                            health_pb2.HealthCheckRequest(service=SERVICE), timeout=1.0
                        ).status
                        == health_pb2.HealthCheckResponse.SERVING
                    ):
                        return
                except grpc.RpcError:
                    pass  # not listening yet: keep polling until the deadline
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(
                        f"the KV tier store did not serve on {self.address} "
                        f"within {READY_TIMEOUT_S:.0f} s (log: {self.log_path})"
                    )
                time.sleep(0.2)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def stats(self) -> StoreFigures:
        with sync_channel(self.address, self.identity) as ch:
            stub = kvstore_pb2_grpc.KVStoreStub(ch)
            return StoreFigures.from_pb(stub.GetStats(kvstore_pb2.KVStatsRequest(), timeout=10))

    def stop(self) -> int | None:
        """SIGTERM, then SIGKILL after a grace period; returns the exit code."""
        shutil.rmtree(self.secrets_dir, ignore_errors=True)
        if self._proc is None:
            if self.shm_dir:
                shutil.rmtree(self.shm_dir, ignore_errors=True)
            return None
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None
        if self.shm_dir:
            shutil.rmtree(self.shm_dir, ignore_errors=True)
        return self._proc.returncode

    def log_tail(self) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                lines = [ln.strip() for ln in f if ln.strip()]
        except OSError:
            return ""
        return lines[-1][:200] if lines else ""
