"""The two placement policies behind one interface, chosen by STRATA_PLACEMENT_POLICY.

ffd          strata.policy.placement.plan_placement: first-fit-decreasing by memory
batch-aware  strata.policy.placement.plan_batch_aware over the metrics collector's arrival
             curves and the engine profiles; a plan the red line rejects is applied only as
             far as BatchAwareResult.applicable() allows
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from services.placement.curves_source import CurveSnapshot
from strata.policy.placement import (
    BatchAwareSettings,
    Decision,
    Explanation,
    ModelDemand,
    Move,
    NodeCapacity,
    NodeLoad,
    PlacementPlan,
    plan_batch_aware,
    plan_placement,
)
from strata.policy.placement.curves import DAY_S, upcoming
from strata.policy.placement.loads import CostsLookup


@dataclass(slots=True)
class Outcome:
    plan: PlacementPlan  # what to apply
    explanation: Explanation
    rejected: bool = False
    moves: list[Move] = field(default_factory=list)


class PlacementPolicy(Protocol):
    name: str
    needs_curves: bool

    def plan(
        self,
        nodes: Sequence[NodeCapacity],
        models: Sequence[ModelDemand],
        devices: Mapping[str, str],
        curves: CurveSnapshot | None,
    ) -> Outcome: ...


class FfdPolicy:
    name = "ffd"
    needs_curves = False

    def plan(
        self,
        nodes: Sequence[NodeCapacity],
        models: Sequence[ModelDemand],
        devices: Mapping[str, str],
        curves: CurveSnapshot | None,
    ) -> Outcome:
        plan = plan_placement(nodes, models)
        return Outcome(plan, explain_ffd(plan))


class BatchAwarePolicy:
    name = "batch-aware"
    needs_curves = True

    def __init__(
        self,
        costs: CostsLookup,
        settings: BatchAwareSettings,
        lookahead: int = 0,
        unix_now: Callable[[], float] = time.time,
    ) -> None:
        self._costs = costs
        self._settings = settings
        self._capacities: dict = {}  # bisected capacities, reused across rounds
        # > 0 (daily curves only): judge the window of the day in progress and the next
        # lookahead - 1, so the replan loop separates models before their peaks
        self._lookahead = lookahead
        self._unix_now = unix_now

    def plan(
        self,
        nodes: Sequence[NodeCapacity],
        models: Sequence[ModelDemand],
        devices: Mapping[str, str],
        curves: CurveSnapshot | None,
    ) -> Outcome:
        settings = self._settings
        if curves is None:
            # Without curves every load looks like zero: consolidating on that would undo
            # itself when the curves come back, so only keep and place this round.
            settings = replace(settings, max_moves=0)
        judged = curves.curves if curves else {}
        if self._lookahead and judged:
            first = int((self._unix_now() % DAY_S) // curves.window_s)
            judged = upcoming(judged, first, self._lookahead)
        result = plan_batch_aware(
            nodes,
            models,
            judged,
            curves.sla if curves else {},
            self._costs,
            devices=devices,
            settings=settings,
            capacity_cache=self._capacities,
        )
        return Outcome(result.applicable(), result.explanation, result.rejected, result.moves)


def explain_ffd(plan: PlacementPlan) -> Explanation:
    """FFD's decisions with its reasons; it looks at no window, so no loads or red line."""
    e = Explanation(policy=FfdPolicy.name, window_s=0.0, windows=0)
    new = {(a.model, a.node_id) for a in plan.loads}
    for a in plan.assignments:
        action = "load" if (a.model, a.node_id) in new else "keep"
        e.decisions.append(Decision(action, a.model, a.replica_id, a.node_id, "", a.reason))
    for u in plan.unloads:
        e.decisions.append(Decision("unload", u.model, u.replica_id, "", u.node_id, u.reason))
    for u in plan.unplaced:
        e.decisions.append(
            Decision("unplaced", u.model, "", "", "", f"{u.missing} replica(s): {u.reason}")
        )
    hosted: dict[str, list[str]] = {}
    for a in plan.assignments:
        hosted.setdefault(a.node_id, []).append(a.model)
    e.nodes = [NodeLoad(n, "", tuple(sorted(m)), (), 0.0, 0.0) for n, m in sorted(hosted.items())]
    return e
