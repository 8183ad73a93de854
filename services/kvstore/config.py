"""KV tier store settings, read from the environment once at start."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from strata import cpu_priority, defaults
from strata.envconfig import (ConfigError, data_dir, env_bool, env_float, env_int, env_list,
                              env_str, security)
from strata.kvtier import shm_segment
from strata.policy.kv_tiering import POLICIES
from strata.security.settings import UNSECURED, SecuritySettings

SLAB_BYTES = 16 << 20


@dataclass(frozen=True, slots=True)
class KVStoreConfig:
    node_id: str
    bind: str = defaults.KVSTORE_ADDR
    advertise: str = defaults.KVSTORE_ADDR   # how other nodes' stores reach this one
    otlp_endpoint: str = ""
    # STRATA_SCHEDULER_ADDR: the schedulers (comma-separated) block events go to; none: no
    # events (single-node tests)
    scheduler_addrs: tuple[str, ...] = ()
    host_capacity_bytes: int = 1 << 30
    slab_bytes: int = SLAB_BYTES
    shm_dir: str = shm_segment.DEFAULT_DIR
    disk_dir: str = ""
    disk_capacity_bytes: int = 0             # 0: no disk tier
    disk_durable: bool = False               # fsync every block (power-loss safe, ~10 ms each)
    policy: str = "heat"
    high_watermark: float = 0.90
    low_watermark: float = 0.75
    events_interval_s: float = 0.5
    # "idle": the store runs in SCHED_IDLE, on CPU time the node's engines leave unused (for
    # nodes where it shares cores with CPU-bound engines); "normal": the default class.
    cpu_priority: str = "normal"
    security: SecuritySettings = UNSECURED

    @classmethod
    def from_env(cls) -> KVStoreConfig:
        node_id = env_str("STRATA_KVSTORE_NODE_ID", socket.gethostname())
        bind = env_str("STRATA_KVSTORE_BIND", defaults.KVSTORE_ADDR)
        host_bytes = env_int("STRATA_KVSTORE_HOST_BYTES", 1 << 30, minimum=1)
        policy = env_str("STRATA_KVSTORE_POLICY", "heat")
        if policy not in POLICIES:
            raise ConfigError(f"STRATA_KVSTORE_POLICY must be one of {', '.join(POLICIES)}, "
                              f"got {policy!r}")
        shm_dir = env_str("STRATA_KVSTORE_SHM_DIR", shm_segment.DEFAULT_DIR)
        if not shm_segment.usable_dir(shm_dir):
            raise ConfigError(f"STRATA_KVSTORE_SHM_DIR={shm_dir} is not a writable folder; "
                              f"point it at /dev/shm or another tmpfs")
        high = env_float("STRATA_KVSTORE_HIGH_WATERMARK", 0.90)
        low = env_float("STRATA_KVSTORE_LOW_WATERMARK", 0.75)
        if not 0 < low < high <= 1:
            raise ConfigError(f"need 0 < STRATA_KVSTORE_LOW_WATERMARK < "
                              f"STRATA_KVSTORE_HIGH_WATERMARK <= 1, got {low} and {high}")
        cpu = env_str("STRATA_KVSTORE_CPU_PRIORITY", "normal")
        if cpu not in cpu_priority.CLASSES:
            raise ConfigError(f"STRATA_KVSTORE_CPU_PRIORITY must be one of "
                              f"{', '.join(cpu_priority.CLASSES)}, got {cpu!r}")
        return cls(
            node_id=node_id, bind=bind,
            advertise=env_str("STRATA_KVSTORE_ADVERTISE", bind),
            otlp_endpoint=env_str("STRATA_OTLP_ENDPOINT", ""),
            scheduler_addrs=tuple(env_list("STRATA_SCHEDULER_ADDR", "")),
            host_capacity_bytes=host_bytes,
            slab_bytes=min(env_int("STRATA_KVSTORE_SLAB_BYTES", SLAB_BYTES, minimum=4096),
                           host_bytes),
            shm_dir=shm_dir,
            disk_dir=env_str("STRATA_KVSTORE_DISK_DIR",
                             os.path.join(data_dir(), "kv", node_id)),
            disk_capacity_bytes=env_int("STRATA_KVSTORE_DISK_BYTES", 0, minimum=0),
            disk_durable=env_bool("STRATA_KVSTORE_DISK_DURABLE", False),
            policy=policy, high_watermark=high, low_watermark=low,
            events_interval_s=env_float("STRATA_KVSTORE_EVENTS_INTERVAL_S", 0.5),
            cpu_priority=cpu,
            security=security(),
        )
