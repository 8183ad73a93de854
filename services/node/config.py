"""Node manager settings, read from the environment once at start."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from strata import defaults
from strata.envconfig import env_float, env_int, env_str

# Engine settings the node manager passes through to the workers it starts.
WORKER_PASSTHROUGH = ("STRATA_BLOCK_SIZE", "STRATA_KV_CACHE_BYTES", "STRATA_KV_BLOCKS",
                      "STRATA_MAX_BATCHED_TOKENS", "STRATA_MAX_SEQS", "STRATA_DEVICE",
                      "STRATA_DTYPE")


@dataclass(frozen=True, slots=True)
class NodeConfig:
    node_id: str
    bind: str
    advertise: str               # the address the gateway and planner use to reach this node
    scheduler_addr: str
    kvstore_addr: str
    otlp_endpoint: str
    memory_bytes: int
    device: str
    torch_threads: int
    worker_ready_timeout_s: float
    heartbeat_interval_s: float

    def worker_env(self) -> dict[str, str]:
        env = {k: os.environ[k] for k in WORKER_PASSTHROUGH if os.environ.get(k)}
        env.update({"STRATA_KVSTORE_ADDR": self.kvstore_addr,
                    "STRATA_OTLP_ENDPOINT": self.otlp_endpoint,
                    "STRATA_TORCH_THREADS": str(self.torch_threads),
                    "STRATA_DEVICE": self.device})
        return env

    @classmethod
    def from_env(cls) -> NodeConfig:
        bind = env_str("STRATA_NODE_BIND", defaults.NODE_ADDR)
        return cls(
            node_id=env_str("STRATA_NODE_ID", socket.gethostname()),
            bind=bind,
            advertise=env_str("STRATA_NODE_ADVERTISE", bind),
            scheduler_addr=env_str("STRATA_SCHEDULER_ADDR", defaults.SCHEDULER_ADDR),
            kvstore_addr=env_str("STRATA_KVSTORE_ADDR", defaults.KVSTORE_ADDR),
            otlp_endpoint=env_str("STRATA_OTLP_ENDPOINT", ""),
            memory_bytes=env_int("STRATA_NODE_MEMORY_BYTES", 8 << 30, minimum=1),
            device=env_str("STRATA_DEVICE", "cpu"),
            # Workers get the cores; two torch threads fighting another busy process run 5-40x
            # slower, so leave one core to the rest of the stack.
            torch_threads=env_int("STRATA_TORCH_THREADS", max(1, (os.cpu_count() or 2) - 1),
                                  minimum=1),
            worker_ready_timeout_s=env_float("STRATA_WORKER_READY_TIMEOUT_S", 600.0),
            heartbeat_interval_s=env_float("STRATA_HEARTBEAT_INTERVAL_S",
                                           defaults.HEARTBEAT_INTERVAL_S),
        )
