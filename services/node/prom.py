"""The node manager's Prometheus metrics: the node as its last heartbeat reported it (what the
scheduler saw), and its workers' cumulative engine counters.

    strata_node_requests_running{model, replica}      in the engine (vllm:num_requests_running)
    strata_node_requests_waiting{model, replica}      in the worker (vllm:num_requests_waiting)
    strata_node_queue_requests{tenant}                in the node's fair queue, per tenant
    strata_node_kv_usage_ratio{model, replica, tier}  KV in use (vllm:kv_cache_usage_perc)
    strata_node_prompt_tokens_total{model, replica}   prompt tokens finished (cache queries)
    strata_node_prefix_cache_hit_tokens_total{model, replica, tier}  of them from a cache:
                                                      device (vllm:prefix_cache_hits), kvstore
    strata_node_preemptions_total{model, replica, kind}   all | priority
    strata_node_interference_ratio, strata_node_safety_margin, strata_node_standby_workers

Tenant labels come from the node's own queue (tenants with requests here), never request ids.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import Metric

from services.node.heartbeat import LastReport
from strata.node.replicas import ReplicaSet
from strata.telemetry.prometheus import counter, gauge


def node_families(report: LastReport, replicas: ReplicaSet) -> Iterable[Metric]:
    info = report.info
    rows = [] if info is None else list(info.replicas)
    ids = ("model", "replica")
    yield gauge(
        "strata_node_requests_running",
        "Requests in the worker's engine",
        ids,
        (((r.model, r.replica_id), r.running_requests) for r in rows),
    )
    yield gauge(
        "strata_node_requests_waiting",
        "Requests waiting inside the worker",
        ids,
        (((r.model, r.replica_id), r.waiting_requests) for r in rows),
    )
    yield gauge(
        "strata_node_kv_usage_ratio",
        "KV blocks in use over the pool, by tier",
        (*ids, "tier"),
        (
            ((r.model, r.replica_id, "device"), 1.0 - r.kv_blocks_free / r.kv_blocks_total)
            for r in rows
            if r.kv_blocks_total > 0
        ),
    )
    yield gauge(
        "strata_node_queue_requests",
        "Requests waiting in the node's fair queue, per tenant",
        ("tenant",),
        (((t.tenant,), t.queued) for t in ([] if info is None else info.tenants)),
    )
    workers = list(replicas.replicas.values())
    yield counter(
        "strata_node_prompt_tokens",
        "Prompt tokens of finished requests (prefix-cache queries)",
        ids,
        (((w.model, w.replica_id), w.stats.counters.prompt_tokens) for w in workers),
    )
    yield counter(
        "strata_node_prefix_cache_hit_tokens",
        "Prompt tokens served from a cache: the device's or the KV tier store's",
        (*ids, "tier"),
        [
            *(((w.model, w.replica_id, "device"), w.stats.counters.prefix_hit_tokens)
              for w in workers),
            *(((w.model, w.replica_id, "kvstore"), w.stats.counters.tier_hit_tokens)
              for w in workers),
        ],
    )  # fmt: skip
    yield counter(
        "strata_node_preemptions",
        "Sequences preempted: all, and of them displaced for a higher class",
        (*ids, "kind"),
        [
            *(((w.model, w.replica_id, "all"), w.stats.counters.preemptions) for w in workers),
            *(((w.model, w.replica_id, "priority"), w.stats.counters.priority_preemptions)
              for w in workers),
        ],
    )  # fmt: skip
    if info is not None:
        yield gauge(
            "strata_node_interference_ratio",
            "Observed step time over the workers' references (profile or step line), last window "
            "(1: none)",
            (),
            [((), info.interference)],
        )
        yield gauge(
            "strata_node_safety_margin",
            "Headroom the node asks the scheduler to keep",
            (),
            [((), info.safety_margin)],
        )
        yield gauge(
            "strata_node_standby_workers", "Warm standby workers", (), [((), info.standby_workers)]
        )
