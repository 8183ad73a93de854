"""How each way of the isolation benchmark configures the real stack: the pool's settings, the
scheduler's mode and partitions, the nodes' queue policy, the SLA classes, the placement of one
replica per node (benchmarks.isolation.stack_run runs them)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from benchmarks.isolation.workload import TenantSpec
from strata.core.sla import SlaTable
from strata.eval.traces import TraceRequest

WAYS = ("static", "fcfs", "two-level")


@dataclass(slots=True, frozen=True)
class PoolSettings:
    """The pool every way runs on; the node settings are compose's unless named here."""

    model: str = "dummy-tiny"
    nodes: int = 2
    # Each worker's batch slots. Compose's 32 never fill at this size (dummy-tiny's steps are
    # short, a few requests run at once), so no request would wait in a node's queue and the
    # queue policy (wfq or fcfs) would decide nothing; with 8 the bursts queue at the nodes.
    max_seqs: int = 8
    max_batched_tokens: int = 2048
    torch_threads: int = 1
    sample_interval_s: float = 2.0
    give_up_s: float = 30.0  # a refused request's client retries this long ...
    retry_min_wait_s: float = 0.0  # ... after the hint, or this if longer
    prompt_seed: int = 0


def static_partitions(
    tenants: Sequence[TenantSpec],
    trace: Sequence[TraceRequest],
    table: SlaTable,
    nodes: Sequence[str],
) -> dict[str, list[str]]:
    """The steady tenants with an SLA on the first nodes, the aggressor and the best-effort
    tenants on the rest; nodes split by the groups' offered work (prompt + output tokens,
    bursts included), at least one each."""
    if len(nodes) < 2:
        raise ValueError(f"static partitioning needs at least 2 nodes, got {len(nodes)}")
    protected = [
        t.name for t in tenants if not t.aggressor and not table.lookup(t.sla_class).best_effort
    ]
    rest = [t.name for t in tenants if t.name not in protected]
    if not protected or not rest:
        raise ValueError(
            "static partitioning here needs steady tenants with an SLA and an "
            "aggressor or a best-effort tenant"
        )
    work: dict[str, int] = defaultdict(int)
    for r in trace:
        work[r.tenant] += r.prompt_tokens + r.output_tokens
    total = sum(work.values()) or 1
    first = round(len(nodes) * sum(work[n] for n in protected) / total)
    first = min(len(nodes) - 1, max(1, first))
    return {**{n: list(nodes[:first]) for n in protected}, **{n: list(nodes[first:]) for n in rest}}


def way_overrides(
    way: str, settings: PoolSettings, table: SlaTable, partitions: dict[str, list[str]]
) -> dict[str, dict[str, str]]:
    if way not in WAYS:
        raise ValueError(f"way must be one of {', '.join(WAYS)}, got {way!r}")
    spec = ";".join(f"{t}={','.join(ids)}" for t, ids in partitions.items())
    classes = table.spec()
    return {
        "scheduler": {
            "STRATA_SCHEDULER_MODE": way,
            "STRATA_SCHEDULER_PARTITIONS": spec if way == "static" else "",
        },
        "node": {
            "STRATA_NODE_QUEUE": "wfq" if way == "two-level" else "fcfs",
            "STRATA_NODE_STANDBY": "0",
            "STRATA_TORCH_THREADS": str(settings.torch_threads),
            "STRATA_MAX_SEQS": str(settings.max_seqs),
            "STRATA_MAX_BATCHED_TOKENS": str(settings.max_batched_tokens),
            "STRATA_SAMPLE_INTERVAL_S": str(settings.sample_interval_s),
        },
        # dummy-tiny's blocks are small: 64 MiB of host tier instead of compose's 1 GiB each
        "kvstore": {
            "STRATA_KVSTORE_HOST_BYTES": str(64 << 20),
            "STRATA_KVSTORE_SLAB_BYTES": str(4 << 20),
        },
        # one replica per node; replans every few seconds only place them (one per node at most)
        "placement": {
            "STRATA_MODELS": settings.model,
            "STRATA_REPLICAS": str(settings.nodes),
            "STRATA_REPLAN_INTERVAL_S": "2.0",
        },
        "gateway": {"STRATA_SLA_CLASSES": classes},
        "metrics": {"STRATA_SLA_CLASSES": classes},
    }
