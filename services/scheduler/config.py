"""Scheduler settings, read from the environment once at start."""

from __future__ import annotations

from dataclasses import dataclass

from strata import defaults
from strata.envconfig import ConfigError, env_float, env_int, env_str


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    bind: str = defaults.SCHEDULER_ADDR
    otlp_endpoint: str = ""
    node_ttl_s: float = defaults.NODE_TTL_S
    heartbeat_interval_s: float = defaults.HEARTBEAT_INTERVAL_S
    block_size: int = 16          # the workers' KV block size: cached blocks -> tokens

    def __post_init__(self) -> None:
        if self.heartbeat_interval_s <= 0:
            raise ConfigError(f"STRATA_HEARTBEAT_INTERVAL_S must be positive, got "
                              f"{self.heartbeat_interval_s}")
        # A TTL at or below the interval would drop healthy nodes between two heartbeats.
        if self.node_ttl_s <= self.heartbeat_interval_s:
            raise ConfigError(f"STRATA_NODE_TTL_S ({self.node_ttl_s}) must exceed "
                              f"STRATA_HEARTBEAT_INTERVAL_S ({self.heartbeat_interval_s})")

    @classmethod
    def from_env(cls) -> SchedulerConfig:
        return cls(
            bind=env_str("STRATA_SCHEDULER_BIND", defaults.SCHEDULER_ADDR),
            otlp_endpoint=env_str("STRATA_OTLP_ENDPOINT", ""),
            node_ttl_s=env_float("STRATA_NODE_TTL_S", defaults.NODE_TTL_S),
            heartbeat_interval_s=env_float("STRATA_HEARTBEAT_INTERVAL_S",
                                           defaults.HEARTBEAT_INTERVAL_S),
            block_size=env_int("STRATA_BLOCK_SIZE", 16, minimum=1),
        )
