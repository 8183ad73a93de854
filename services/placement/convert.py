"""Protobuf <-> placement dataclasses for the planner; protobuf stops here."""

from __future__ import annotations

from collections.abc import Callable, Collection

from strata.policy.placement import NodeCapacity, PlacementPlan, Replica
from strata.rpc.v1 import common_pb2, placement_pb2

# LOADING replicas already hold (or are taking) their memory; DRAINING ones are leaving and
# FAILED ones hold none, so neither counts toward a model's replicas.
_OCCUPYING = (common_pb2.REPLICA_STATE_LOADING, common_pb2.REPLICA_STATE_READY)


def node_capacity(node: common_pb2.NodeInfo, memory_of: Callable[[str], int],
                  managed: Collection[tuple[str, str]],
                  extra: tuple[Replica, ...] = ()) -> NodeCapacity:
    """A node as the policy sees it; `extra` adds replicas loaded but not yet heartbeated."""
    replicas = tuple(
        Replica(model=r.model, replica_id=r.replica_id, memory_bytes=memory_of(r.model),
                managed=(node.node_id, r.replica_id) in managed)
        for r in node.replicas if r.state in _OCCUPYING)
    return NodeCapacity(node_id=node.node_id, memory_bytes=node.memory_bytes,
                        replicas=replicas + extra)


def plan_to_pb(plan: PlacementPlan, version: int, created_unix_ms: int) -> placement_pb2.PlacementPlan:
    return placement_pb2.PlacementPlan(
        version=version, created_unix_ms=created_unix_ms,
        assignments=[placement_pb2.PlacementAssignment(model=a.model, node_id=a.node_id,
                                                       replica_id=a.replica_id, reason=a.reason)
                     for a in plan.assignments],
        unplaced_models=[u.model for u in plan.unplaced])
