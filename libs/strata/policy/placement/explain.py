"""Explanations: for every placement decision, the numbers behind it.

A decision names what happened to one replica (kept, loaded, moved, unloaded, left unplaced),
the node it ends on, and why in a sentence with the figures: the node's load per window after
the decision, the pair benefit against each replica it shares the GPU with, the migration cost
it paid or avoided, and the red-line check of every model on that GPU. The explanation also
carries each model's replica count with its reason, every node's window loads, and any red-line
violation that made the plan rejected.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from strata.policy.placement.red_line import RedLineCheck

KEEP, LOAD, MOVE, UNLOAD, UNPLACED = "keep", "load", "move", "unload", "unplaced"


@dataclass(slots=True, frozen=True)
class PairBenefit:
    model: str
    other: str
    node_id: str
    benefit: float  # peak capacity saved by sharing, in GPUs


@dataclass(slots=True, frozen=True)
class Decision:
    action: str  # keep | load | move | unload | unplaced
    model: str
    replica_id: str
    node_id: str  # where the replica runs after the decision ("" if nowhere)
    from_node_id: str  # move, unload: where it ran
    reason: str
    benefit: float = 0.0  # GPUs gained by the decision (moves), or the pair score (loads)
    migration_cost: float = 0.0
    window_loads: tuple[float, ...] = ()  # the node's load per window afterwards
    pairs: tuple[PairBenefit, ...] = ()
    red_line: tuple[RedLineCheck, ...] = ()


@dataclass(slots=True, frozen=True)
class NodeLoad:
    node_id: str
    device: str
    models: tuple[str, ...]
    window_loads: tuple[float, ...]
    peak: float
    mean: float


@dataclass(slots=True, frozen=True)
class ModelPlan:
    model: str
    replicas: int
    reason: str
    peak_rate: float  # requests/s in the model's busiest window
    sla: str  # class name


@dataclass(slots=True)
class Explanation:
    policy: str
    window_s: float
    windows: int
    decisions: list[Decision] = field(default_factory=list)
    models: list[ModelPlan] = field(default_factory=list)
    nodes: list[NodeLoad] = field(default_factory=list)
    violations: list[RedLineCheck] = field(default_factory=list)

    @property
    def rejected(self) -> bool:
        return bool(self.violations)

    def summary(self) -> str:
        moves = sum(d.action == MOVE for d in self.decisions)
        loads = sum(d.action == LOAD for d in self.decisions)
        unloads = sum(d.action == UNLOAD for d in self.decisions)
        used = [n for n in self.nodes if n.models]
        mean = sum(n.mean for n in used) / len(used) if used else 0.0
        load = f", mean window load {mean:.3f}" if self.windows else ""
        text = (
            f"{self.policy}: {len(used)} node(s) used{load}; {loads} load(s), {moves} "
            f"move(s), {unloads} unload(s)"
        )
        if self.rejected:
            text += (
                f"; REJECTED: {len(self.violations)} red-line violation(s), the current "
                f"placement stays"
            )
        return text
