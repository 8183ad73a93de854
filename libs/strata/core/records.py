"""The records every layer reads: a finished request as the gateway measured it, a node
sample, an evaluation run. Plain dataclasses: the store persists them (strata.store), the
evaluation and the simulator compute on them, the client reads them back, none needs SQL."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

STATUS_ERROR = 2  # OTLP Status.STATUS_CODE_ERROR


def is_error(error_code: str, status_code: int) -> bool:
    """A request failed if the gateway named an error code or marked its span as an error."""
    return error_code != "" or status_code == STATUS_ERROR


@dataclass(slots=True)
class RequestRecord:
    """One finished request; latencies in ms, None where the gateway did not measure them.

    itl_p*_ms are percentiles of this request's own inter-token gaps; run_id is the evaluation
    run the caller tagged it with (None: untagged).
    """

    request_id: str
    trace_id: str
    tenant: str
    model: str
    start_unix_ms: int
    ttft_ms: float | None
    tpot_ms: float | None
    e2e_ms: float
    queue_ms: float | None
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    finish_reason: str
    error_code: str
    status_code: int
    itl_p50_ms: float | None = None
    itl_p95_ms: float | None = None
    itl_p99_ms: float | None = None
    run_id: int | None = None

    @property
    def is_error(self) -> bool:
        return is_error(self.error_code, self.status_code)


ENERGY_SOURCES = ("nvml", "rapl", "model")


@dataclass(slots=True)
class NodeSampleRecord:
    node_id: str
    unix_ms: int
    utilization: float = 0.0  # fraction of the interval the engines were stepping
    batch_tokens: int = 0  # tokens computed in the interval's steps
    batch_budget: int = 0  # steps x max tokens per step in the interval
    kv_blocks_device_used: int = 0
    kv_blocks_device_total: int = 0
    kv_blocks_host: int = 0
    kv_blocks_disk: int = 0
    running: int = 0
    waiting: int = 0
    preemptions: int = 0  # cumulative
    power_watts: float = 0.0
    energy_joules: float = 0.0  # cumulative
    energy_source: str = "model"
    prefix_hit_tokens: int = 0  # cumulative
    tier_hit_tokens: int = 0  # cumulative
    prompt_tokens: int = 0  # cumulative
    kv_blocks_evicted: int = 0  # cumulative, device prefix-cache evictions
    block_lifetime_sum_s: float = 0.0  # cumulative, commit-to-eviction seconds of those
    block_lifetime_p50_s: float = 0.0  # recent evictions (0 without any)
    block_lifetime_p99_s: float = 0.0
    sparse_layer_steps: int = 0  # cumulative, layer computations on the sparse decode path
    sparse_fallbacks: int = 0  # cumulative, those sent back to full attention

    def problem(self) -> str | None:
        """A sentence saying what is wrong with this sample, or None when it can be stored."""
        if not self.node_id:
            return "a node sample needs a node_id"
        where = f"sample of node {self.node_id!r} at {self.unix_ms}"
        if self.unix_ms <= 0:
            return f"{where}: unix_ms must be a positive Unix time in milliseconds"
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                return f"{where}: {f.name} must be a finite number, got {value}"
            if isinstance(value, int | float) and value < 0:
                return f"{where}: {f.name} must not be negative, got {value}"
        if self.utilization > 1.0:
            return f"{where}: utilization is a fraction of time, at most 1, got {self.utilization}"
        if self.batch_tokens > self.batch_budget:
            return (
                f"{where}: batch_tokens ({self.batch_tokens}) cannot exceed batch_budget "
                f"({self.batch_budget})"
            )
        if self.kv_blocks_device_used > self.kv_blocks_device_total:
            return (
                f"{where}: kv_blocks_device_used ({self.kv_blocks_device_used}) cannot "
                f"exceed kv_blocks_device_total ({self.kv_blocks_device_total})"
            )
        if self.sparse_fallbacks > self.sparse_layer_steps:
            return (
                f"{where}: sparse_fallbacks ({self.sparse_fallbacks}) cannot exceed "
                f"sparse_layer_steps ({self.sparse_layer_steps})"
            )
        if self.energy_source not in ENERGY_SOURCES:
            return (
                f"{where}: energy_source must be one of {', '.join(ENERGY_SOURCES)}, "
                f"got {self.energy_source!r}"
            )
        return None


@dataclass(slots=True)
class RunRecord:
    run_id: int
    name: str
    kind: str
    started_unix_ms: int
    finished_unix_ms: int | None  # None while running
    params_json: str
    client_summary_json: str | None  # None until FinishRun stored one
    tenant: str | None = None  # the tenant that opened it; None: the admin or the cluster
