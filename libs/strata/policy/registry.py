"""Node registry of the global scheduler: what each node last said in its heartbeat.

Everything here can be rebuilt from heartbeats, so a restarted scheduler is whole again after one
heartbeat interval. A node that has been silent for longer than the TTL is treated as gone at
once (reads filter by age) and is dropped from memory by `expire()`; the two are separate so that
routing never picks a dead node even when the background expiry runs late.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from strata.defaults import NODE_TTL_S
from strata.policy.clock import Clock


class ReplicaPhase(enum.Enum):
    """Mirrors strata.v1.ReplicaState; only READY replicas take new requests."""

    UNSPECIFIED = "unspecified"
    LOADING = "loading"
    READY = "ready"
    DRAINING = "draining"
    FAILED = "failed"


@dataclass(slots=True, frozen=True)
class ModelInfo:
    name: str
    context_length: int = 0
    memory_bytes: int = 0       # weights + default KV pool, as the node measured it


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
    kv_blocks_total: int = 0
    kv_blocks_free: int = 0
    waiting_for_memory: int = 0     # admitted requests held back: every KV tier is full


@dataclass(slots=True)
class NodeState:
    """One node as of its last heartbeat (strata.v1.NodeInfo plus the models it advertised)."""

    node_id: str
    address: str
    memory_bytes: int = 0
    device: str = ""
    replicas: tuple[ReplicaState, ...] = ()
    models: tuple[ModelInfo, ...] = ()
    last_seen: float = 0.0      # registry clock, set by NodeRegistry.heartbeat


@dataclass(slots=True, frozen=True)
class ReplicaLocation:
    """A replica together with the node that hosts it: what routing chooses between."""

    node: NodeState
    replica: ReplicaState


@dataclass(slots=True)
class NodeRegistry:
    clock: Clock
    ttl_s: float = NODE_TTL_S
    _nodes: dict[str, NodeState] = field(default_factory=dict)
    # Names ever advertised by any node: lets routing tell "unknown model" from "not ready now".
    _ever_seen: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        if self.ttl_s <= 0:
            raise ValueError(f"ttl_s must be positive, got {self.ttl_s}")

    def heartbeat(self, node: NodeState) -> None:
        """Replace what is known about node.node_id with this report, stamped now."""
        node.last_seen = self.clock.now()
        self._nodes[node.node_id] = node
        self._ever_seen.update(m.name for m in node.models)
        self._ever_seen.update(r.model for r in node.replicas)

    def expire(self) -> list[str]:
        """Forget nodes silent for longer than the TTL; returns their ids, sorted."""
        gone = sorted(n.node_id for n in self._nodes.values() if not self._alive(n))
        for node_id in gone:
            del self._nodes[node_id]
        return gone

    def nodes(self) -> list[NodeState]:
        """Live nodes, sorted by id."""
        return [self._nodes[k] for k in sorted(self._nodes) if self._alive(self._nodes[k])]

    def get(self, node_id: str) -> NodeState | None:
        node = self._nodes.get(node_id)
        return node if node is not None and self._alive(node) else None

    def ready_replicas(self, model: str) -> list[ReplicaLocation]:
        """READY replicas of `model` on live nodes, sorted by (node id, replica id)."""
        found = [ReplicaLocation(node, r) for node in self.nodes() for r in node.replicas
                 if r.model == model and r.phase is ReplicaPhase.READY]
        found.sort(key=lambda loc: (loc.node.node_id, loc.replica.replica_id))
        return found

    def replicas(self, model: str) -> list[ReplicaLocation]:
        """Replicas of `model` in any phase on live nodes, sorted by (node id, replica id)."""
        return [ReplicaLocation(node, r) for node in self.nodes()
                for r in sorted(node.replicas, key=lambda r: r.replica_id) if r.model == model]

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
