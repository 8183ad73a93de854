"""The worker's step budget: prefill chunks sized by the running requests' tightest TPOT target,
and the engine's scheduler keeping to the budget it is given."""

import pytest

from services.worker.step_budget import StepBudget
from strata.core.step_model import StepLine
from strata.engine.engine import EngineRequest
from strata.engine.sequence import SamplingParams, Sequence
from strata.kvtier.hashing import HashKeys
from strata.policy.scheduling.slo import DecodeLoad, step_ms
from strata.policy.scheduling.step_cap import StepCap
from tests.engine_helpers import tiny_engine

LINE = StepLine(0.010, 2e-5, 0.002 - 2e-5, 1e-8, 1e-6, 0.0)


def seq(i: int, tokens: int, computed: int, tpot_ms: float | None) -> Sequence:
    s = Sequence(f"r{i}", list(range(tokens)), tokens - 1, SamplingParams(), HashKeys.for_request(
        "m", "t", False), tpot_ms=tpot_ms)  # fmt: skip
    s.num_computed = computed
    return s


def test_the_budget_leaves_each_decode_its_token_and_sizes_the_chunk_by_the_tightest_target():
    budget = StepBudget(lambda: LINE, 2048, 16)
    decodes = [seq(i, 1000, 999, 100.0) for i in range(10)]  # one pending token each
    prefilling = seq(99, 4000, 0, None)
    got = budget(decodes + [prefilling])
    chunk = got - 10
    load = DecodeLoad.of([(1000, 100.0)] * 10)
    assert chunk % 16 == 0 and step_ms(LINE, load, chunk) <= 90.0 < step_ms(LINE, load, chunk + 16)
    # Part-way through its prompt, the next chunk attends over what is computed: smaller.
    late = budget(decodes + [seq(99, 6000, 3000, None)]) - 10
    assert late < chunk
    assert step_ms(LINE, load, late, 3000) <= 90.0 < step_ms(LINE, load, late + 16, 3000)
    # Decodes that have spent little of their targets so far lend the chunk their slack.
    now = [100.0]
    clocked = StepBudget(lambda: LINE, 2048, 16, clock=lambda: now[0])
    for d in decodes:
        d.first_token_at = 100.0  # the first token just now: no slack yet
    assert clocked(decodes + [prefilling]) - 10 == chunk
    for d in decodes:
        d.num_prompt, d.first_token_at = 500, 75.0  # 500 tokens in 25 s: 50 ms a gap
    assert clocked(decodes + [prefilling]) == 2048
    # Without a target among the decodes: the engine's maximum.
    assert budget([seq(i, 1000, 999, None) for i in range(10)] + [prefilling]) == 2048
    assert budget([]) == 2048


def test_the_budget_keeps_what_the_decodes_allowed_at_the_latest_step_for_a_second():
    now = [100.0]
    budget = StepBudget(lambda: LINE, 2048, 16, clock=lambda: now[0])
    assert budget.allowance_ms() == 0.0  # no step yet
    decodes = [seq(i, 1000, 999, 100.0) for i in range(4)]
    for d in decodes:
        d.num_prompt, d.first_token_at = 500, 75.0  # 500 tokens in 25 s: 50 ms a gap
    budget(decodes + [seq(99, 4000, 0, None)])
    # 499 gaps of 90 ms allowed, 25 s taken: 19.91 s unspent, half of it lent.
    assert budget.allowance_ms() == pytest.approx(90.0 + 0.5 * (499 * 90.0 - 25_000.0))
    now[0] = 100.9
    assert budget.allowance_ms() > 90.0
    now[0] = 101.5  # no step for over a second: the engine idles, nothing is lent
    assert budget.allowance_ms() == 0.0
    # A step whose decodes have no target lends nothing.
    budget([seq(i, 1000, 999, None) for i in range(4)])
    assert budget.allowance_ms() == 0.0


def test_a_class_with_a_ttft_target_caps_every_step_while_its_requests_come():
    now = [0.0]
    cap = StepCap(share=0.5, window_s=60.0)
    budget = StepBudget(lambda: LINE, 2048, 16, cap, clock=lambda: now[0])
    prefilling = seq(99, 4000, 0, None)
    assert budget([prefilling]) == 2048  # no TTFT target seen: as large as the engine takes
    cap.note(60.0, 2, now[0])  # an interactive request: steps of at most 30 ms
    capped = budget([prefilling])
    assert capped % 16 == 0 and step_ms(LINE, DecodeLoad(), capped) <= 30.0
    assert step_ms(LINE, DecodeLoad(), capped + 16) > 30.0
    # Beside decodes with a looser TPOT target the cap binds too, and the decodes keep a token.
    decodes = [seq(i, 1000, 999, 300.0) for i in range(4)]
    beside = budget(decodes + [prefilling]) - 4
    load = DecodeLoad.of([(1000, 300.0)] * 4)
    assert step_ms(LINE, load, beside) <= 30.0 < step_ms(LINE, load, beside + 16)
    # The class the cap protects prefills its own prompt in steps as large as the decodes allow.
    own = seq(98, 4000, 0, None)
    own.priority = 2
    assert budget([prefilling, own]) == 2048
    now[0] = 61.0  # no such request for a minute: the cap lapses
    assert budget([prefilling]) == 2048


def test_the_engine_asks_for_its_budget_before_each_step_and_keeps_to_it():
    engine = tiny_engine(max_batched_tokens=64)
    asked = []

    stamps = []

    def budget(running: list[Sequence], waiting=()) -> int:
        asked.append(len(running))
        stamps.extend(s.first_token_at for s in running)
        return 12

    engine.step_budget = budget
    engine.add_request(
        EngineRequest("a", list(range(1, 40)), SamplingParams(max_tokens=4, ignore_eos=True))
    )
    computed = []
    engine.step_observer = lambda items, _s, _p: computed.append(sum(i.num_new for i in items))
    while engine.has_work():
        engine.step()
    assert asked and computed and max(computed) <= 12
    assert sum(computed) == 39 + 3  # the prompt, then a token a step after the first
    # The engine stamps a sequence's first token (what its TPOT slack is counted from).
    assert stamps[0] is None and stamps[-1] is not None
