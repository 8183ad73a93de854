"""Scheduler settings: flags, STRATA_* variables, defaults (strata.core.settings)."""

from __future__ import annotations

from pydantic import Field, model_validator

from strata.core import defaults
from strata.policy.lease import MAX_TTL_S
from strata.policy.scheduling.admission import AdmissionSettings
from strata.policy.scheduling.global_scheduler import (
    MIN_TTFT_MARGIN_MS,
    SLA_SLACK,
    Mode,
    SchedulerSettings,
)
from strata.policy.scheduling.homes import HomeSettings
from strata.security.settings import SecurityFields

PROG = "python -m services.scheduler"


class SchedulerConfig(SecurityFields):
    """The global scheduler (level 1): node registry kept alive by heartbeats, admission and
    routing. --print-config prints the resolved settings and exits."""

    scheduler_bind: str = Field(defaults.SCHEDULER_ADDR, description="host:port to listen on")
    scheduler_prometheus_bind: str = Field(
        "",
        description="host:port of the Prometheus /metrics endpoint (empty: none; compose and "
        f"make run use {defaults.SCHEDULER_PROMETHEUS_ADDR.rsplit(':', 1)[1]})",
    )
    otlp_endpoint: str = Field(
        "", description="OTLP/gRPC receiver for this service's spans; empty: none"
    )
    node_ttl_s: float = Field(
        defaults.NODE_TTL_S, gt=0, description="a node silent this long leaves routing"
    )
    heartbeat_interval_s: float = Field(
        defaults.HEARTBEAT_INTERVAL_S, gt=0, description="the heartbeat interval nodes are told"
    )
    scheduler_mode: Mode = Field(
        Mode.TWO_LEVEL,
        description="two-level (quotas, SLA, "
        "interference) | fcfs | static (the isolation baselines)",
    )
    scheduler_partitions: str = Field(
        "", description="static mode's partitions, 'tenant-a=node-0,node-1;tenant-b=node-2'"
    )
    route_sample: int = Field(
        64, ge=0, description="replicas scored per decision beyond the prefix holders (0: all)"
    )
    route_tie_tolerance: float = Field(
        0.1, ge=0, lt=1, description="draw among replicas within this fraction of the best's wait"
    )
    route_homes: bool = Field(
        True,
        description="two-level mode: prefer a tenant's home nodes (a soft partition by "
        "guaranteed share) while they cost a request little; false: the best replica only",
    )
    route_home_slack_s: float = Field(
        HomeSettings().slack_s,
        ge=0,
        description="a home may be this much slower to a first token than the best replica",
    )
    route_home_ttft_fraction: float = Field(
        HomeSettings().ttft_fraction,
        gt=0,
        le=1,
        description="... and at most this fraction of the class's TTFT target",
    )
    route_home_guests: bool = Field(
        HomeSettings().guests,
        description="let other tenants' requests into a home with a guarantee (its owner's "
        "decodes then share steps with them); false: a tenant goes only to its home and the "
        "nodes no guarantee holds",
    )
    admission_oversubscription: float = Field(
        1.0, ge=1, description="the pool admits this many times what it holds"
    )
    admission_horizon_s: float = Field(
        5.0, gt=0, description="the pool admits the work its replicas compute in this long"
    )
    sla_admission: bool = Field(
        True, description="refuse what no replica can serve within its class's TTFT target"
    )
    sla_slack: float = Field(
        SLA_SLACK,
        gt=0,
        description="TTFT estimates are judged against the target times this (below 1: a margin)",
    )
    sla_min_margin_ms: float = Field(
        MIN_TTFT_MARGIN_MS,
        ge=0,
        description="TTFT estimates are judged at least this far below the target (a short "
        "target's margin: the estimate's error is absolute), never below half target x slack",
    )
    sla_refuse_infeasible: bool = Field(
        True,
        description="refuse a request its class's targets cannot hold for even on an idle "
        "replica (FAILED_PRECONDITION); false admits it",
    )
    lease_max_s: float = Field(
        MAX_TTL_S, gt=0, description="the longest a lease (the planner's) is granted for at once"
    )
    lease_grace_s: float = Field(
        0.0,
        ge=0,
        description="after a start, grant no lease for this long (0: at once; the planner "
        "renews its lease before it applies a plan, so a holder from before a restart stops "
        "at its next plan)",
    )

    @model_validator(mode="after")
    def _consistent(self) -> SchedulerConfig:
        if self.node_ttl_s <= self.heartbeat_interval_s:
            # A TTL at or below the interval would drop healthy nodes between two heartbeats.
            raise ValueError(
                f"STRATA_NODE_TTL_S ({self.node_ttl_s}) must exceed "
                f"STRATA_HEARTBEAT_INTERVAL_S ({self.heartbeat_interval_s})"
            )
        if self.scheduler_mode is Mode.STATIC and not self.partitions:
            raise ValueError(
                "STRATA_SCHEDULER_MODE=static needs STRATA_SCHEDULER_PARTITIONS, "
                "e.g. 'tenant-a=node-0,node-1;tenant-b=node-2'"
            )
        return self

    @property
    def partitions(self) -> dict[str, frozenset[str]]:
        return parse_partitions(self.scheduler_partitions)

    def settings(self) -> SchedulerSettings:
        return SchedulerSettings(
            mode=self.scheduler_mode,
            admission=AdmissionSettings(self.admission_oversubscription, self.admission_horizon_s),
            sla_check=self.sla_admission,
            sla_slack=self.sla_slack,
            min_margin_ms=self.sla_min_margin_ms,
            refuse_infeasible=self.sla_refuse_infeasible,
            partitions=self.partitions,
            homes=HomeSettings(
                self.route_home_slack_s,
                self.route_home_ttft_fraction,
                guests=self.route_home_guests,
            )
            if self.route_homes
            else None,
        )


def parse_partitions(spec: str) -> dict[str, frozenset[str]]:
    """'tenant-a=node-0,node-1;tenant-b=node-2' -> {tenant: node ids}; ValueError naming the
    faulty entry."""
    out: dict[str, frozenset[str]] = {}
    for entry in (e.strip() for e in spec.split(";") if e.strip()):
        tenant, sep, nodes = entry.partition("=")
        ids = frozenset(n.strip() for n in nodes.split(",") if n.strip())
        if not sep or not tenant.strip() or not ids:
            raise ValueError(
                f"STRATA_SCHEDULER_PARTITIONS entry {entry!r} must look like "
                f"tenant=node-id[,node-id...]"
            )
        out[tenant.strip()] = ids
    return out
