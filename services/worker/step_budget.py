"""The worker's step budget: each engine step's tokens sized so that the running requests'
steps stay within the tightest of their TPOT targets (strata.policy.scheduling.slo
.step_token_budget, priced with the line the worker learns online)."""

from __future__ import annotations

from collections.abc import Callable

from strata.core.step_model import StepLine
from strata.engine.sequence import Sequence
from strata.policy.scheduling.slo import step_token_budget


def step_budget(
    line: Callable[[], StepLine], max_batched_tokens: int, block_size: int
) -> Callable[[list[Sequence]], int]:
    def budget(running: list[Sequence]) -> int:
        decodes = ((len(s.token_ids), s.tpot_ms) for s in running if s.num_pending == 1)
        history = max((s.num_computed for s in running if s.num_pending > 1), default=0)
        return step_token_budget(line(), decodes, max_batched_tokens, block_size, history=history)

    return budget
