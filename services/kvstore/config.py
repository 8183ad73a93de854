"""KV tier store settings, read from the environment once at start."""

from __future__ import annotations

from dataclasses import dataclass

from strata import defaults
from strata.envconfig import env_int, env_str


@dataclass(frozen=True, slots=True)
class KVStoreConfig:
    bind: str = defaults.KVSTORE_ADDR
    otlp_endpoint: str = ""
    host_capacity_bytes: int = 1 << 30

    @classmethod
    def from_env(cls) -> KVStoreConfig:
        return cls(
            bind=env_str("STRATA_KVSTORE_BIND", defaults.KVSTORE_ADDR),
            otlp_endpoint=env_str("STRATA_OTLP_ENDPOINT", ""),
            host_capacity_bytes=env_int("STRATA_KVSTORE_HOST_BYTES", 1 << 30, minimum=1),
        )
