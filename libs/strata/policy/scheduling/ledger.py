"""The pool ledger: how much work each tenant holds in the pool, and how much the pool can hold.

Kept up to date from the node registry's heartbeats (each node reports its tenants' reserved work
tokens and its replicas' KV pools), plus what this scheduler routed that its node has not yet
reported: a route counts until a report of its node lists its route id among the requests the
node received (strata.policy.scheduling.arrivals: a report taken before the request arrived
does not include it), or until `pending_ttl_s` after it was routed (it never arrived). Everything
here is rebuilt from heartbeats within one interval after a restart.

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

Updates cost O(the node's replicas, tenants and unreported routes); reads O(1), or O(the
classes among a replica's unreported routes) for the per-replica ones, kept as running sums:
admission and routing read the ledger on every request (the router once per scored replica),
heartbeats come every second from every node.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from strata.core.blocks import block_tokens
from strata.policy.registry import NodeState, ReplicaPhase
from strata.policy.scheduling.prefill_ahead import ClassTokens, class_tokens
from strata.policy.scheduling.slo import DecodeLoad

PENDING_TTL_S = 10.0  # a route its node never reported stops counting this long after it


@dataclass(slots=True, frozen=True)
class PendingRoute:
    """A request this scheduler routed, not yet in a report of its node."""

    replica_id: str
    tenant: str
    tokens: int  # reserved work: prompt + max_tokens (also its context at its largest)
    replica_work: int  # tokens it queues ahead of the replica's next request
    tpot_ms: float | None
    priority: int
    at: float  # the registry's clock when it was routed


@dataclass(slots=True)
class _Unreported:
    """The running sums of one replica's unreported routes."""

    seqs: int = 0
    tokens: int = 0
    work: int = 0
    tpots: dict[float, int] = field(default_factory=dict)  # TPOT target -> routes with it
    priorities: dict[int, int] = field(default_factory=dict)  # class priority -> routes
    work_by_priority: dict[int, int] = field(default_factory=dict)  # class priority -> work

    def add(self, p: PendingRoute, sign: int) -> None:
        self.seqs += sign
        self.tokens += sign * p.tokens
        self.work += sign * p.replica_work
        if p.replica_work:
            _count(self.work_by_priority, p.priority, sign * p.replica_work)
        if p.tpot_ms is not None and p.tpot_ms > 0:
            _count(self.tpots, p.tpot_ms, sign)
        _count(self.priorities, p.priority, sign)


def _count(counts: dict, key: object, sign: int) -> None:
    """Add `sign` to counts[key]; a key whose count reaches 0 is removed."""
    n = counts.get(key, 0) + sign
    if n:
        counts[key] = n
    else:
        del counts[key]


@dataclass(slots=True)
class PoolLedger:
    horizon_s: float = 5.0
    capacity_tokens: float = 0.0
    tokens_per_s: float = 0.0
    margin_sum: float = 0.0  # of the nodes' safety margins (mean = / nodes)
    nodes: int = 0
    tenant_tokens: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    pending_ttl_s: float = PENDING_TTL_S
    # node id -> route id -> a request routed there that no report of the node has listed
    unreported: dict[str, dict[str, PendingRoute]] = field(default_factory=dict)
    # (node id, replica id) -> the running sums of those routes
    _sums: dict[tuple[str, str], _Unreported] = field(default_factory=dict)
    # tenant -> its guaranteed share, as its latest request said (soft state: requests bring
    # it back after a restart)
    guarantees: dict[str, float] = field(default_factory=dict)

    def __call__(self, old: NodeState | None, new: NodeState | None) -> None:
        """The registry's listener: replace `old`'s contribution by `new`'s; the routes `new`
        lists as received, and those older than `pending_ttl_s` by its stamp, stop counting (all
        of the node's when it is gone)."""
        if old is not None:
            self._add(old, -1)
        if new is not None:
            self._add(new, +1)
            self._settle(new.node_id, new.arrived_routes, new.last_seen)
        elif old is not None:
            for pending in self.unreported.pop(old.node_id, {}).values():
                self.tenant_tokens[pending.tenant] -= pending.tokens
                self._sum(old.node_id, pending, -1)

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

    def _settle(self, node_id: str, arrived: frozenset[str], now: float) -> None:
        routes = self.unreported.get(node_id)
        if not routes:
            return
        done = [
            rid for rid, p in routes.items() if rid in arrived or now - p.at > self.pending_ttl_s
        ]
        for rid in done:
            pending = routes.pop(rid)
            self.tenant_tokens[pending.tenant] -= pending.tokens
            self._sum(node_id, pending, -1)
        if not routes:
            del self.unreported[node_id]

    def routed(self, node_id: str, route_id: str, pending: PendingRoute) -> None:
        """This scheduler sent a request to `pending.replica_id` on `node_id` as `route_id`:
        its reserved work counts against its tenant, and it counts in the replica's slots and
        queued work, until a report of the node lists `route_id` (module docstring)."""
        self.unreported.setdefault(node_id, {})[route_id] = pending
        self.tenant_tokens[pending.tenant] += pending.tokens
        self._sum(node_id, pending, +1)

    def _sum(self, node_id: str, pending: PendingRoute, sign: int) -> None:
        key = (node_id, pending.replica_id)
        sums = self._sums.get(key)
        if sums is None:
            sums = self._sums[key] = _Unreported()
        sums.add(pending, sign)
        if sums.seqs == 0:
            del self._sums[key]

    def pending_routes(self, node_id: str, replica_id: str) -> tuple[int, int]:
        """(the tokens they queue ahead, how many they are) of the requests routed to the
        replica that its node has not reported yet: the router's one lookup per replica."""
        sums = self._sums.get((node_id, replica_id))  # once per scored replica
        return (sums.work, sums.seqs) if sums is not None else (0, 0)

    def pending_requests(self, node_id: str, replica_id: str) -> int:
        """How many requests were routed to the replica that its node has not reported yet."""
        return self.pending_routes(node_id, replica_id)[1]

    def pending_load(self, node_id: str, replica_id: str) -> DecodeLoad:
        """The requests routed to the replica that its node has not reported yet."""
        sums = self._sums.get((node_id, replica_id))
        if sums is None:
            return DecodeLoad()
        return DecodeLoad(sums.seqs, sums.tokens, min(sums.tpots) if sums.tpots else None)

    def pending_below(self, node_id: str, replica_id: str, priority: int) -> int:
        """How many of the requests routed to the replica that its node has not reported yet
        are of a class below `priority`."""
        sums = self._sums.get((node_id, replica_id))
        if sums is None:
            return 0
        return sum(n for p, n in sums.priorities.items() if p < priority)

    def pending_by_class(self, node_id: str, replica_id: str) -> ClassTokens:
        """pending()'s tokens by the priority of the requests they belong to."""
        sums = self._sums.get((node_id, replica_id))
        return class_tokens(sums.work_by_priority) if sums is not None else ()

    def pending(self, node_id: str, replica_id: str) -> int:
        """The tokens those requests queue ahead of the replica's next request."""
        sums = self._sums.get((node_id, replica_id))  # once per scored replica
        return sums.work if sums is not None else 0

    def routed_since(self, node_id: str, replica_id: str) -> list[tuple[float, int]]:
        """(when, prompt tokens to compute) of each request routed to the replica that its node
        has not reported yet (strata.policy.scheduling.backlog)."""
        routes = self.unreported.get(node_id)
        if not routes:
            return []
        return [(p.at, p.replica_work) for p in routes.values() if p.replica_id == replica_id]

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
