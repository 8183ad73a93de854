"""SLO-aware batching (strata.policy.scheduling.slo): the TPOT check refuses the request that
would push running decodes past their target and admits it once they finish; the prefill
chunk budget keeps a step within the tightest target."""

from dataclasses import dataclass

import pytest

from strata.core.step_model import StepLine
from strata.policy.scheduling.fair_queue import QueueItem
from strata.policy.scheduling.slo import (
    SLACK_SPENT,
    DecodeLoad,
    chunk_budget,
    decode_allowance_ms,
    defer_pays,
    defers_block,
    engine_share,
    fits,
    line_prefill_rate,
    prefill_s,
    running_budget,
    slot_wait_s,
    solo_prefill_s,
    step_allowance_ms,
    step_ms,
    step_token_budget,
    tpot_capacity,
)
from strata.policy.scheduling.slots import TURNOVER_WINDOW, EngineSlots

# 10 ms a step, 2 ms a decode token, 1 ms per 1,000 keys read, 0.02 ms a prefill token.
LINE = StepLine(0.010, 2e-5, 0.002 - 2e-5, 1e-8, 1e-6, 0.0)


def test_the_load_counts_seqs_keys_and_the_tightest_target():
    load = DecodeLoad.of([(1000, 200.0), (500, None), (2000, 100.0)])
    assert (load.seqs, load.context_tokens, load.tightest_tpot_ms) == (3, 3500, 100.0)
    assert DecodeLoad.of([(10, None), (10, 0.0)]).tightest_tpot_ms is None


def test_a_request_that_would_push_running_decodes_past_their_target_waits():
    # Each running request: 1,000 keys and 2 ms of its own: step = 10 + 3 n ms.
    running = DecodeLoad.of([(1000, 100.0)] * 20)  # 70 ms
    assert step_ms(LINE, running) == pytest.approx(70.0)
    # Headroom 0.9: up to 90 ms; the 27th request would make 91 ms.
    load = DecodeLoad.of([(1000, 100.0)] * 26)
    assert step_ms(LINE, load) == pytest.approx(88.0)
    assert not fits(LINE, load, 1000, 100.0)
    assert fits(LINE, DecodeLoad.of([(1000, 100.0)] * 25), 1000, 100.0)
    # A best-effort request is held to the running requests' target too...
    assert not fits(LINE, load, 1000, None)
    # ...and a request whose own target is tighter than what runs is judged by its own.
    assert not fits(LINE, DecodeLoad.of([(1000, None)] * 10), 1000, 30.0)
    assert fits(LINE, DecodeLoad.of([(1000, None)] * 10), 1000, 60.0)


def test_once_decodes_finish_the_waiting_request_fits():
    load = DecodeLoad.of([(1000, 100.0)] * 26)
    assert not fits(LINE, load, 1000, 100.0)
    fewer = DecodeLoad.of([(1000, 100.0)] * 20)  # six finished
    assert fits(LINE, fewer, 1000, 100.0)


def test_without_a_line_or_work_or_targets_nothing_is_held_back():
    heavy = DecodeLoad.of([(10**6, 1.0)] * 100)
    assert fits(None, heavy, 10**6, 1.0)
    assert fits(LINE, DecodeLoad(), 10**7, 1.0)  # alone: served as well as it can be
    assert fits(LINE, DecodeLoad.of([(10**6, None)] * 100), 10**6, None)


def test_the_chunk_budget_keeps_the_step_within_the_tightest_target():
    load = DecodeLoad.of([(1000, 100.0)] * 10)  # 40 ms of decodes
    budget = chunk_budget(LINE, load, max_tokens=2048, block_size=16)
    assert budget % 16 == 0 and 16 <= budget < 2048
    assert step_ms(LINE, load, budget) <= 90.0 < step_ms(LINE, load, budget + 16)
    # No target, no decodes or room to spare: the engine's own maximum.
    assert chunk_budget(LINE, DecodeLoad.of([(1000, None)] * 10), 2048, 16) == 2048
    assert chunk_budget(LINE, DecodeLoad(), 2048, 16) == 2048
    assert chunk_budget(None, load, 2048, 16) == 2048
    # A target the decodes alone miss still lets one block of prefill through.
    assert chunk_budget(LINE, DecodeLoad.of([(1000, 10.0)] * 10), 2048, 16) == 16


def test_a_slot_wait_counts_who_is_ahead_at_the_measured_slot_turnover():
    held = DecodeLoad.of([(1000, 100.0)] * 16)  # at the cap of 16: a slot frees every 0.125 s
    assert slot_wait_s(LINE, held, 16, 0, 1000, 100.0, 0.125) == pytest.approx(0.125)
    assert slot_wait_s(LINE, held, 16, 7, 1000, 100.0, 0.125) == pytest.approx(1.0)
    # 20 held for a cap of 16: 4 wait already, the request is the fifth.
    over = DecodeLoad.of([(1000, 100.0)] * 20)
    assert slot_wait_s(LINE, over, 16, 0, 1000, 100.0, 0.125) == pytest.approx(5 / 8)
    # Room (below the cap, within the TPOT target) and nobody ahead: no wait.
    assert slot_wait_s(LINE, DecodeLoad.of([(1000, 100.0)] * 4), 16, 0, 1000, 100.0, 0.1) == 0.0
    # Below the cap but past the TPOT target: it waits for one to finish.
    assert slot_wait_s(LINE, DecodeLoad.of([(1000, 100.0)] * 26), 32, 0, 1000, 100.0, 0.1) == (
        pytest.approx(0.1)
    )
    # Nothing measured yet, or nothing running: no claim.
    assert slot_wait_s(LINE, held, 16, 7, 1000, 100.0, 0.0) == 0.0
    assert slot_wait_s(LINE, DecodeLoad(), 16, 7, 1000, 100.0, 0.1) == 0.0


def test_the_engine_runs_only_as_many_as_their_tpot_targets_allow():
    # 30 held of 1,000 keys at a 100 ms target: 26 run (88 ms a step), 4 wait beside a cap
    # of 32, and a request arriving is the fifth to wait for a slot.
    held = DecodeLoad.of([(1000, 100.0)] * 30)
    assert tpot_capacity(LINE, held) == 26
    assert engine_share(LINE, held, 32) == DecodeLoad(26, 26_000, 100.0)
    assert engine_share(LINE, held, 16).seqs == 16
    assert slot_wait_s(LINE, held, 32, 0, 1000, 100.0, 0.1) == pytest.approx(0.5)
    # Two of the four waiting are of a lower class it goes before.
    assert slot_wait_s(LINE, held, 32, 0, 1000, 100.0, 0.1, passes=2) == pytest.approx(0.3)
    # Without a line or a target, all of them run.
    assert tpot_capacity(None, held) == 30
    assert tpot_capacity(LINE, DecodeLoad.of([(1000, None)] * 30)) == 30


def test_a_prefill_beside_decodes_takes_a_step_per_chunk():
    # Beside 10 decodes (40 ms) the chunk budget keeps steps within 90 ms: 2,000 tokens in
    # chunks of that budget, each a step attending over the chunks before it.
    beside = DecodeLoad.of([(1000, 100.0)] * 10)
    chunk = chunk_budget(LINE, beside, 2000, 16)
    steps, rest = divmod(2000, chunk)
    expected = sum(step_ms(LINE, beside, chunk, i * chunk) for i in range(steps))
    expected += step_ms(LINE, beside, rest, steps * chunk) if rest else 0
    assert prefill_s(LINE, beside, 2000, 16) == pytest.approx(expected / 1000.0)
    # More than the same chunks priced without their history.
    flat = steps * step_ms(LINE, beside, chunk) + (step_ms(LINE, beside, rest) if rest else 0)
    assert expected > flat
    assert steps + (rest > 0) >= 2  # not one step: the target bounds it
    # Beside nothing with a target, one step; without a line or tokens, no claim.
    free = DecodeLoad.of([(1000, None)] * 10)
    assert prefill_s(LINE, free, 2000, 16) == pytest.approx(step_ms(LINE, free, 2000) / 1000.0)
    assert prefill_s(None, beside, 2000, 16) == 0.0
    assert prefill_s(LINE, beside, 0, 16) == 0.0


def _item(i: int) -> QueueItem:
    return QueueItem(f"r{i}", "t", "m", prompt_tokens=100, max_tokens=10, tpot_ms=100.0)


def test_slot_turnover_is_the_hold_over_the_mean_count_held_meanwhile():
    slots = EngineSlots()
    assert slots.turnover_s("a") == 0.0  # nothing left yet: no measure
    # Four enter together and leave together after 2 s: a slot frees every 0.5 s, whichever
    # leaves first (not 2 s / 4, 2 s / 3, ... as counting at the release would say).
    for i in range(4):
        slots.enter("a", _item(i), 10.0)
    for i in range(4):
        assert slots.leave("a", f"r{i}", 12.0) is not None
        assert slots.turnover_s("a") == pytest.approx(0.5)
    # Staggered: r0 holds 2 s beside r1 (mean count 2: 1 s); r1 holds 4 s, with r0 for its
    # first 2 (mean count 1.5: 8/3 s).
    slots.forget(set())
    assert slots.turnover_s("a") == 0.0
    slots.enter("a", _item(0), 30.0)
    slots.enter("a", _item(1), 30.0)
    slots.leave("a", "r0", 32.0)
    assert slots.turnover_s("a") == pytest.approx(1.0)
    slots.leave("a", "r1", 34.0)
    assert slots.turnover_s("a") == pytest.approx(8 / 3)  # the upper quartile of two
    # Unknown requests leave nothing behind.
    assert slots.leave("a", "nobody", 40.0) is None


def _wave(slots: EngineSlots, start: float, hold: float, n: int = 16) -> float:
    """n requests enter at `start` and leave together `hold` later: n releases of hold / n."""
    for i in range(n):
        slots.enter("a", _item(i), start)
    for i in range(n):
        slots.leave("a", f"r{i}", start + hold)
    return start + hold


def test_slot_turnover_prices_with_the_slower_of_the_recent_waves():
    # Waves agree within and differ between: one fast wave after two slow ones does not make
    # the next burst look fast, and the window forgets what is older than its releases.
    slots = EngineSlots()
    t = _wave(slots, 0.0, 0.8)  # 0.05 s a slot
    t = _wave(slots, t, 0.8)
    t = _wave(slots, t, 0.4)  # 0.025 s a slot
    assert slots.turnover_s("a") == pytest.approx(0.05)
    for _ in range(TURNOVER_WINDOW // 16):
        t = _wave(slots, t, 0.4)
    assert slots.turnover_s("a") == pytest.approx(0.025)


def test_the_lines_prefill_rate_is_a_long_prompt_alone_in_the_steps_budget():
    # 512 tokens in chunks of at most 256 tokens a step, nothing beside: two steps, the
    # second over the first's keys too.
    rate = line_prefill_rate(LINE, block_size=16, max_chunk=256)
    steps_ms = step_ms(LINE, DecodeLoad(), 256) + step_ms(LINE, DecodeLoad(), 256, 256)
    assert rate == pytest.approx(512 / (steps_ms / 1000.0))
    assert rate == pytest.approx(512 / solo_prefill_s(LINE, 512, 16, 256))
    assert line_prefill_rate(None, block_size=16) == 0.0  # no line: nothing to price with


def test_a_chunk_with_history_attends_over_it_and_gets_a_smaller_budget():
    # A chunk of c tokens after h computed ones reads c x (h + c) keys.
    empty = DecodeLoad()
    assert step_ms(LINE, empty, 256, 768) - step_ms(LINE, empty, 256) == pytest.approx(
        1000.0 * LINE.prefill_attend_s * 256 * 768
    )
    beside = DecodeLoad.of([(1000, 100.0)] * 10)
    fresh = chunk_budget(LINE, beside, 4096, 16)
    late = chunk_budget(LINE, beside, 4096, 16, history=20_000)
    assert late < fresh
    assert step_ms(LINE, beside, late, 20_000) <= 90.0 < step_ms(LINE, beside, late + 16, 20_000)


def test_a_decode_may_absorb_the_step_time_its_earlier_steps_left_unspent():
    # 100 ms target, headroom 0.9: 90 ms a gap. Ten tokens, the first 0.3 s ago: its 9 gaps
    # left 810 - 300 = 510 ms unspent; the step may take 90 ms and half of that.
    assert SLACK_SPENT == 0.5
    assert step_allowance_ms(100.0, 10, 0.3) == pytest.approx(90.0 + 255.0)
    # No slack (slow so far), no token yet, or one just now: one gap's share.
    assert step_allowance_ms(100.0, 10, 2.0) == pytest.approx(90.0)
    assert step_allowance_ms(100.0, 0, None) == pytest.approx(90.0)
    assert step_allowance_ms(100.0, 1, 0.0) == pytest.approx(90.0)


@dataclass
class _Seq:
    token_ids: list[int]
    num_computed: int
    tpot_ms: float | None
    first_token_at: float | None
    num_prompt: int = 0
    priority: int = 0

    @property
    def num_pending(self) -> int:
        return len(self.token_ids) - self.num_computed

    @property
    def num_output(self) -> int:
        return len(self.token_ids) - self.num_prompt


def test_the_running_budget_gives_the_chunk_the_slack_of_the_tightest_decode():
    def decode(outputs: int, first_at: float | None, tpot: float | None = 100.0) -> _Seq:
        return _Seq(list(range(1000 + outputs)), 1000 + outputs - 1, tpot, first_at, 1000)

    prompt = _Seq(list(range(4000)), 0, None, None, 4000)
    young = [decode(1, 10.0)] + [decode(50, 7.0)] * 9  # one decode has no slack yet
    # 49 gaps in 4.37 s: 49 x 90 - 4,370 = 40 ms unspent, 90 + 20 = 110 ms for the next step.
    seasoned = [decode(50, 5.63)] * 10
    load = DecodeLoad.of([(1050, 100.0)] * 9 + [(1001, 100.0)])
    tight = running_budget(LINE, young + [prompt], 10.0, 2048, 16) - 10
    assert tight == chunk_budget(LINE, load, 2038, 16)  # the per-step bound: 90 ms
    # With 110 ms, the slack nearly pays for a step of the whole room (125 ms): one
    # decode-only step more does, sooner than two chunks within 110 ms, so the step waits.
    load = DecodeLoad.of([(1050, 100.0)] * 10)
    assert running_budget(LINE, seasoned + [prompt], 10.0, 2048, 16) == 10
    assert defer_pays(LINE, load, 2038, 0, 110.0, 90.0, 16)
    assert step_ms(LINE, load, 2038) > 110.0
    loose = chunk_budget(LINE, load, 2038, 16, limit_ms=110.0)
    assert loose > tight
    # Slack enough for the engine's largest step: its maximum.
    rich = [decode(50, 7.0)] * 10
    assert running_budget(LINE, rich + [prompt], 10.0, 2048, 16) == 2048
    # Part-way through its prompt, the chunk is priced over what is computed: its last 1,000
    # tokens fit the 110 ms at once.
    later = _Seq(list(range(4000)), 3000, None, None, 4000)
    assert running_budget(LINE, seasoned + [later], 10.0, 2048, 16) - 10 >= 1000
    assert chunk_budget(LINE, load, 2038, 16, history=3000, limit_ms=110.0) < loose
    # No target among the decodes: the engine's maximum.
    free = [decode(50, 7.0, None)] * 10
    assert running_budget(LINE, free + [prompt], 10.0, 2048, 16) == 2048


def test_the_decode_allowance_is_the_tightest_decodes_and_lends_a_prefill_its_slack():
    def decode(outputs: int, first_at: float | None, tpot: float | None = 100.0) -> _Seq:
        return _Seq(list(range(1000 + outputs)), 1000 + outputs - 1, tpot, first_at, 1000)

    prompt = _Seq(list(range(4000)), 0, None, None, 4000)
    seasoned = decode(50, 5.63)  # 49 gaps in 4.37 s: 40 ms unspent, 110 ms allowed
    fresh = decode(1, 10.0)  # its first token just now: one gap's share, 90 ms
    assert decode_allowance_ms([seasoned, prompt], 10.0) == pytest.approx(110.0)
    assert decode_allowance_ms([seasoned, fresh, prompt], 10.0) == pytest.approx(90.0)
    # A prompt prefilling and a decode without a target allow nothing: no limit from them.
    assert decode_allowance_ms([prompt, decode(50, 5.63, None)], 10.0) is None
    assert decode_allowance_ms([], 10.0) is None
    # The engine's budget is priced with the same limit.
    load = DecodeLoad.of([(1001, 100.0)] * 10)
    assert running_budget(LINE, [fresh] * 10 + [prompt], 10.0, 2048, 16) - 10 == chunk_budget(
        LINE, load, 2038, 16, limit_ms=decode_allowance_ms([fresh], 10.0)
    )

    # The estimate of a prompt's prefill beside them: 2,000 tokens beside 10 decodes (40 ms
    # alone), with no slack in two chunks within 90 ms (156 ms). Slack lent spends first:
    # where it pays for a step of the whole prompt (122 ms), one step.
    beside = DecodeLoad.of([(1000, 100.0)] * 10)
    fresh_s = prefill_s(LINE, beside, 2000, 16)
    assert fresh_s == pytest.approx(0.1556, abs=1e-4)
    assert prefill_s(LINE, beside, 2000, 16, lent_ms=0.0) == fresh_s
    assert prefill_s(LINE, beside, 2000, 16, lent_ms=-5.0) == fresh_s  # nothing lent
    whole = step_ms(LINE, beside, 2000)
    assert whole == pytest.approx(122.0, abs=0.1)
    lent = whole - 90.0
    assert prefill_s(LINE, beside, 2000, 16, lent_ms=lent) == pytest.approx(whole / 1000.0)
    assert prefill_s(LINE, beside, 2000, 16, lent_ms=500.0) == pytest.approx(whole / 1000.0)
    # Slack is in the decodes' gift: beside none with a target nothing changes.
    free = DecodeLoad.of([(1000, None)] * 10)
    assert prefill_s(LINE, free, 2000, 16, lent_ms=500.0) == prefill_s(LINE, free, 2000, 16)


# As LINE, but a prefill token costs 1 ms: one block of 16 is a 17 ms chunk.
HEAVY = StepLine(0.010, 1e-3, 1e-3, 1e-8, 1e-6, 0.0)


def test_a_block_that_would_break_the_decodes_target_is_deferred_not_forced():
    # 26 decodes of 1,000 keys at 100 ms: alone 88 ms of the 90 allowed, with a block 105 ms.
    load = DecodeLoad.of([(1000, 100.0)] * 26)
    assert step_ms(HEAVY, load) <= 90.0 and step_ms(HEAVY, load, 16) > 100.0
    assert defers_block(HEAVY, load, 16, 90.0)
    assert step_token_budget(HEAVY, [(1000, 100.0)] * 26, 2048, 16, defer=True) == 26
    assert step_token_budget(HEAVY, [(1000, 100.0)] * 26, 2048, 16) == 26 + 16  # same class
    # Slack that pays for the block lets it through.
    assert not defers_block(HEAVY, load, 16, 106.0)
    paid = step_token_budget(HEAVY, [(1000, 100.0)] * 26, 2048, 16, limit_ms=106.0, defer=True)
    assert paid == 42
    # A block past the headroom but within the target itself goes through, as before.
    assert step_ms(LINE, load) <= 90.0 < step_ms(LINE, load, 16) <= 100.0
    assert not defers_block(LINE, load, 16, 90.0)
    assert step_token_budget(LINE, [(1000, 100.0)] * 26, 2048, 16, pending=16, defer=True) == 42
    # Decodes that miss their limit alone: deferring saves nothing, the block goes through.
    heavy = DecodeLoad.of([(1000, 100.0)] * 30)  # 100 ms
    assert not defers_block(HEAVY, heavy, 16, 90.0)
    assert step_token_budget(HEAVY, [(1000, 100.0)] * 30, 2048, 16, defer=True) == 30 + 16
    # Nothing to protect: no decodes, no line, no limit.
    assert not defers_block(HEAVY, DecodeLoad(), 16, 90.0)
    assert not defers_block(None, load, 16, 90.0)
    assert not defers_block(HEAVY, load, 16, None)


def test_a_lower_class_prompt_alternates_its_blocks_with_the_steps_that_pay_for_them():
    # The engine's own rule, step by step: 26 fresh decodes of 1,000 keys of class 2 and a
    # 48-token prompt of class 1.
    load = DecodeLoad.of([(1000, 100.0)] * 26)
    now, outputs, computed, decode_only = 0.0, 1, 0, 0
    while computed < 48:
        decodes = [_Seq(list(range(999 + outputs)), 998 + outputs, 100.0, 0.0, 999, 2)] * 26
        prompt = _Seq(list(range(48)), computed, None, None, 48, 1)
        chunk = min(48 - computed, running_budget(HEAVY, decodes + [prompt], now, 2048, 16) - 26)
        now += step_ms(HEAVY, load, chunk, computed) / 1000.0
        computed += chunk
        decode_only += chunk == 0
        outputs += 1
        # The decodes' mean gap stays within their target throughout (a forced block would
        # make the first gap 105 ms).
        assert now / (outputs - 1) <= 0.100
    # Each block waited for decode-only steps (15 ms over the limit, 2 ms of slack a step).
    assert decode_only >= 3 * 7
    # A prompt of the decodes' own class gets its block at once, as before.
    decodes = [_Seq(list(range(1000)), 999, 100.0, 0.0, 999, 2)] * 26
    same = _Seq(list(range(48)), 0, None, None, 48, 2)
    assert running_budget(HEAVY, decodes + [same], 0.0, 2048, 16) == 26 + 16


# A step costs 40 ms more for carrying a prompt's chunk (as SmolLM2's quantized CPU engine does:
# its products leave the few-row kernel), 0.5 ms a prefill token: a step's cost is concave in its
# tokens.
CONCAVE = StepLine(0.010, 5e-4, 2e-3, 1e-8, 1e-6, 0.040)


def _run_prompt(line: StepLine, n_decodes: int, prompt: int, budget_of) -> tuple[float, float]:
    """Step an engine by `budget_of(decodes, prompt_seq, now)` from fresh decodes (100 ms
    target) until the prompt is prefilled: (the prompt's prefill in s, the decodes' largest
    mean gap in s)."""
    now, outputs, computed, worst = 0.0, 1, 0, 0.0
    load = DecodeLoad.of([(1000, 100.0)] * n_decodes)
    while computed < prompt:
        decodes = [_Seq(list(range(999 + outputs)), 998 + outputs, 100.0, 0.0, 999)] * n_decodes
        seq = _Seq(list(range(prompt)), computed, None, None, prompt)
        chunk = min(prompt - computed, budget_of(decodes, seq, now) - n_decodes)
        now += step_ms(line, load, chunk, computed) / 1000.0
        computed += chunk
        outputs += 1
        worst = max(worst, now / (outputs - 1))
    return now, worst


def test_a_chunk_whose_step_passes_the_limit_waits_for_the_slack_that_pays_for_it():
    """Beside 2 fresh decodes (17 ms a step alone) a 150-token prompt's step takes 134 ms,
    past their 90 ms: the decodes run alone until their slack pays for it, and the prompt
    reaches its end in under two thirds of the time chunks within the limit take (48 tokens,
    each step paying the 40 ms of carrying one), while the decodes' mean gap stays within
    their target."""
    decodes = [_Seq(list(range(1000)), 999, 100.0, 0.0, 999)] * 2
    prompt = _Seq(list(range(150)), 0, None, None, 150)
    load = DecodeLoad.of([(1000, 100.0)] * 2)
    assert step_ms(CONCAVE, load, 150) > 90.0 > step_ms(CONCAVE, load, 16)
    assert running_budget(CONCAVE, decodes + [prompt], 0.0, 512, 16) == 2  # wait
    assert defer_pays(CONCAVE, load, 150, 0, 90.0, 90.0, 16)
    # With slack enough (the decodes' 19 gaps took 0.5 s of 1.71), the whole prompt goes.
    seasoned = [_Seq(list(range(1019)), 1018, 100.0, 0.0, 999)] * 2
    assert running_budget(CONCAVE, seasoned + [prompt], 0.5, 512, 16) >= 152
    # A prompt still waiting for its first step counts too.
    assert running_budget(CONCAVE, decodes, 0.0, 512, 16, waiting=[prompt]) == 2

    def slack_fed(decodes, seq, now):
        return running_budget(CONCAVE, decodes + [seq], now, 512, 16)

    def within(decodes, seq, now):
        return len(decodes) + chunk_budget(CONCAVE, load, 512, 16)

    fed, fed_gap = _run_prompt(CONCAVE, 2, 150, slack_fed)
    chunked, _ = _run_prompt(CONCAVE, 2, 150, within)
    assert fed < chunked / 1.5
    assert fed_gap <= 0.100
    # The estimate walks the same rule from fresh decodes.
    assert prefill_s(CONCAVE, load, 150, 16, max_chunk=512) == pytest.approx(fed, rel=0.05)


def test_a_chunk_is_fed_within_the_limit_where_waiting_would_not_pay():
    """Decodes that leave almost no slack a step (88 of 90 ms) would wait a long time for a
    large chunk; one block a step goes instead, as before."""
    load = DecodeLoad.of([(1000, 100.0)] * 20)
    line = StepLine(0.010, 5e-4, 2.4e-3, 1e-8, 1e-6, 0.0)
    assert step_ms(line, load) == pytest.approx(88.0, abs=0.5)
    assert not defer_pays(line, load, 150, 0, 90.0, 90.0, 16)
    budget = step_token_budget(line, [(1000, 100.0)] * 20, 512, 16, pending=150)
    assert budget == 20 + chunk_budget(line, load, 492, 16)
