"""KV tier store settings: flags, STRATA_* variables, defaults (strata.core.settings)."""

from __future__ import annotations

import os
import socket

from pydantic import Field, field_validator, model_validator

from strata.core import defaults
from strata.core.cpu_priority import CpuClass
from strata.core.settings import CommaList
from strata.kvtier import shm_segment
from strata.policy.kv_tiering import TierPolicyName
from strata.security.settings import SecurityFields

PROG = "python -m services.kvstore"
SLAB_BYTES = 16 << 20


class KVStoreConfig(SecurityFields):
    """The KV tier store of one node: host DRAM in shared memory, disk below, one directory,
    migrations, crash recovery, block events to the schedulers, peer pulls. --print-config
    prints the resolved settings and exits."""

    kvstore_node_id: str = Field(
        default_factory=socket.gethostname,
        description="the node manager's STRATA_NODE_ID (default: the host name)",
    )
    kvstore_bind: str = Field(defaults.KVSTORE_ADDR, description="host:port to listen on")
    kvstore_prometheus_bind: str = Field(
        "",
        description="host:port of the Prometheus /metrics endpoint (empty: none; compose and "
        f"make run use {defaults.KVSTORE_PROMETHEUS_ADDR.rsplit(':', 1)[1]})",
    )
    kvstore_advertise: str = Field(
        "", description="how other nodes' stores reach this one (empty: the bind address)"
    )
    otlp_endpoint: str = Field(
        "", description="OTLP/gRPC receiver for this service's spans; empty: none"
    )
    scheduler_addr: CommaList = Field(
        (), description="the schedulers block events go to (comma-separated); empty: no events"
    )
    kvstore_events_interval_s: float = Field(
        0.5, gt=0, description="how often block events are reported"
    )
    kvstore_host_bytes: int = Field(1 << 30, ge=1, description="host tier: bytes of shared memory")
    kvstore_slab_bytes: int = Field(
        SLAB_BYTES, ge=4096, description="the host tier's slab size (at most the host bytes)"
    )
    kvstore_shm_dir: str = Field(
        shm_segment.DEFAULT_DIR, description="a tmpfs folder the node's workers share (/dev/shm)"
    )
    kvstore_disk_dir: str = Field(
        "", description="disk tier folder (empty: <data dir>/kv/<node id>)"
    )
    kvstore_disk_bytes: int = Field(0, ge=0, description="disk tier bytes (0: no disk tier)")
    kvstore_disk_durable: bool = Field(
        False,
        description="fsync every block written to disk (survives power loss; ~10x slower writes)",
    )
    kvstore_policy: TierPolicyName = Field(
        TierPolicyName.HEAT,
        description="which host blocks go down first: heat (decayed frequency) | lru",
    )
    kvstore_high_watermark: float = Field(
        0.90, gt=0, le=1, description="host use that starts demotions to disk"
    )
    kvstore_low_watermark: float = Field(
        0.75, gt=0, le=1, description="demotions stop at this host use"
    )
    kvstore_cpu_priority: CpuClass = Field(
        CpuClass.NORMAL, description="normal | idle (SCHED_IDLE: CPU time the engines leave unused)"
    )

    @field_validator("kvstore_shm_dir")
    @classmethod
    def _shm(cls, directory: str) -> str:
        if not shm_segment.usable_dir(directory):
            raise ValueError(
                f"STRATA_KVSTORE_SHM_DIR={directory} is not a writable folder; "
                f"point it at /dev/shm or another tmpfs"
            )
        return directory

    @model_validator(mode="after")
    def _watermarks(self) -> KVStoreConfig:
        if not self.kvstore_low_watermark < self.kvstore_high_watermark:
            raise ValueError(
                f"need STRATA_KVSTORE_LOW_WATERMARK < STRATA_KVSTORE_HIGH_WATERMARK,"
                f" got {self.kvstore_low_watermark} and "
                f"{self.kvstore_high_watermark}"
            )
        return self

    @property
    def advertise(self) -> str:
        return self.kvstore_advertise or self.kvstore_bind

    @property
    def slab_bytes(self) -> int:
        return min(self.kvstore_slab_bytes, self.kvstore_host_bytes)

    @property
    def disk_dir(self) -> str:
        return self.kvstore_disk_dir or os.path.join(
            self.resolved_data_dir(), "kv", self.kvstore_node_id
        )
