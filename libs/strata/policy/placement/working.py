"""The placement a batch-aware round works on: GPUs with their replicas, free memory and window
loads, changed one replica at a time while the planner searches."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from strata.policy.placement.benefit import pair_benefit, peak
from strata.policy.placement.loads import WindowLoads
from strata.policy.placement.red_line import RedLine

# A GPU's summed window load may reach, not pass, its batch capacity (float slack included):
# the vector bin packing constraint, checked before the costlier red line.
FULL = 1.0 + 1e-9


@dataclass(slots=True)
class Slot:
    """A replica in the working placement."""

    model: str
    replica_id: str
    memory: int
    origin: str | None  # node it runs on now; None: a new replica
    origin_replica_id: str = ""
    reason: str = ""  # why it is where it is
    moved: bool = False  # moved this round (a replica moves at most once a round)


@dataclass(slots=True)
class Gpu:
    node_id: str
    device: str
    memory: int
    load: np.ndarray
    foreign_memory: int = 0  # replicas this planner neither owns nor wants
    foreign: int = 0
    slots: list[Slot] = field(default_factory=list)

    @property
    def free(self) -> int:
        return self.memory - self.foreign_memory - sum(s.memory for s in self.slots)

    @property
    def used(self) -> bool:
        return bool(self.slots) or self.foreign > 0

    def models(self) -> list[str]:
        return [s.model for s in self.slots]

    def hosts(self, model: str) -> bool:
        return any(s.model == model for s in self.slots)


class Working:
    """The GPUs (by node id) and the helpers every phase of a round shares."""

    def __init__(self, gpus: list[Gpu], loads: WindowLoads, red_line: RedLine) -> None:
        self.gpus = gpus
        self.loads = loads
        self.red_line = red_line

    def load_of(self, model: str, gpu: Gpu) -> np.ndarray:
        return self.loads.load(model, gpu.device)

    def add(self, gpu: Gpu, slot: Slot) -> None:
        gpu.slots.append(slot)
        gpu.load = gpu.load + self.load_of(slot.model, gpu)

    def remove(self, gpu: Gpu, slot: Slot) -> None:
        gpu.slots.remove(slot)
        gpu.load = self.total(gpu)

    def refresh(self) -> None:
        """Recompute every GPU's load (after replica counts, and so per-replica loads, change)."""
        for g in self.gpus:
            g.load = self.total(g)

    def total(self, gpu: Gpu) -> np.ndarray:
        total = np.zeros(self.loads.windows)
        for s in gpu.slots:
            total = total + self.load_of(s.model, gpu)
        return total

    def fits(self, gpu: Gpu, model: str, memory: int) -> bool:
        return not gpu.hosts(model) and gpu.free >= memory

    def holds_with(self, gpu: Gpu, model: str) -> bool:
        return self.red_line.holds(gpu.device, [*gpu.models(), model])

    def score(self, gpu: Gpu, model: str) -> tuple[float, bool, float]:
        """How well `model` joins `gpu`: the pair benefit against the GPU's load, then a used
        GPU over an empty one, then the fuller result (best fit)."""
        extra = self.load_of(model, gpu)
        after = gpu.load + extra
        return (
            round(pair_benefit(gpu.load, extra), 12),
            gpu.used,
            round(float(after.mean()) if after.size else 0.0, 12),
        )

    def best_target(
        self, model: str, memory: int, exclude: set[str], only_used: bool = False
    ) -> Gpu | None:
        """The best-scoring GPU (score()) that has room for `model`, memory and batch capacity
        (its load stays <= 1 in every window), and keeps the red line with it; ties go to the
        lowest node id."""
        room = [
            g
            for g in self.gpus
            if g.node_id not in exclude
            and (g.used or not only_used)
            and self.fits(g, model, memory)
        ]
        if not room:
            return None
        if self.loads.windows:
            current = np.stack([g.load for g in room])
            extra = np.stack([self.load_of(model, g) for g in room])
            after = current + extra
            benefit = current.max(axis=1) + extra.max(axis=1) - after.max(axis=1)
            fuller = after.mean(axis=1)
        else:
            benefit = fuller = np.zeros(len(room))
        used = np.array([g.used for g in room], dtype=float)
        # lexsort: the last key is the primary one; negated for descending order.
        order = np.lexsort(
            (np.arange(len(room)), -np.round(fuller, 12), -used, -np.round(benefit, 12))
        )
        fits = after.max(axis=1) <= FULL if self.loads.windows else np.ones(len(room), bool)
        return next((room[i] for i in order if fits[i] and self.holds_with(room[i], model)), None)

    def cost_of(self, gpus: list[Gpu]) -> float:
        return sum(1.0 + peak(g.load) for g in gpus if g.used)


def low_id_first(node_id: str) -> tuple[int, ...]:
    """Sorts node ids descending, so that reverse=True ranking prefers the smallest id."""
    return tuple(-ord(c) for c in node_id) + (1,)
