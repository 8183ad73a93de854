"""The worker's step budget: each engine step's tokens sized so that the running requests keep
their TPOT targets and no step outlasts the step cap (strata.policy.scheduling.slo.running_budget,
strata.policy.scheduling.step_cap; priced with the line the worker learns online, on the
engine's monotonic clock)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from strata.core.step_model import StepLine
from strata.engine.sequence import Sequence
from strata.policy.scheduling.slo import running_budget
from strata.policy.scheduling.step_cap import StepCap


def step_budget(
    line: Callable[[], StepLine],
    max_batched_tokens: int,
    block_size: int,
    cap: StepCap | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Callable[[list[Sequence], Iterable[Sequence]], int]:
    def budget(running: list[Sequence], waiting: Iterable[Sequence] = ()) -> int:
        now = clock()
        cap_ms = cap.cap_ms(now, running) if cap is not None else None
        return running_budget(
            line(), running, now, max_batched_tokens, block_size, cap_ms=cap_ms, waiting=waiting
        )

    return budget
