"""Batch-aware placement: pack replicas so that peaks that alternate share GPUs, starting from the
current placement and keeping every model's P99 within its class's targets in every window.

One round, online (it starts from what runs now and moves as little as it can):

1. Replica counts: each model gets max(its configured replicas, what its busiest window needs
   at one replica's batch capacity), at most one per node (strata.policy.placement.loads).
2. Keep: replicas that run now are kept while their model wants them, their node holds no other
   replica of the model and they fit in memory (as the baseline does); of a model with more than
   it wants, the ones whose removal frees the most (a whole GPU, else peak load) go first.
3. Repair: a GPU whose replicas break the red line gives up replicas (the cheapest move that
   restores it, else the heaviest) until it holds; they are placed again in 4, as forced moves.
4. Place: missing and evicted replicas, heaviest peak load first, each on the GPU with the best
   score (pair benefit against the GPU's load, then a used GPU, then the fuller one) among those
   with memory, no replica of the model, window loads that stay <= 1 with it (vector bin
   packing over the windows) and a red line that still holds with it.
5. Improve (strata.policy.placement.improve): moves of single replicas or of every replica of
   a GPU, each taken only when the GPUs and peak capacity it frees exceed its migration cost.
6. Red line: every GPU is judged again with the replica counts actually placed; any violation
   rejects the plan (`applicable()` then loads only models that have no replica at all, since
   a model without one serves nobody, and moves or unloads nothing).

Ties are broken by node id and model name, so the same input always gives the same plan.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from strata.policy.placement.benefit import MigrationCost, peak
from strata.policy.placement.capacity import SlaTarget
from strata.policy.placement.curves import ArrivalCurve
from strata.policy.placement.explain import Explanation, ModelPlan
from strata.policy.placement.ffd import (
    Assignment,
    ModelDemand,
    NodeCapacity,
    PlacementPlan,
    Unload,
    Unplaced,
    new_replica_id,
)
from strata.policy.placement.improve import Move, improve
from strata.policy.placement.loads import CostsLookup, WindowLoads
from strata.policy.placement.red_line import RedLine
from strata.policy.placement.report import explain_round
from strata.policy.placement.working import Gpu, Slot, Working, low_id_first

POLICY = "batch-aware"


@dataclass(slots=True, frozen=True)
class BatchAwareSettings:
    migration: MigrationCost = MigrationCost()
    max_moves: int = 8  # optional moves per round; forced ones do not count

    def __post_init__(self) -> None:
        if self.max_moves < 0:
            raise ValueError(f"max_moves must be >= 0, got {self.max_moves}")


@dataclass(slots=True)
class BatchAwareResult:
    plan: PlacementPlan
    moves: list[Move]
    explanation: Explanation
    had_replicas: frozenset[str] = frozenset()  # models with a replica before the round

    @property
    def rejected(self) -> bool:
        return self.explanation.rejected

    def applicable(self) -> PlacementPlan:
        """What to apply: the plan, or after a rejection the placement as it is (nothing moves
        or unloads) plus the loads of models that had no replica at all (serving them late
        beats not serving them)."""
        if not self.rejected:
            return self.plan
        new = {(a.model, a.node_id) for a in self.plan.loads}
        stays = [a for a in self.plan.assignments if (a.model, a.node_id) not in new]
        stays += [
            Assignment(
                u.model,
                u.node_id,
                u.replica_id,
                f"stays: the plan was rejected by the red line (it would have: {u.reason})",
            )
            for u in self.plan.unloads
        ]
        loads = [a for a in self.plan.loads if a.model not in self.had_replicas]
        return PlacementPlan(
            assignments=sorted(stays + loads, key=lambda a: (a.model, a.node_id)),
            loads=loads,
            unplaced=self.plan.unplaced,
        )


@dataclass(slots=True)
class _Round:
    working: Working
    demand: dict[str, ModelDemand]
    unloads: list[Unload] = field(default_factory=list)
    unplaced: list[Unplaced] = field(default_factory=list)
    forced: list[Move] = field(default_factory=list)
    reference: str = "gpu"  # the most common GPU kind: replica counts and order use it


def plan_batch_aware(
    nodes: Sequence[NodeCapacity],
    models: Sequence[ModelDemand],
    curves: Mapping[str, ArrivalCurve],
    sla: Mapping[str, SlaTarget],
    costs: CostsLookup,
    *,
    devices: Mapping[str, str] | None = None,
    settings: BatchAwareSettings = BatchAwareSettings(),
    capacity_cache: dict | None = None,
) -> BatchAwareResult:
    """One round (module docstring). `devices` maps node id -> GPU kind for `costs` (default
    "gpu" for every node); `capacity_cache` may be kept across rounds."""
    demand: dict[str, ModelDemand] = {}
    for m in models:
        if m.name in demand:
            raise ValueError(f"model {m.name} is listed twice in the desired models")
        demand[m.name] = m
    windows = _windows(curves)
    window_s = next(iter(curves.values())).window_s if curves else 0.0
    loads = WindowLoads(
        windows, {k: v for k, v in curves.items() if k in demand}, sla, costs, capacity_cache
    )
    ordered = sorted(nodes, key=lambda n: n.node_id)
    devices = devices or {}
    gpus = [
        Gpu(n.node_id, devices.get(n.node_id, "gpu"), n.memory_bytes, np.zeros(windows))
        for n in ordered
    ]
    reference = Counter(g.device for g in gpus).most_common(1)[0][0] if gpus else "gpu"
    counts = {
        m: loads.decide_replicas(m, d.replicas, reference, len(gpus))
        for m, d in sorted(demand.items())
    }
    rnd = _Round(Working(gpus, loads, RedLine(loads)), demand, reference=reference)
    had = frozenset(r.model for n in ordered for r in n.replicas if r.model in demand)

    _keep(rnd, ordered, counts)
    _repair(rnd, settings.migration)
    _place_missing(rnd, counts)
    optional = improve(rnd.working, settings.migration, settings.max_moves)

    # The red line is judged on the replica counts actually placed, which may fall short.
    placed = Counter(s.model for g in gpus for s in g.slots)
    loads.replicas.update({m: max(1, placed[m]) for m in demand})
    loads.reset()
    rnd.working.red_line = RedLine(loads)
    rnd.working.refresh()
    moves = rnd.forced + optional
    explanation = explain_round(
        rnd.working, POLICY, window_s, moves, rnd.unloads, rnd.unplaced, settings.migration
    )
    explanation.models = [
        ModelPlan(
            m,
            placed[m],
            counts[m].reason,
            curves[m].peak_rate if m in curves else 0.0,
            loads.target(m).name,
        )
        for m in sorted(demand)
    ]
    return BatchAwareResult(_plan(gpus, rnd, moves), moves, explanation, had)


def _windows(curves: Mapping[str, ArrivalCurve]) -> int:
    sizes = {(c.windows, c.window_s) for c in curves.values()}
    if len(sizes) > 1:
        raise ValueError(
            f"every arrival curve must have the same windows, got {sorted(sizes)} (count, seconds)"
        )
    return next(iter(sizes))[0] if sizes else 0


def _keep(rnd: _Round, ordered: Sequence[NodeCapacity], counts: Mapping) -> None:
    w = rnd.working
    by_id = {g.node_id: g for g in w.gpus}
    for node in ordered:
        for r in node.replicas:
            if r.model not in rnd.demand and not r.managed:
                by_id[node.node_id].foreign_memory += r.memory_bytes
                by_id[node.node_id].foreign += 1
    for node in ordered:
        gpu = by_id[node.node_id]
        for r in sorted(node.replicas, key=lambda r: r.replica_id):
            want = rnd.demand.get(r.model)
            if want is None:
                if r.managed:
                    rnd.unloads.append(
                        Unload(
                            r.model,
                            gpu.node_id,
                            r.replica_id,
                            f"{r.model} is no longer a desired model",
                        )
                    )
                continue
            need = want.memory_bytes if want.memory_bytes is not None else r.memory_bytes
            if counts[r.model].replicas == 0:
                reason = f"{r.model} is configured with 0 replicas"
            elif gpu.hosts(r.model):
                reason = f"a second replica of {r.model} on {gpu.node_id}; at most one per node"
            elif need > gpu.free:
                reason = f"no longer fits: needs {need} bytes, {gpu.free} free on {gpu.node_id}"
            else:
                w.add(
                    gpu,
                    Slot(
                        r.model,
                        r.replica_id,
                        need,
                        gpu.node_id,
                        r.replica_id,
                        f"kept: already on {gpu.node_id}",
                    ),
                )
                continue
            rnd.unloads.append(Unload(r.model, gpu.node_id, r.replica_id, reason))
    for model, count in sorted(counts.items()):
        _trim(rnd, model, count.replicas)


def _trim(rnd: _Round, model: str, wanted: int) -> None:
    """Unload surplus replicas of `model`, freeing the most (a GPU, else peak) first."""
    w = rnd.working
    while True:
        hosting = [g for g in w.gpus if g.hosts(model)]
        if len(hosting) <= wanted:
            return

        def freed(g: Gpu) -> float:
            rest = g.load - w.load_of(model, g)
            emptied = len(g.slots) == 1 and g.foreign == 0
            return round((1.0 if emptied else 0.0) + peak(g.load) - peak(rest), 12)

        gpu = max(hosting, key=lambda g: (freed(g), low_id_first(g.node_id)))
        amount = freed(gpu)
        slot = next(s for s in gpu.slots if s.model == model)
        w.remove(gpu, slot)
        rnd.unloads.append(
            Unload(
                model,
                gpu.node_id,
                slot.replica_id,
                (
                    f"{model} plans {wanted} replica(s) and {len(hosting)} run; unloading this one "
                    f"frees the most: {amount:.3f} GPU"
                ),
            )
        )


def _repair(rnd: _Round, migration: MigrationCost) -> None:
    w = rnd.working
    for gpu in w.gpus:
        while gpu.slots and not w.red_line.holds(gpu.device, gpu.models()):
            broken = [
                c.describe()
                for c in w.red_line.check(gpu.node_id, gpu.device, gpu.models())
                if not c.ok
            ]
            fixes = [
                s
                for s in gpu.slots
                if w.red_line.holds(gpu.device, [m for m in gpu.models() if m != s.model])
            ]
            if fixes:
                slot = min(fixes, key=lambda s: (s.memory, s.model))
            else:
                slot = max(gpu.slots, key=lambda s: (peak(w.load_of(s.model, gpu)), s.model))
            w.remove(gpu, slot)
            rnd.forced.append(
                Move(
                    slot.model,
                    gpu.node_id,
                    slot.replica_id,
                    "",
                    "",
                    True,
                    0.0,
                    migration.of(slot.memory),
                    f"forced: the red line breaks on {gpu.node_id} ({'; '.join(broken)})",
                )
            )


def _place_missing(rnd: _Round, counts: Mapping) -> None:
    w = rnd.working
    pending: list[tuple[str, Move | None]] = [(m.model, m) for m in rnd.forced]
    for model, count in sorted(counts.items()):
        have = sum(g.hosts(model) for g in w.gpus) + sum(m.model == model for m in rnd.forced)
        pending += [(model, None)] * (count.replicas - have)

    def heaviness(item: tuple[str, Move | None]) -> tuple:
        model, move = item
        load = peak(w.loads.load(model, rnd.reference))
        return (
            -load,
            -(rnd.demand[model].memory_bytes or 0),
            model,
            move.from_node if move else "~",
        )

    missing: Counter = Counter()
    reasons: dict[str, str] = {}
    for model, move in sorted(pending, key=heaviness):
        memory = rnd.demand[model].memory_bytes
        if memory is None:
            missing[model] += 1
            reasons[model] = (
                f"memory need of {model} is unknown: it is not in the model size "
                f"table and no override was given"
            )
            continue
        exclude = {move.from_node} if move else set()
        target = w.best_target(model, memory, exclude)
        if target is None:
            if move is not None:  # nowhere better: it stays, and the red line will say so
                origin = next(g for g in w.gpus if g.node_id == move.from_node)
                w.add(
                    origin,
                    Slot(
                        model,
                        move.from_replica,
                        memory,
                        origin.node_id,
                        move.from_replica,
                        f"kept: {move.reason}; no other node keeps the red line with it",
                    ),
                )
                rnd.forced.remove(move)
                continue
            missing[model] += 1
            reasons[model] = _why_unplaced(w, model, memory)
            continue
        score = w.score(target, model)
        reason = (
            f"batch-aware: pair benefit {score[0]:.3f} GPU against {target.node_id}'s "
            f"load, {target.free} bytes free, red line holds"
        )
        w.add(target, Slot(model, new_replica_id(model, target.node_id), memory, None, "", reason))
        if move is not None:
            move.to_node, move.to_replica = target.node_id, new_replica_id(model, target.node_id)
            target.slots[-1].origin, target.slots[-1].moved = move.from_node, True
            target.slots[-1].origin_replica_id = move.from_replica
            target.slots[-1].reason = f"{move.reason}; moved here, {reason}"
    rnd.unplaced += [Unplaced(m, n, reasons[m]) for m, n in sorted(missing.items())]


def _why_unplaced(w: Working, model: str, memory: int) -> str:
    if not w.gpus:
        return f"needs {memory} bytes, but no nodes are registered"
    room = [g for g in w.gpus if w.fits(g, model, memory)]
    if not room:
        eligible = [g.free for g in w.gpus if not g.hosts(model)]
        if not eligible:
            return (
                f"needs {memory} bytes, but all {len(w.gpus)} node(s) already hold a "
                f"replica of {model} and a node holds at most one"
            )
        return (
            f"needs {memory} bytes, largest free {max(eligible)} bytes on a node without "
            f"a replica of {model}"
        )
    g = room[0]
    broken = [
        c.describe()
        for c in w.red_line.check(g.node_id, g.device, [*g.models(), model])
        if not c.ok
    ]
    return (
        f"every node with room ({len(room)}) would break the red line; on {g.node_id}: "
        f"{'; '.join(broken)}"
    )


def _plan(gpus: list[Gpu], rnd: _Round, moves: list[Move]) -> PlacementPlan:
    plan = PlacementPlan(unplaced=list(rnd.unplaced))
    for g in gpus:
        for s in g.slots:
            a = Assignment(s.model, g.node_id, s.replica_id, s.reason)
            plan.assignments.append(a)
            if s.origin != g.node_id:
                plan.loads.append(a)
    plan.unloads = list(rnd.unloads) + [
        Unload(m.model, m.from_node, m.from_replica, f"moved to {m.to_node}: {m.reason}")
        for m in moves
        if m.to_node
    ]
    plan.assignments.sort(key=lambda a: (a.model, a.node_id))
    plan.loads.sort(key=lambda a: (a.model, a.node_id))
    return plan
