"""Engine scheduler steps without a model, for scheduling tests (no torch)."""

from strata.engine.scheduler import Scheduler, StepPlan
from strata.engine.sequence import FinishReason


def step_without_model(s: Scheduler) -> StepPlan:
    """One engine step without a model: compute what was planned, sample token 1, retire the
    sequences that reached max_tokens."""
    plan = s.schedule()
    for item in plan.scheduled:
        s.advance(item)
    for item in plan.scheduled:
        if item.sample:
            item.seq.token_ids.append(1)
            if item.seq.num_output >= item.seq.params.max_tokens:
                s.finish(item.seq, FinishReason.LENGTH)
    return plan
