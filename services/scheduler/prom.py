"""The global scheduler's Prometheus metrics:

strata_scheduler_route_decisions_total{outcome, reason}
    routed | refused (burst, pool_full, sla, partition) | not_found | unavailable
strata_scheduler_route_latency_seconds    histogram of the decision itself
strata_scheduler_nodes                    nodes whose heartbeats are fresh
strata_scheduler_ready_replicas{model}    READY replicas the routing sees
strata_scheduler_kv_blocks{node}          KV blocks the prefix index holds for each node (from
                                          its KV tier store's events)
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import Metric

from strata.policy.kv_index import PrefixIndex
from strata.policy.registry import NodeRegistry, ReplicaPhase
from strata.telemetry.prometheus import gauge

LATENCY_BUCKETS = (1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.1)


class RouteMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.decisions = Counter(
            "strata_scheduler_route_decisions",
            "Route decisions by outcome and reason",
            ("outcome", "reason"),
            registry=self.registry,
        )
        self.latency = Histogram(
            "strata_scheduler_route_latency_seconds",
            "Seconds one route decision took",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )

    def decided(self, outcome: str, reason: str, seconds: float) -> None:
        self.decisions.labels(outcome, reason).inc()
        self.latency.observe(seconds)


def registry_families(registry: NodeRegistry, index: PrefixIndex | None = None) -> Iterable[Metric]:
    nodes = registry.nodes()
    yield gauge("strata_scheduler_nodes", "Nodes with a fresh heartbeat", (), [((), len(nodes))])
    ready = Tally(r.model for n in nodes for r in n.replicas if r.phase is ReplicaPhase.READY)
    yield gauge("strata_scheduler_ready_replicas", "READY replicas by model", ("model",),
                (((m,), c) for m, c in sorted(ready.items())))  # fmt: skip
    if index is not None:
        held = (((n,), index.blocks(n)) for n in sorted(index.node_ids()))
        yield gauge(
            "strata_scheduler_kv_blocks",
            "KV blocks the prefix index holds by node",
            ("node",),
            held,
        )
