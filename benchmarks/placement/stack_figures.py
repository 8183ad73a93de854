"""One way's figures on the real stack, from its request rows, node samples and replica listings.

nodes used     nodes that held a replica during the evaluation (stack_watch)
utilization    per node, the mean of its samples' utilization (the share of the sample's
               interval its engines spent stepping, summed over the node's workers) over
               the evaluation; averaged over the nodes used, as the simulated benchmark
               averages over the GPUs that host a replica
per model      requests, failed, P50/P99 TTFT, P99 TPOT and E2E over the served requests,
               SLA attainment (served within both of the class's targets) over all of them
migrations     replicas loaded plus replicas unloaded after the evaluation began
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from benchmarks.placement.stack_watch import ReplicaChanges
from strata.core.records import NodeSampleRecord, RequestRecord, is_error
from strata.core.sla import SlaClass
from strata.core.stats import percentile


@dataclass(slots=True, frozen=True)
class ModelFigures:
    model: str
    requests: int
    failed: int
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    tpot_p99_ms: float | None
    e2e_p99_ms: float | None
    sla: float  # share of requests served within the class's targets


@dataclass(slots=True, frozen=True)
class WayFigures:
    way: str
    nodes_used: tuple[str, ...]
    utilization: float  # mean over nodes_used
    utilization_by_node: dict[str, float]
    models: tuple[ModelFigures, ...]
    requests: int
    failed: int
    sla: float
    ttft_p99_ms: float | None
    e2e_p99_ms: float | None
    loads: int
    unloads: int
    at_start: dict[str, list[str]]
    at_end: dict[str, list[str]]

    @property
    def migrations(self) -> int:
        return self.loads + self.unloads


def _p(values: Sequence[float], q: float) -> float | None:
    return percentile(values, q) if values else None


def model_figures(model: str, rows: Sequence[RequestRecord], sla: SlaClass) -> ModelFigures:
    served = [r for r in rows if not is_error(r.error_code, r.status_code)]
    ttft = [r.ttft_ms for r in served if r.ttft_ms is not None]
    tpot = [r.tpot_ms for r in served if r.tpot_ms is not None]
    e2e = [r.e2e_ms for r in served]
    met = sum(sla.attained(False, r.ttft_ms, r.tpot_ms) for r in served)
    return ModelFigures(
        model,
        len(rows),
        len(rows) - len(served),
        _p(ttft, 50),
        _p(ttft, 99),
        _p(tpot, 99),
        _p(e2e, 99),
        met / len(rows) if rows else 1.0,
    )


def way_figures(
    way: str,
    rows: Sequence[RequestRecord],
    samples: Sequence[NodeSampleRecord],
    changes: ReplicaChanges,
    sla: SlaClass,
    models: Sequence[str],
) -> WayFigures:
    """`samples` already cut to the evaluation; `rows` one per request the replay sent."""
    busy: dict[str, list[float]] = defaultdict(list)
    for s in samples:
        busy[s.node_id].append(s.utilization)
    by_node = {n: sum(v) / len(v) for n, v in sorted(busy.items())}
    used = tuple(changes.hosting)
    utilization = sum(by_node.get(n, 0.0) for n in used) / len(used) if used else 0.0
    by_model: dict[str, list[RequestRecord]] = defaultdict(list)
    for r in rows:
        by_model[r.model].append(r)
    per_model = tuple(model_figures(m, by_model[m], sla) for m in models)
    everyone = model_figures(way, rows, sla)
    return WayFigures(
        way,
        used,
        utilization,
        by_node,
        per_model,
        everyone.requests,
        everyone.failed,
        everyone.sla,
        everyone.ttft_p99_ms,
        everyone.e2e_p99_ms,
        len(changes.loads),
        len(changes.unloads),
        changes.at_start,
        changes.at_end,
    )
