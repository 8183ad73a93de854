"""The worker's step budget: each engine step's tokens sized so that the running requests keep
their TPOT targets and no step outlasts the step cap (strata.policy.scheduling.slo.running_budget,
strata.policy.scheduling.step_cap; priced with the line the worker learns online, on the
engine's monotonic clock). It keeps what the running decodes allowed at the latest step
(decode_allowance_ms), for the worker's stats: the scheduler prices a prompt's prefill from the
slack they lend."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from strata.core.step_model import StepLine
from strata.engine.sequence import Sequence
from strata.policy.scheduling.slo import decode_allowance_ms, running_budget
from strata.policy.scheduling.step_cap import StepCap

ALLOWANCE_MAX_AGE_S = 1.0  # an allowance from an older step is not reported: the engine idles


@dataclass(slots=True)
class StepBudget:
    """Called by the engine (its step_budget) before each step, on the engine's thread;
    `allowance_ms` is read from another (a tuple is replaced, never changed in place)."""

    line: Callable[[], StepLine]
    max_batched_tokens: int
    block_size: int
    cap: StepCap | None = None
    clock: Callable[[], float] = time.monotonic
    max_age_s: float = ALLOWANCE_MAX_AGE_S
    _allowed: tuple[float, float | None] = field(default=(-math.inf, None), init=False)

    def __call__(self, running: list[Sequence], waiting: Iterable[Sequence] = ()) -> int:
        now = self.clock()
        self._allowed = (now, decode_allowance_ms(running, now))
        cap_ms = self.cap.cap_ms(now, running) if self.cap is not None else None
        return running_budget(
            self.line(),
            running,
            now,
            self.max_batched_tokens,
            self.block_size,
            cap_ms=cap_ms,
            waiting=waiting,
        )

    def allowance_ms(self) -> float:
        """The longest step the running decodes with a TPOT target allowed at the latest step
        (decode_allowance_ms), where that step was within `max_age_s`; 0: none."""
        at, ms = self._allowed
        if ms is None or self.clock() - at > self.max_age_s:
            return 0.0
        return ms
