"""Node manager settings, read from the environment once at start."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from strata import defaults
from strata.envconfig import (ConfigError, data_dir, env_float, env_int, env_list, env_str,
                              security)
from strata.eval.energy import SOURCES
from strata.policy.scheduling.fair_queue import QUEUES
from strata.policy.scheduling.interference import EstimatorSettings, MarginSettings
from strata.security.settings import UNSECURED, SecuritySettings

# Engine settings the node manager passes through to the workers it starts.
WORKER_PASSTHROUGH = ("STRATA_BLOCK_SIZE", "STRATA_KV_CACHE_BYTES", "STRATA_KV_BLOCKS",
                      "STRATA_MAX_BATCHED_TOKENS", "STRATA_MAX_SEQS", "STRATA_DEVICE",
                      "STRATA_DTYPE", "STRATA_ATTENTION_KERNEL")

SAMPLE_INTERVAL_S = 2.0
POWER_IDLE_WATTS = 50.0
POWER_TDP_WATTS = 250.0
MARGIN = MarginSettings()
ESTIMATOR = EstimatorSettings()


@dataclass(frozen=True, slots=True)
class NodeConfig:
    node_id: str
    bind: str
    advertise: str               # the address the gateway and planner use to reach this node
    # STRATA_SCHEDULER_ADDR: the schedulers (comma-separated); heartbeats go to each
    scheduler_addrs: tuple[str, ...]
    kvstore_addr: str
    otlp_endpoint: str
    memory_bytes: int
    device: str
    torch_threads: int
    worker_ready_timeout_s: float
    heartbeat_interval_s: float
    metrics_addr: str = defaults.METRICS_ADDR    # where node samples go
    sample_interval_s: float = SAMPLE_INTERVAL_S
    energy_source: str = "auto"                  # auto | nvml | rapl | model (strata.eval.energy)
    # The power model's line, used without an energy counter. A placeholder server line: set
    # both to the node's hardware, since reports built on the model are only as good as these.
    power_idle_watts: float = POWER_IDLE_WATTS
    power_tdp_watts: float = POWER_TDP_WATTS
    # The order of requests waiting for a worker slot: wfq (strict priority across SLA classes,
    # token-weighted fair among tenants, urgent ones preempt lower classes) or fcfs (the pooled
    # first-come-first-served baseline).
    queue_policy: str = "wfq"
    # The safety margin heartbeats carry (strata.policy.scheduling.interference): headroom kept
    # with no interference, its ceiling, how fast it gives headroom back once interference
    # subsides, and how long the interference baseline remembers.
    margin_floor: float = MARGIN.floor
    margin_cap: float = MARGIN.cap
    margin_half_life_s: float = MARGIN.half_life_s
    interference_baseline_s: float = ESTIMATOR.baseline_window_s
    # Hot standby workers per loaded model: warm (model loaded), taking no request, promoted
    # when a READY worker dies, so its requests resume in milliseconds instead of a model load.
    standby_workers: int = 0
    # STRATA_NODE_STATE_DIR: where the pids of this node's workers are recorded, so that a node
    # manager started after a crashed one reaps what it left (default <data dir>/node/<id>)
    state_dir: str = ""
    security: SecuritySettings = UNSECURED   # this node's credential, and its workers'

    def worker_env(self) -> dict[str, str]:
        env = {k: os.environ[k] for k in WORKER_PASSTHROUGH if os.environ.get(k)}
        env.update({"STRATA_KVSTORE_ADDR": self.kvstore_addr,
                    "STRATA_OTLP_ENDPOINT": self.otlp_endpoint,
                    "STRATA_TORCH_THREADS": str(self.torch_threads),
                    "STRATA_DEVICE": self.device, **self.security.env()})
        return env

    @classmethod
    def from_env(cls) -> NodeConfig:
        bind = env_str("STRATA_NODE_BIND", defaults.NODE_ADDR)
        node_id = env_str("STRATA_NODE_ID", socket.gethostname())
        return cls(
            node_id=node_id,
            bind=bind,
            advertise=env_str("STRATA_NODE_ADVERTISE", bind),
            scheduler_addrs=tuple(env_list("STRATA_SCHEDULER_ADDR", defaults.SCHEDULER_ADDR)),
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
            metrics_addr=env_str("STRATA_METRICS_ADDR", defaults.METRICS_ADDR),
            sample_interval_s=_positive("STRATA_SAMPLE_INTERVAL_S", SAMPLE_INTERVAL_S),
            energy_source=_energy_source(env_str("STRATA_ENERGY_SOURCE", "auto")),
            power_idle_watts=_positive("STRATA_POWER_IDLE_WATTS", POWER_IDLE_WATTS,
                                       zero_ok=True),
            power_tdp_watts=_positive("STRATA_POWER_TDP_WATTS", POWER_TDP_WATTS),
            queue_policy=_queue_policy(env_str("STRATA_NODE_QUEUE", "wfq")),
            margin_floor=_positive("STRATA_MARGIN_FLOOR", MARGIN.floor, zero_ok=True),
            margin_cap=_positive("STRATA_MARGIN_CAP", MARGIN.cap),
            margin_half_life_s=_positive("STRATA_MARGIN_HALF_LIFE_S", MARGIN.half_life_s),
            interference_baseline_s=_positive("STRATA_INTERFERENCE_BASELINE_S",
                                              ESTIMATOR.baseline_window_s),
            standby_workers=env_int("STRATA_NODE_STANDBY", 0, minimum=0),
            state_dir=env_str("STRATA_NODE_STATE_DIR", os.path.join(data_dir(), "node", node_id)),
            security=security(),
        )

    def __post_init__(self) -> None:
        if self.power_idle_watts > self.power_tdp_watts:
            raise ConfigError(f"STRATA_POWER_IDLE_WATTS ({self.power_idle_watts}) must not "
                              f"exceed STRATA_POWER_TDP_WATTS ({self.power_tdp_watts})")
        if self.margin_floor > self.margin_cap:
            raise ConfigError(f"STRATA_MARGIN_FLOOR ({self.margin_floor}) must not exceed "
                              f"STRATA_MARGIN_CAP ({self.margin_cap})")


def _positive(name: str, default: float, zero_ok: bool = False) -> float:
    value = env_float(name, default)
    if not (value >= 0 if zero_ok else value > 0) or value == float("inf"):
        raise ConfigError(f"{name} must be a {'non-negative' if zero_ok else 'positive'} "
                          f"number, got {value}")
    return value


def _energy_source(value: str) -> str:
    if value not in SOURCES:
        raise ConfigError(f"STRATA_ENERGY_SOURCE must be one of {', '.join(SOURCES)}, "
                          f"got {value!r}")
    return value


def _queue_policy(value: str) -> str:
    if value not in QUEUES:
        raise ConfigError(f"STRATA_NODE_QUEUE must be one of {', '.join(QUEUES)}, got {value!r}")
    return value
