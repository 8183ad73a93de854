"""How the placement benchmark configures the real stack for each way: the pool of node managers,
the placement planner's policy, and what it takes a replica to need in memory.

    ffd          STRATA_PLACEMENT_POLICY=ffd; every replica needs 90% of a node's memory (what
                 vLLM reserves by default, gpu_memory_utilization=0.9): one replica per node
    batch-aware  STRATA_PLACEMENT_POLICY=batch-aware over the collector's arrival curves and the
                 benchmark's engine profiles; a replica needs its fp32 weights plus the worker's
                 KV pool, so memory never stops co-location and the curves decide

Both ways get the same models, one replica each (STRATA_REPLICAS=1), the same replan interval
and the same nodes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from strata.engine.dummy_configs import DUMMY_CONFIGS

WAYS = ("ffd", "batch-aware")
BASELINE_SHARE = 0.9  # vLLM's default gpu_memory_utilization
FP32_BYTES = 4


@dataclass(slots=True, frozen=True)
class StackSettings:
    nodes: int = 3
    node_memory_bytes: int = 8 << 30  # compose's STRATA_NODE_MEMORY_BYTES
    kv_cache_bytes: int = 256 << 20  # each worker's KV pool (compose's)
    window_s: float = 25.0  # the planner's arrival-curve window ...
    windows: int = 6  # ... and how many make its "day"
    replan_interval_s: float = 10.0  # compose's
    torch_threads: int = 1
    sample_interval_s: float = 2.0
    sla_class: str = "interactive"  # the tenant's class: the planner's red line
    tenant: str = "placement-bench"
    lead_s: float = 30.0  # history is inserted this long before the replay

    @property
    def period_s(self) -> float:
        return self.window_s * self.windows


def replica_bytes(model: str, kv_cache_bytes: int) -> int:
    """A dummy model's fp32 weights plus the worker's KV pool."""
    config = DUMMY_CONFIGS.get(model)
    if config is None:
        raise ValueError(
            f"{model} is not one of the engine's dummy models ({', '.join(DUMMY_CONFIGS)})"
        )
    return config.param_count() * FP32_BYTES + kv_cache_bytes


def memory_overrides(way: str, models: Sequence[str], settings: StackSettings) -> dict[str, int]:
    if way == "ffd":
        share = int(BASELINE_SHARE * settings.node_memory_bytes)
        return {m: share for m in models}
    if way == "batch-aware":
        return {m: replica_bytes(m, settings.kv_cache_bytes) for m in models}
    raise ValueError(f"way must be one of {', '.join(WAYS)}, got {way!r}")


def way_overrides(
    way: str, models: Sequence[str], settings: StackSettings, profiles_dir: str
) -> dict[str, dict[str, str]]:
    memory = memory_overrides(way, models, settings)
    return {
        # Refusing what the scheduler predicts will miss its TTFT target is admission policy,
        # not placement; with it on, a refusal would be a failed request neither way caused.
        "scheduler": {"STRATA_SLA_ADMISSION": "0"},
        "node": {
            "STRATA_NODE_STANDBY": "0",
            "STRATA_TORCH_THREADS": str(settings.torch_threads),
            "STRATA_NODE_MEMORY_BYTES": str(settings.node_memory_bytes),
            "STRATA_KV_CACHE_BYTES": str(settings.kv_cache_bytes),
            "STRATA_KV_BLOCKS": "0",
            "STRATA_SAMPLE_INTERVAL_S": str(settings.sample_interval_s),
        },
        # dummy models' blocks are small: 64 MiB of host tier instead of compose's 1 GiB each
        "kvstore": {
            "STRATA_KVSTORE_HOST_BYTES": str(64 << 20),
            "STRATA_KVSTORE_SLAB_BYTES": str(4 << 20),
        },
        "placement": {
            "STRATA_MODELS": ",".join(models),
            "STRATA_REPLICAS": "1",
            "STRATA_PLACEMENT_POLICY": way,
            "STRATA_MODEL_MEMORY_BYTES": ",".join(f"{m}={b}" for m, b in memory.items()),
            "STRATA_REPLAN_INTERVAL_S": f"{settings.replan_interval_s:g}",
            "STRATA_PLACEMENT_WINDOW_S": f"{settings.window_s:g}",
            "STRATA_PLACEMENT_WINDOWS": str(settings.windows),
            "STRATA_PLACEMENT_CURVE_DAYS": "0",
            "STRATA_PLACEMENT_BURST_S": f"{settings.window_s / 5:g}",
            "STRATA_PLACEMENT_PROFILES": profiles_dir,
        },
    }
