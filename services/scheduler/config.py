"""Scheduler settings, read from the environment once at start."""

from __future__ import annotations

from dataclasses import dataclass, field

from strata import defaults
from strata.envconfig import ConfigError, env_bool, env_float, env_int, env_str, security
from strata.policy.scheduling.admission import AdmissionSettings
from strata.policy.scheduling.global_scheduler import Mode, SchedulerSettings
from strata.security.settings import UNSECURED, SecuritySettings


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    bind: str = defaults.SCHEDULER_ADDR
    otlp_endpoint: str = ""
    node_ttl_s: float = defaults.NODE_TTL_S
    heartbeat_interval_s: float = defaults.HEARTBEAT_INTERVAL_S
    block_size: int = 16          # the workers' KV block size: cached blocks -> tokens
    mode: str = Mode.TWO_LEVEL.value          # two-level | fcfs | static (the baselines)
    partitions: dict[str, frozenset[str]] = field(default_factory=dict)
    route_sample: int = 64        # replicas scored per decision beyond the prefix holders
    tie_tolerance: float = 0.1    # draw among replicas within 10% of the best estimate
    oversubscription: float = 1.0
    horizon_s: float = 5.0        # the pool admits what it can compute in this long
    sla_check: bool = True
    sla_slack: float = 1.0
    security: SecuritySettings = UNSECURED

    def settings(self) -> SchedulerSettings:
        return SchedulerSettings(
            mode=Mode(self.mode),
            admission=AdmissionSettings(self.oversubscription, self.horizon_s),
            sla_check=self.sla_check, sla_slack=self.sla_slack, partitions=self.partitions)

    def __post_init__(self) -> None:
        if self.mode not in {m.value for m in Mode}:
            raise ConfigError(f"STRATA_SCHEDULER_MODE must be one of "
                              f"{', '.join(m.value for m in Mode)}, got {self.mode!r}")
        if self.mode == Mode.STATIC.value and not self.partitions:
            raise ConfigError("STRATA_SCHEDULER_MODE=static needs STRATA_SCHEDULER_PARTITIONS, "
                              "e.g. 'tenant-a=node-0,node-1;tenant-b=node-2'")
        if self.route_sample < 0 or not 0.0 <= self.tie_tolerance < 1.0:
            raise ConfigError(f"STRATA_ROUTE_SAMPLE must be >= 0 and STRATA_ROUTE_TIE_TOLERANCE "
                              f"in [0, 1), got {self.route_sample}, {self.tie_tolerance}")
        if self.oversubscription < 1.0 or self.sla_slack <= 0 or self.horizon_s <= 0:
            raise ConfigError(f"STRATA_ADMISSION_OVERSUBSCRIPTION must be >= 1, "
                              f"STRATA_ADMISSION_HORIZON_S and STRATA_SLA_SLACK positive, got "
                              f"{self.oversubscription}, {self.horizon_s}, {self.sla_slack}")
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
            mode=env_str("STRATA_SCHEDULER_MODE", Mode.TWO_LEVEL.value),
            partitions=parse_partitions(env_str("STRATA_SCHEDULER_PARTITIONS", "")),
            route_sample=env_int("STRATA_ROUTE_SAMPLE", 64, minimum=0),
            tie_tolerance=env_float("STRATA_ROUTE_TIE_TOLERANCE", 0.1),
            oversubscription=env_float("STRATA_ADMISSION_OVERSUBSCRIPTION", 1.0),
            horizon_s=env_float("STRATA_ADMISSION_HORIZON_S", 5.0),
            sla_check=env_bool("STRATA_SLA_ADMISSION", True),
            sla_slack=env_float("STRATA_SLA_SLACK", 1.0),
            security=security(),
        )


def parse_partitions(spec: str) -> dict[str, frozenset[str]]:
    """'tenant-a=node-0,node-1;tenant-b=node-2' -> {tenant: node ids}; ConfigError naming the
    faulty entry."""
    out: dict[str, frozenset[str]] = {}
    for entry in (e.strip() for e in spec.split(";") if e.strip()):
        tenant, sep, nodes = entry.partition("=")
        ids = frozenset(n.strip() for n in nodes.split(",") if n.strip())
        if not sep or not tenant.strip() or not ids:
            raise ConfigError(f"STRATA_SCHEDULER_PARTITIONS entry {entry!r} must look like "
                              f"tenant=node-id[,node-id...]")
        out[tenant.strip()] = ids
    return out
