"""Baseline placement, first-fit-decreasing by memory: which node hosts which replica, and the
loads/unloads that get there. It ignores time; strata.policy.placement.batch_aware does not.

Input: the nodes (memory, replicas they run now) and the desired models (memory need, replica
count). Output: a PlacementPlan. The rules, in order:

1. Replicas the planner does not own (`managed=False`) of models outside the desired set are left
   alone; their memory is taken first.
2. Stability: an existing replica of a desired model is kept while its model still wants replicas,
   its node holds no other replica of that model, and it fits in what is left of the node's
   memory. Nodes are visited by id, replicas by id, so the same state keeps the same replicas.
3. Missing replicas are placed first-fit-decreasing: models by memory need, largest first, each
   replica on the first node (by id) with enough free memory and no replica of that model yet.
4. A replica that is not kept is unloaded if the planner owns it or its model is desired (surplus,
   a second copy on one node, or no longer fits); a model that fits nowhere is reported unplaced
   with the sizes that ruled it out.

Every assignment and unload carries a reason a person can read in a log or the plan.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(slots=True, frozen=True)
class PlacedReplica:
    """A replica a node runs now."""

    model: str
    replica_id: str
    memory_bytes: int  # what the replica occupies (used when the model is not desired)
    managed: bool = False  # placed by this planner earlier, so the planner may unload it


@dataclass(slots=True, frozen=True)
class NodeCapacity:
    node_id: str
    memory_bytes: int  # memory available to models on this node
    replicas: tuple[PlacedReplica, ...] = ()


@dataclass(slots=True, frozen=True)
class ModelDemand:
    name: str
    memory_bytes: int | None  # weights + KV pool per replica; None = unknown, cannot be placed
    replicas: int = 1

    def __post_init__(self) -> None:
        if self.replicas < 0:
            raise ValueError(f"replicas of {self.name} must be >= 0, got {self.replicas}")
        if self.memory_bytes is not None and self.memory_bytes <= 0:
            raise ValueError(
                f"memory_bytes of {self.name} must be positive, got {self.memory_bytes}"
            )


@dataclass(slots=True, frozen=True)
class Assignment:
    model: str
    node_id: str
    replica_id: str
    reason: str


@dataclass(slots=True, frozen=True)
class Unload:
    model: str
    node_id: str
    replica_id: str
    reason: str


@dataclass(slots=True, frozen=True)
class Unplaced:
    model: str
    missing: int  # replicas that could not be placed
    reason: str


@dataclass(slots=True)
class PlacementPlan:
    assignments: list[Assignment] = field(default_factory=list)  # kept + new, by (model, node)
    loads: list[Assignment] = field(default_factory=list)  # the new ones
    unloads: list[Unload] = field(default_factory=list)
    unplaced: list[Unplaced] = field(default_factory=list)


def new_replica_id(model: str, node_id: str) -> str:
    """Deterministic, and unique because a node holds at most one replica of a model."""
    return f"{model}@{node_id}"


def plan_placement(nodes: Sequence[NodeCapacity], models: Sequence[ModelDemand]) -> PlacementPlan:
    demand: dict[str, ModelDemand] = {}
    for m in models:
        if m.name in demand:
            raise ValueError(f"model {m.name} is listed twice in the desired models")
        demand[m.name] = m
    ordered = sorted(nodes, key=lambda n: n.node_id)
    free = {n.node_id: n.memory_bytes for n in ordered}
    hosted: dict[str, set[str]] = {n.node_id: set() for n in ordered}
    kept: dict[str, int] = defaultdict(int)
    plan = PlacementPlan()

    for node in ordered:
        for r in node.replicas:
            if r.model not in demand and not r.managed:
                free[node.node_id] -= r.memory_bytes

    for node in ordered:
        for r in sorted(node.replicas, key=lambda r: r.replica_id):
            nid = node.node_id
            want = demand.get(r.model)
            if want is None:
                if r.managed:
                    plan.unloads.append(
                        Unload(
                            r.model, nid, r.replica_id, f"{r.model} is no longer a desired model"
                        )
                    )
                continue
            need = want.memory_bytes if want.memory_bytes is not None else r.memory_bytes
            if kept[r.model] >= want.replicas:
                reason = (
                    f"{r.model} already has {kept[r.model]} kept replica(s), "
                    f"{want.replicas} desired"
                )
            elif r.model in hosted[nid]:
                reason = f"a second replica of {r.model} on {nid}; at most one per node"
            elif need > free[nid]:
                reason = f"no longer fits: needs {need} bytes, {free[nid]} free on {nid}"
            else:
                free[nid] -= need
                hosted[nid].add(r.model)
                kept[r.model] += 1
                plan.assignments.append(
                    Assignment(
                        r.model,
                        nid,
                        r.replica_id,
                        f"kept: already on {nid}, needs {need} bytes, {free[nid]} left free",
                    )
                )
                continue
            plan.unloads.append(Unload(r.model, nid, r.replica_id, reason))

    placeable = [m for m in demand.values() if kept[m.name] < m.replicas]
    for m in sorted(placeable, key=lambda m: (-(m.memory_bytes or 0), m.name)):
        missing = m.replicas - kept[m.name]
        if m.memory_bytes is None:
            plan.unplaced.append(
                Unplaced(
                    m.name,
                    missing,
                    (
                        f"memory need of {m.name} is unknown: it is not in the model size "
                        f"table and no override was given"
                    ),
                )
            )
            continue
        while missing:
            target = next(
                (
                    n.node_id
                    for n in ordered
                    if m.name not in hosted[n.node_id] and free[n.node_id] >= m.memory_bytes
                ),
                None,
            )
            if target is None:
                plan.unplaced.append(
                    Unplaced(m.name, missing, _why_unplaced(m, ordered, free, hosted))
                )
                break
            before = free[target]
            free[target] -= m.memory_bytes
            hosted[target].add(m.name)
            missing -= 1
            added = Assignment(
                m.name,
                target,
                new_replica_id(m.name, target),
                (f"first-fit-decreasing: needs {m.memory_bytes} bytes, {before} free on {target}"),
            )
            plan.assignments.append(added)
            plan.loads.append(added)

    plan.assignments.sort(key=lambda a: (a.model, a.node_id))
    return plan


def _why_unplaced(
    m: ModelDemand, nodes: Sequence[NodeCapacity], free: dict[str, int], hosted: dict[str, set[str]]
) -> str:
    if not nodes:
        return f"needs {m.memory_bytes} bytes, but no nodes are registered"
    eligible = [free[n.node_id] for n in nodes if m.name not in hosted[n.node_id]]
    if not eligible:
        return (
            f"needs {m.memory_bytes} bytes, but all {len(nodes)} node(s) already hold a "
            f"replica of {m.name} and a node holds at most one"
        )
    return (
        f"needs {m.memory_bytes} bytes, largest free {max(eligible)} bytes on a node "
        f"without a replica of {m.name}"
    )
