"""Protobuf <-> placement dataclasses for the planner; protobuf stops here."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable

from strata.policy.placement import (
    Decision,
    Explanation,
    NodeCapacity,
    PlacedReplica,
    PlacementPlan,
    RedLineCheck,
)
from strata.v1 import common_pb2, placement_pb2

# LOADING replicas already hold (or are taking) their memory; DRAINING ones are leaving and
# FAILED ones hold none, so neither counts toward a model's replicas.
OCCUPYING = (common_pb2.REPLICA_STATE_LOADING, common_pb2.REPLICA_STATE_READY)


def node_capacity(
    node: common_pb2.NodeInfo,
    memory_of: Callable[[str], int],
    managed: Collection[tuple[str, str]],
    extra: tuple[PlacedReplica, ...] = (),
) -> NodeCapacity:
    """A node as the policy sees it; `extra` adds replicas loaded but not yet heartbeated. A
    hot standby serves nothing, so it is no replica of its model, but its weights and pool
    take memory: the node offers that much less."""
    replicas = tuple(
        PlacedReplica(
            model=r.model,
            replica_id=r.replica_id,
            memory_bytes=memory_of(r.model),
            managed=(node.node_id, r.replica_id) in managed,
        )
        for r in node.replicas
        if r.state in OCCUPYING
    )
    standby = sum(
        memory_of(r.model) for r in node.replicas if r.state == common_pb2.REPLICA_STATE_STANDBY
    )
    return NodeCapacity(
        node_id=node.node_id,
        memory_bytes=max(0, node.memory_bytes - standby),
        replicas=replicas + extra,
    )


def plan_to_pb(
    plan: PlacementPlan,
    version: int,
    created_unix_ms: int,
    policy: str = "",
    rejected: bool = False,
    moves: Iterable[placement_pb2.PlacementMove] = (),
    cordoned: Iterable[str] = (),
) -> placement_pb2.PlacementPlan:
    return placement_pb2.PlacementPlan(
        version=version,
        created_unix_ms=created_unix_ms,
        assignments=[
            placement_pb2.PlacementAssignment(
                model=a.model, node_id=a.node_id, replica_id=a.replica_id, reason=a.reason
            )
            for a in plan.assignments
        ],
        unplaced_models=[u.model for u in plan.unplaced],
        policy=policy,
        rejected=rejected,
        moves=list(moves),
        cordoned_nodes=list(cordoned),
    )


def check_pb(c: RedLineCheck) -> placement_pb2.RedLineCheck:
    pb = placement_pb2.RedLineCheck(
        model=c.model,
        node_id=c.node_id,
        window=c.window,
        ttft_p99_ms=c.ttft_p99_ms,
        tpot_p99_ms=c.tpot_p99_ms,
        sla_class=c.sla.name,
        ok=c.ok,
        modelled=c.modelled,
        bursting=c.bursting,
    )
    if c.sla.ttft_ms is not None:
        pb.ttft_target_ms = c.sla.ttft_ms
    if c.sla.tpot_ms is not None:
        pb.tpot_target_ms = c.sla.tpot_ms
    return pb


def decision_pb(d: Decision) -> placement_pb2.PlacementDecision:
    return placement_pb2.PlacementDecision(
        action=d.action,
        model=d.model,
        replica_id=d.replica_id,
        node_id=d.node_id,
        from_node_id=d.from_node_id,
        reason=d.reason,
        benefit=d.benefit,
        migration_cost=d.migration_cost,
        window_loads=d.window_loads,
        pairs=[
            placement_pb2.PairBenefit(model=p.model, other=p.other, benefit=p.benefit)
            for p in d.pairs
        ],
        red_line=[check_pb(c) for c in d.red_line],
    )


def explanation_pb(
    e: Explanation,
    version: int,
    created_unix_ms: int,
    notes: Iterable[str],
    model: str = "",
    node_id: str = "",
) -> placement_pb2.PlacementExplanation:
    """The explanation, narrowed to one model's and/or one node's decisions when asked."""

    def wanted(d: Decision) -> bool:
        return (not model or d.model == model) and (
            not node_id or node_id in (d.node_id, d.from_node_id)
        )

    return placement_pb2.PlacementExplanation(
        plan_version=version,
        created_unix_ms=created_unix_ms,
        policy=e.policy,
        summary=e.summary(),
        rejected=e.rejected,
        window_s=e.window_s,
        windows=e.windows,
        decisions=[decision_pb(d) for d in e.decisions if wanted(d)],
        models=[
            placement_pb2.ModelPlacement(
                model=m.model,
                replicas=m.replicas,
                reason=m.reason,
                peak_rate=m.peak_rate,
                sla_class=m.sla,
            )
            for m in e.models
            if not model or m.model == model
        ],
        nodes=[
            placement_pb2.NodeWindowLoad(
                node_id=n.node_id,
                device=n.device,
                models=n.models,
                window_loads=n.window_loads,
                peak=n.peak,
                mean=n.mean,
            )
            for n in e.nodes
            if not node_id or n.node_id == node_id
        ],
        violations=[
            check_pb(v)
            for v in e.violations
            if (not model or v.model == model) and (not node_id or v.node_id == node_id)
        ],
        notes=list(notes),
    )
