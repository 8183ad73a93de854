"""The benefit of sharing a GPU, and what moving a replica costs, in one unit: GPUs (a GPU's
whole batch capacity, held for the planning horizon).

A GPU must be provisioned for its peak window. Two replicas on separate GPUs reserve the sum of
their peaks; on one GPU, the peak of their sum:

    pair_benefit(a, b) = peak(a) + peak(b) - peak(a + b)

Peaks that alternate (a = [0.6, 0.1], b = [0.1, 0.6]) save 0.5 of a GPU in the windows where
one of them is quiet; peaks that coincide (a = b = [0.6, 0.1]) save nothing and, at 1.2, no
longer fit. The same figure scores a replica against everything already on a GPU.

A placement's cost is the GPUs it occupies plus the peaks it reserves:

    cost = used GPUs + sum over GPUs of peak(load)

so emptying a GPU gains a whole GPU, and a move that only re-pairs replicas gains the peak
capacity it frees. A move pays the migration cost: the seconds a GPU spends loading the weights
and warming the engine (its prefix cache starts cold), over the horizon the plan is expected to
hold. Replanning moves a replica only when what it gains exceeds that.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(slots=True, frozen=True)
class MigrationCost:
    load_bytes_per_s: float = 2e9  # reading and copying weights onto the new GPU
    warmup_s: float = 30.0  # engine warm-up plus refilling a cold prefix cache
    horizon_s: float = 3600.0  # how long the new placement is expected to hold

    def __post_init__(self) -> None:
        if self.load_bytes_per_s <= 0 or self.horizon_s <= 0 or self.warmup_s < 0:
            raise ValueError(
                f"migration cost needs positive load_bytes_per_s and horizon_s "
                f"and a non-negative warmup_s, got {self}"
            )

    def of(self, memory_bytes: int) -> float:
        """GPUs (over the horizon) one move of a replica of `memory_bytes` costs."""
        return (memory_bytes / self.load_bytes_per_s + self.warmup_s) / self.horizon_s

    def seconds(self, memory_bytes: int) -> float:
        return memory_bytes / self.load_bytes_per_s + self.warmup_s


def peak(load: np.ndarray) -> float:
    return float(load.max()) if load.size else 0.0


def pair_benefit(a: np.ndarray, b: np.ndarray) -> float:
    """Peak capacity two loads save by sharing one GPU (0 when their peaks coincide)."""
    return peak(a) + peak(b) - peak(a + b)


def placement_cost(loads: list[np.ndarray], used: list[bool]) -> float:
    return sum(1.0 + peak(v) for v, u in zip(loads, used) if u)
