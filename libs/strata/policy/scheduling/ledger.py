"""The pool ledger: how much work each tenant holds in the pool, and how much the pool can hold.

Kept up to date from the node registry's heartbeats (each node reports its tenants' reserved work
tokens and its replicas' KV pools), plus what this scheduler routed since a node's last heartbeat
(that node's next report includes it, so those entries are dropped then). Everything here is
rebuilt from heartbeats within one interval after a restart.

    capacity_tokens   sum over READY replicas of what each can hold and work off: the smaller of
                      its KV pool (KV blocks x block tokens, the context it can hold at once)
                      and the tokens its prefill throughput computes in `horizon_s` (without a
                      measured rate, the KV pool alone). A compute-bound engine (a CPU, a small
                      GPU with a large pool) is limited by the second: quotas must bind there,
                      or an aggressor fills every batch long before any KV pool is full. A
                      tenant's share is a share of this.
    tokens_per_s      sum over READY replicas of their measured throughput
    tenant_tokens[t]  work tokens (prompt + max_tokens) of t's requests on any node, or routed
                      and not yet reported

Updates cost O(the node's replicas and tenants), reads O(1): admission reads the ledger on every
request, heartbeats come every second from every node.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from strata.core.blocks import block_tokens
from strata.policy.registry import NodeState, ReplicaPhase
from strata.policy.scheduling.slo import DecodeLoad


@dataclass(slots=True)
class PoolLedger:
    horizon_s: float = 5.0
    capacity_tokens: float = 0.0
    tokens_per_s: float = 0.0
    margin_sum: float = 0.0  # of the nodes' safety margins (mean = / nodes)
    nodes: int = 0
    tenant_tokens: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    # node id -> replica id -> tokens routed there since the node's last report
    pending_replica: dict[str, dict[str, int]] = field(default_factory=dict)
    # node id -> tenant -> tokens routed there since the node's last report
    pending_tenant: dict[str, dict[str, int]] = field(default_factory=dict)
    # node id -> replica id -> the requests routed there since the node's last report
    pending_slots: dict[str, dict[str, DecodeLoad]] = field(default_factory=dict)
    # node id -> replica id -> the priorities of those requests
    pending_priorities: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    # tenant -> its guaranteed share, as its latest request said (soft state: requests bring
    # it back after a restart)
    guarantees: dict[str, float] = field(default_factory=dict)

    def __call__(self, old: NodeState | None, new: NodeState | None) -> None:
        """The registry's listener: replace `old`'s contribution by `new`'s."""
        if old is not None:
            self._add(old, -1)
            self._drop_pending(old.node_id)
        if new is not None:
            self._add(new, +1)

    def _add(self, node: NodeState, sign: int) -> None:
        self.nodes += sign
        self.margin_sum += sign * node.safety_margin
        for r in node.replicas:
            if r.phase is ReplicaPhase.READY:
                kv = r.kv_blocks_total * block_tokens(r.block_size)
                work = r.tokens_per_s * self.horizon_s if r.tokens_per_s > 0 else kv
                self.capacity_tokens += sign * min(kv, work)
                self.tokens_per_s += sign * r.tokens_per_s
        for t in node.tenants:
            self.tenant_tokens[t.tenant] += sign * t.tokens

    def _drop_pending(self, node_id: str) -> None:
        self.pending_replica.pop(node_id, None)
        self.pending_slots.pop(node_id, None)
        self.pending_priorities.pop(node_id, None)
        for tenant, tokens in self.pending_tenant.pop(node_id, {}).items():
            self.tenant_tokens[tenant] -= tokens

    def routed(
        self,
        node_id: str,
        replica_id: str,
        tenant: str,
        tokens: int,
        replica_work: int,
        tpot_ms: float | None = None,
        priority: int = 0,
    ) -> None:
        """This scheduler sent a request to the replica: `tokens` of reserved work for the
        tenant (prompt + max_tokens, also its context at its largest), `replica_work` tokens
        queued ahead of the replica's next request (its prefill after the cached prefix, as
        the replica's queued_tokens will count it), a request of TPOT target `tpot_ms` and class
        priority `priority` in its slots; counted until the node's next report (which then
        includes it)."""
        slots = self.pending_slots.setdefault(node_id, {})
        slots[replica_id] = slots.get(replica_id, DecodeLoad()).plus(tokens, tpot_ms)
        self.pending_priorities.setdefault(node_id, {}).setdefault(replica_id, []).append(priority)
        per_replica = self.pending_replica.setdefault(node_id, {})
        per_replica[replica_id] = per_replica.get(replica_id, 0) + replica_work
        per_tenant = self.pending_tenant.setdefault(node_id, {})
        per_tenant[tenant] = per_tenant.get(tenant, 0) + tokens
        self.tenant_tokens[tenant] += tokens

    def pending_load(self, node_id: str, replica_id: str) -> DecodeLoad:
        """The requests routed to the replica since its node's last report."""
        per_replica = self.pending_slots.get(node_id)
        return per_replica.get(replica_id, DecodeLoad()) if per_replica else DecodeLoad()

    def pending_below(self, node_id: str, replica_id: str, priority: int) -> int:
        """How many of the requests routed to the replica since its node's last report are of
        a class below `priority`."""
        per_replica = self.pending_priorities.get(node_id)
        ranks = per_replica.get(replica_id, ()) if per_replica else ()
        return sum(1 for p in ranks if p < priority)

    def pending(self, node_id: str, replica_id: str) -> int:
        per_replica = self.pending_replica.get(node_id)
        return per_replica.get(replica_id, 0) if per_replica else 0

    def protected_other(self, tenant: str, admitted: float) -> bool:
        """Whether another tenant holding work is within its guarantee: someone a borrower
        would take room from."""
        for other, share in self.guarantees.items():
            if other != tenant and share > 0:
                held = self.tenant_tokens.get(other, 0)
                if 0 < held <= share * admitted:
                    return True
        return False

    def used_tokens(self) -> int:
        return sum(v for v in self.tenant_tokens.values() if v > 0)

    def mean_margin(self) -> float:
        return self.margin_sum / self.nodes if self.nodes > 0 else 0.0
