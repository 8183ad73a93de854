"""Node manager settings: flags, STRATA_* variables, defaults (strata.core.settings).

The engine settings (strata.engine.settings) are the node's too: it hands them to every decode
worker it starts, with the worker's own model, replica id and port, as one serialized
configuration (services.worker.config).
"""

from __future__ import annotations

import os
import socket

from pydantic import Field, model_validator

from strata.core import defaults
from strata.core.settings import CommaList
from strata.engine.settings import EngineFields
from strata.node.energy import EnergySource
from strata.policy.scheduling.fair_queue import QueueName
from strata.policy.scheduling.interference import EstimatorSettings, MarginSettings
from strata.rpc.mux_settings import MultiplexFields
from strata.security.settings import SecurityFields

PROG = "python -m services.node"
MARGIN = MarginSettings()
ESTIMATOR = EstimatorSettings()


class NodeConfig(SecurityFields, EngineFields, MultiplexFields):
    """A node manager: the decode workers of one node, its fair queue and time slots,
    failover to hot standbys, the interference estimate and safety margin, heartbeats and node
    samples. --print-config prints the resolved settings and exits."""

    node_id: str = Field(
        default_factory=socket.gethostname, description="this node's id (default: the host name)"
    )
    node_bind: str = Field(defaults.NODE_ADDR, description="host:port to listen on")
    shutdown_grace_s: float = Field(
        30.0,
        ge=0,
        description="on SIGTERM, seconds its replicas (out of routing) get to finish their streams",
    )
    node_prometheus_bind: str = Field(
        "",
        description="host:port of the Prometheus /metrics endpoint (empty: none; compose and "
        f"make run use {defaults.NODE_PROMETHEUS_ADDR.rsplit(':', 1)[1]})",
    )
    node_advertise: str = Field(
        "",
        description="the address the gateway and planner use to "
        "reach this node (empty: the bind address)",
    )
    scheduler_addr: CommaList = Field(
        (defaults.SCHEDULER_ADDR,),
        description="the schedulers (comma-separated); heartbeats go to each",
    )
    kvstore_addr: str = Field(defaults.KVSTORE_ADDR, description="this node's KV tier store")
    metrics_addr: str = Field(defaults.METRICS_ADDR, description="where node samples go")
    otlp_endpoint: str = Field(
        "", description="OTLP/gRPC receiver for the node's and its workers' spans; empty: none"
    )
    node_memory_bytes: int = Field(
        8 << 30, ge=1, description="accelerator (or host) memory models may use"
    )
    worker_ready_timeout_s: float = Field(
        600.0, gt=0, description="how long a worker may take to load before it counts as failed"
    )
    heartbeat_interval_s: float = Field(
        defaults.HEARTBEAT_INTERVAL_S, gt=0, description="seconds between heartbeats"
    )
    sample_interval_s: float = Field(2.0, gt=0, description="seconds between node samples")
    energy_source: EnergySource = Field(
        EnergySource.AUTO, description="auto | nvml | rapl | model (the power model below)"
    )
    power_idle_watts: float = Field(
        50.0,
        ge=0,
        description="the power model's idle watts (set "
        "to the node's hardware: reports are only as good as this)",
    )
    power_tdp_watts: float = Field(250.0, gt=0, description="the power model's watts at full load")
    node_queue: QueueName = Field(
        QueueName.WFQ,
        description="the order of requests waiting for "
        "a worker slot: wfq (SLA classes first, tenants by weight) | "
        "fcfs (the baseline)",
    )
    margin_floor: float = Field(
        MARGIN.floor, ge=0, description="headroom the safety margin keeps with no interference"
    )
    margin_cap: float = Field(MARGIN.cap, gt=0, description="the safety margin's ceiling")
    margin_half_life_s: float = Field(
        MARGIN.half_life_s,
        gt=0,
        description="how fast the margin gives headroom back once interference subsides",
    )
    interference_baseline_s: float = Field(
        ESTIMATOR.baseline_window_s,
        gt=0,
        description=("how long the interference baseline remembers"),
    )
    interference_baseline_quantile: float = Field(
        ESTIMATOR.baseline_quantile,
        ge=0,
        le=1,
        description=(
            "the quantile of the step-time ratios over the baseline's memory that reads as no "
            "interference"
        ),
    )
    node_standby: int = Field(
        0,
        ge=0,
        description="hot standby workers per loaded model: warm, promoted when a READY worker dies",
    )
    node_state_dir: str = Field(
        "",
        description="where this node's worker pids are recorded, "
        "so a successor reaps what a crashed node manager left "
        "(empty: <data dir>/node/<node id>)",
    )

    @model_validator(mode="after")
    def _consistent(self) -> NodeConfig:
        if self.power_idle_watts > self.power_tdp_watts:
            raise ValueError(
                f"STRATA_POWER_IDLE_WATTS ({self.power_idle_watts}) must not "
                f"exceed STRATA_POWER_TDP_WATTS ({self.power_tdp_watts})"
            )
        if self.margin_floor > self.margin_cap:
            raise ValueError(
                f"STRATA_MARGIN_FLOOR ({self.margin_floor}) must not exceed "
                f"STRATA_MARGIN_CAP ({self.margin_cap})"
            )
        return self

    @property
    def advertise(self) -> str:
        return self.node_advertise or self.node_bind

    @property
    def state_dir(self) -> str:
        return self.node_state_dir or os.path.join(self.resolved_data_dir(), "node", self.node_id)

    def worker_settings(self) -> dict[str, object]:
        """What every worker of this node is configured with, before its own model, replica
        id and port: the engine settings, the KV store, spans, the cluster credential."""
        security = self.security()
        return {
            **self.engine_values(),
            "kvstore_addr": self.kvstore_addr,
            "otlp_endpoint": self.otlp_endpoint,
            "secrets_dir": security.secrets_dir,
            "internal_tls": security.internal_tls,
            "internal_auth": security.enabled,
        }
