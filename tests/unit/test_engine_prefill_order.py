"""Prefill by class: a started prefill of a lower class yields the step's budget to a higher
class's waiting prompt, resumes with what is left, and the queued tokens split by class."""

from strata.engine.block_pool import BlockPool
from strata.engine.scheduler import Scheduler, StepPlan
from strata.engine.sequence import SamplingParams, Sequence
from strata.kvtier.hashing import HashKeys
from tests.scheduler_helpers import step_without_model

BS = 4
KEYS = HashKeys.for_request("m", "t", prefix_public=False)


def _seq(rid: str, prompt: int, priority: int, arrival: float) -> Sequence:
    base = 100 * (ord(rid[-1]) % 20)
    return Sequence(
        rid,
        [base + i for i in range(prompt)],
        prompt,
        SamplingParams(max_tokens=4, ignore_eos=True),
        KEYS,
        priority=priority,
        arrival=arrival,
    )


def _plan(plan: StepPlan) -> list[tuple[str, int]]:
    return [(x.seq.request_id, x.num_new) for x in plan.scheduled]


def test_a_higher_class_prompt_goes_before_a_started_lower_prefill():
    s = Scheduler(BlockPool(256, BS), max_batched_tokens=16, max_seqs=8)
    s.add(_seq("low", 64, 1, 0.0))
    assert _plan(step_without_model(s)) == [("low", 16)]
    s.add(_seq("high", 20, 2, 1.0))
    assert s.queued_by_class() == {1: 48, 2: 20}
    # The higher class's chunk takes the budget; the started lower prefill waits a step ...
    assert _plan(step_without_model(s)) == [("high", 16)]
    # ... and shares the next one: the rest of the higher prompt first, then the lower.
    assert _plan(step_without_model(s)) == [("high", 4), ("low", 12)]
    assert s.queued_by_class() == {1: 36, 2: 1}


def test_equal_or_lower_waiting_classes_do_not_pass_a_started_prefill():
    s = Scheduler(BlockPool(256, BS), max_batched_tokens=16, max_seqs=8)
    s.add(_seq("first", 40, 1, 0.0))
    step_without_model(s)
    s.add(_seq("same", 8, 1, 1.0))
    s.add(_seq("below", 8, 0, 2.0))
    assert _plan(step_without_model(s)) == [("first", 16)]
    assert _plan(step_without_model(s)) == [("first", 8), ("same", 8)]


def test_decodes_still_go_first_and_leftover_budget_is_not_wasted():
    s = Scheduler(BlockPool(256, BS), max_batched_tokens=16, max_seqs=8)
    s.add(_seq("dec", 3, 0, 0.0))
    step_without_model(s)  # its prompt, then it decodes one token a step
    s.add(_seq("low", 30, 1, 1.0))
    assert _plan(step_without_model(s)) == [("dec", 1), ("low", 15)]
    s.add(_seq("high", 6, 2, 2.0))
    # The decode, the whole higher prompt, and the lower prefill takes the rest.
    assert _plan(step_without_model(s)) == [("dec", 1), ("high", 6), ("low", 9)]
