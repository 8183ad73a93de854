"""The worker's step budget: each engine step's tokens sized so that the running requests keep
their TPOT targets (strata.policy.scheduling.slo.running_budget, priced with the line the worker
learns online, on the engine's monotonic clock)."""

from __future__ import annotations

import time
from collections.abc import Callable

from strata.core.step_model import StepLine
from strata.engine.sequence import Sequence
from strata.policy.scheduling.slo import running_budget


def step_budget(
    line: Callable[[], StepLine],
    max_batched_tokens: int,
    block_size: int,
    clock: Callable[[], float] = time.monotonic,
) -> Callable[[list[Sequence]], int]:
    def budget(running: list[Sequence]) -> int:
        return running_budget(line(), running, clock(), max_batched_tokens, block_size)

    return budget
