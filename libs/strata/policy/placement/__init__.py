"""Model placement: which node hosts which replica of which model.

Two policies over the same types:

    ffd            first-fit-decreasing by memory: the baseline, blind to time
    batch_aware    time-windowed packing: arrival curves per window, batch capacity per model
                   and GPU from engine profiles, a benefit function that rewards peaks that
                   alternate, online replanning that moves a replica only when the gain beats
                   the migration cost, and the SLA red line as a hard constraint

Modules: curves (arrival curves), capacity (latency and batch capacity from engine costs), loads
(per-window loads of a replica), benefit (pair benefit, migration cost), red_line, working,
improve (replanning moves), report and explain (the numbers behind each decision), migration
(make-before-break and the drain rule, shared by the planner service and the simulator).
"""

from strata.policy.placement.batch_aware import (
    BatchAwareResult,
    BatchAwareSettings,
    plan_batch_aware,
)
from strata.policy.placement.benefit import MigrationCost, pair_benefit
from strata.policy.placement.capacity import (
    Demand,
    EngineCosts,
    Prediction,
    SlaTarget,
    predict,
    replica_capacity,
)
from strata.policy.placement.curves import (
    ArrivalCurve,
    RequestRow,
    WindowGrid,
    arrival_curves,
)
from strata.policy.placement.explain import Decision, Explanation, NodeLoad, PairBenefit
from strata.policy.placement.ffd import (
    Assignment,
    ModelDemand,
    NodeCapacity,
    PlacedReplica,
    PlacementPlan,
    Unload,
    Unplaced,
    new_replica_id,
    plan_placement,
)
from strata.policy.placement.improve import Move
from strata.policy.placement.migration import (
    DrainRule,
    Migration,
    MigrationBook,
    MigrationPhase,
    Retiring,
    routing_grace_s,
    split_unloads,
)
from strata.policy.placement.red_line import RedLineCheck

__all__ = [
    "ArrivalCurve",
    "Assignment",
    "BatchAwareResult",
    "BatchAwareSettings",
    "Decision",
    "Demand",
    "EngineCosts",
    "Explanation",
    "DrainRule",
    "Migration",
    "MigrationBook",
    "MigrationCost",
    "MigrationPhase",
    "Retiring",
    "routing_grace_s",
    "split_unloads",
    "ModelDemand",
    "Move",
    "NodeCapacity",
    "NodeLoad",
    "PairBenefit",
    "PlacementPlan",
    "Prediction",
    "RedLineCheck",
    "PlacedReplica",
    "RequestRow",
    "SlaTarget",
    "Unload",
    "Unplaced",
    "WindowGrid",
    "arrival_curves",
    "new_replica_id",
    "pair_benefit",
    "plan_batch_aware",
    "plan_placement",
    "predict",
    "replica_capacity",
]
