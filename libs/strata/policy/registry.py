"""Node registry of the global scheduler: what each node last said in its heartbeat.

Everything here can be rebuilt from heartbeats, so a restarted scheduler is whole again after one
heartbeat interval. A node that has been silent for longer than the TTL is treated as gone at
once (reads filter by age) and is dropped from memory by `expire()`; the two are separate so that
routing never picks a dead node even when the background expiry runs late.

Routing reads READY replicas per model from an index kept up to date on each heartbeat (O(the
node's replicas)), not by scanning every node per request: a scan and sort per decision grows
with the pool (measurements: docs/design/scheduling.md). A listener (the pool ledger) is told of
every change.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field

from strata.core.defaults import NODE_TTL_S
from strata.core.step_model import StepLine
from strata.policy.clock import Clock
from strata.policy.scheduling.delays import ClassDelays
from strata.policy.scheduling.prefill_ahead import ClassTokens
from strata.policy.scheduling.slo import DecodeLoad


class ReplicaPhase(enum.Enum):
    """Mirrors strata.v1.ReplicaState; only READY replicas take new requests."""

    UNSPECIFIED = "unspecified"
    LOADING = "loading"
    READY = "ready"
    DRAINING = "draining"
    FAILED = "failed"
    STANDBY = "standby"  # loaded and warm, takes no request until its node promotes it


@dataclass(slots=True, frozen=True)
class ModelInfo:
    name: str
    context_length: int = 0
    memory_bytes: int = 0  # weights + default KV pool, as the node measured it


@dataclass(slots=True, frozen=True)
class ReplicaState:
    """One replica as its node reported it (strata.v1.ReplicaInfo)."""

    model: str
    replica_id: str
    phase: ReplicaPhase
    worker_address: str = ""
    running_requests: int = 0
    waiting_requests: int = 0
    queued_tokens: int = 0
    # queued_tokens by the priority of their requests (empty: not split; every token then counts
    # ahead of every class: strata.policy.scheduling.prefill_ahead)
    queued_by_class: ClassTokens = ()
    kv_blocks_total: int = 0
    kv_blocks_free: int = 0
    waiting_for_memory: int = 0  # admitted requests held back: every KV tier is full
    tokens_per_s: float = 0.0  # tokens computed per busy second, measured (0 = not yet)
    block_size: int = 0  # tokens per KV block, as the worker reported (0 = not yet)
    max_seqs: int = 0
    # The step-time line the worker learned online (strata.core.step_model); None when the
    # node reported none (or a malformed one).
    step_line: StepLine | None = None
    # What the node handed to its engine: the scheduler's TPOT check prices adding to it.
    slots: DecodeLoad = DecodeLoad()
    slot_turnover_s: float = 0.0  # seconds between slot releases while full (0: not measured)
    max_batched_tokens: int = 0  # tokens one engine step computes at most (0 = not reported)
    # What requests lately waited for a first token beyond their own prefill, by class
    # (strata.policy.scheduling.delays; empty: none lately).
    class_delays: ClassDelays = ()
    # The longest step the replica's running decodes allowed at its report, ms: their
    # tightest TPOT target x headroom plus the slack they lend (0: nothing lent;
    # strata.policy.scheduling.slo.decode_allowance_ms).
    step_allowance_ms: float = 0.0


@dataclass(slots=True, frozen=True)
class TenantLoad:
    """What one tenant has on one node (strata.v1.TenantLoad)."""

    tenant: str
    priority: int = 1
    running: int = 0
    queued: int = 0
    tokens: int = 0  # work tokens reserved by its requests there (prompt + max_tokens)
    running_best_effort: int = 0  # of `running`, those with no TTFT target


@dataclass(slots=True)
class NodeState:
    """One node as of its last heartbeat (strata.v1.NodeInfo plus the models it advertised)."""

    node_id: str
    address: str
    memory_bytes: int = 0
    device: str = ""
    replicas: tuple[ReplicaState, ...] = ()
    models: tuple[ModelInfo, ...] = ()
    tenants: tuple[TenantLoad, ...] = ()
    interference: float = 1.0  # observed step time / solo profile (1 = none)
    safety_margin: float = 0.0  # headroom the node asks for (0.2 = plan with 20% to spare)
    standby_workers: int = 0
    # Route ids of requests the node received lately (strata.policy.scheduling.arrivals): this
    # report includes them, so the ledger stops counting them as routed-but-unreported.
    arrived_routes: frozenset[str] = frozenset()
    last_seen: float = 0.0  # registry clock, set by NodeRegistry.heartbeat


@dataclass(slots=True, frozen=True)
class ReplicaLocation:
    """A replica together with the node that hosts it: what routing chooses between."""

    node: NodeState
    replica: ReplicaState


class _ReadySet:
    """The READY replicas of one model: a list for O(1) random picks, positions for O(1)
    swap-removal, and each node's entries for prefix lookups by node. `members` counts the
    changes to which nodes hold one (a node's report replacing its last one is not a change)."""

    __slots__ = ("items", "pos", "by_node", "members")

    def __init__(self) -> None:
        self.items: list[ReplicaLocation] = []
        self.pos: dict[tuple[str, str], int] = {}
        self.by_node: dict[str, list[ReplicaLocation]] = {}
        self.members = 0

    def add(self, loc: ReplicaLocation) -> None:
        self.pos[(loc.node.node_id, loc.replica.replica_id)] = len(self.items)
        self.items.append(loc)
        self.by_node.setdefault(loc.node.node_id, []).append(loc)

    def remove_node(self, node_id: str) -> None:
        for loc in self.by_node.pop(node_id, ()):
            i = self.pos.pop((node_id, loc.replica.replica_id))
            last = self.items.pop()
            if i < len(self.items):
                self.items[i] = last
                self.pos[(last.node.node_id, last.replica.replica_id)] = i


# Told of every change to a node's report: (previous report or None, new report or None).
NodeListener = Callable[["NodeState | None", "NodeState | None"], None]


@dataclass(slots=True)
class NodeRegistry:
    clock: Clock
    ttl_s: float = NODE_TTL_S
    listener: NodeListener | None = None
    _nodes: dict[str, NodeState] = field(default_factory=dict)
    # Names ever advertised by any node: lets routing tell "unknown model" from "not ready now".
    _ever_seen: set[str] = field(default_factory=set)
    _ready: dict[str, _ReadySet] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.ttl_s <= 0:
            raise ValueError(f"ttl_s must be positive, got {self.ttl_s}")

    def heartbeat(self, node: NodeState) -> None:
        """Replace what is known about node.node_id with this report, stamped now."""
        node.last_seen = self.clock.now()
        old = self._nodes.get(node.node_id)
        self._nodes[node.node_id] = node
        if old is node:
            return  # the same report object again (the simulator's unchanged node): only stamped
        self._ever_seen.update(m.name for m in node.models)
        self._ever_seen.update(r.model for r in node.replicas)
        was_ready = _ready_models(old)
        self._unindex(old, was_ready)
        for r in node.replicas:
            if r.phase is ReplicaPhase.READY:
                ready = self._ready.get(r.model)
                if ready is None:
                    ready = self._ready[r.model] = _ReadySet()
                ready.add(ReplicaLocation(node, r))
        for model in was_ready ^ _ready_models(node):
            self._ready[model].members += 1
        if self.listener is not None:
            self.listener(old, node)

    def expire(self) -> list[str]:
        """Forget nodes silent for longer than the TTL; returns their ids, sorted."""
        gone = sorted(n.node_id for n in self._nodes.values() if not self._alive(n))
        for node_id in gone:
            old = self._nodes.pop(node_id)
            was_ready = _ready_models(old)
            self._unindex(old, was_ready)
            for model in was_ready:
                self._ready[model].members += 1
            if self.listener is not None:
                self.listener(old, None)
        return gone

    def _unindex(self, old: NodeState | None, models: set[str]) -> None:
        """Take `old` (the node's last report; `models`: those it had READY) out of the index."""
        if old is None:
            return
        for model in models:
            ready = self._ready.get(model)
            if ready is not None:
                ready.remove_node(old.node_id)

    def ready_index(
        self, model: str
    ) -> tuple[list[ReplicaLocation], dict[str, list[ReplicaLocation]]]:
        """The indexed READY replicas of `model` (in no particular order) and the same by node.
        Shared, not copies: read them, never change them. Silent nodes are still in it until
        expire(): check `alive()` on what you pick."""
        ready = self._ready.get(model)
        if ready is None:
            return [], {}
        return ready.items, ready.by_node

    def ready_members(self, model: str) -> int:
        """Changes so far to which nodes hold a READY replica of `model` (0: none ever): equal
        counts mean the same nodes, whatever their reports say meanwhile."""
        ready = self._ready.get(model)
        return ready.members if ready is not None else 0

    def alive(self, node: NodeState) -> bool:
        return self._alive(node)

    def nodes(self) -> list[NodeState]:
        """Live nodes, sorted by id."""
        return [self._nodes[k] for k in sorted(self._nodes) if self._alive(self._nodes[k])]

    def get(self, node_id: str) -> NodeState | None:
        node = self._nodes.get(node_id)
        return node if node is not None and self._alive(node) else None

    def ready_replicas(self, model: str) -> list[ReplicaLocation]:
        """READY replicas of `model` on live nodes, sorted by (node id, replica id)."""
        found = [
            ReplicaLocation(node, r)
            for node in self.nodes()
            for r in node.replicas
            if r.model == model and r.phase is ReplicaPhase.READY
        ]
        found.sort(key=lambda loc: (loc.node.node_id, loc.replica.replica_id))
        return found

    def replicas(self, model: str) -> list[ReplicaLocation]:
        """Replicas of `model` in any phase on live nodes, sorted by (node id, replica id)."""
        return [
            ReplicaLocation(node, r)
            for node in self.nodes()
            for r in sorted(node.replicas, key=lambda r: r.replica_id)
            if r.model == model
        ]

    def models(self) -> list[ModelInfo]:
        """Models advertised by live nodes, one per name (the lowest node id wins), by name."""
        by_name: dict[str, ModelInfo] = {}
        for node in self.nodes():
            for info in node.models:
                by_name.setdefault(info.name, info)
        return [by_name[k] for k in sorted(by_name)]

    def knows_model(self, model: str) -> bool:
        """True once any node has ever advertised the model, even if that node is gone now."""
        return model in self._ever_seen

    def known_models(self) -> list[str]:
        return sorted(self._ever_seen)

    def _alive(self, node: NodeState) -> bool:
        return self.clock.now() - node.last_seen <= self.ttl_s


def _ready_models(node: NodeState | None) -> set[str]:
    """The models `node` reports a READY replica of (none for None)."""
    if node is None:
        return set()
    return {r.model for r in node.replicas if r.phase is ReplicaPhase.READY}
