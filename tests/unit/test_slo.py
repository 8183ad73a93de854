"""SLO-aware batching (strata.policy.scheduling.slo): the TPOT check refuses the request that
would push running decodes past their target and admits it once they finish; the prefill
chunk budget keeps a step within the tightest target."""

import pytest

from strata.core.step_model import StepLine
from strata.policy.scheduling.slo import (
    DecodeLoad,
    chunk_budget,
    fits,
    seconds_until_room,
    step_ms,
)

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


def test_room_frees_after_the_remaining_tokens_at_the_current_step_time():
    load = DecodeLoad.of([(1000, 100.0)] * 20)  # 70 ms a step
    assert seconds_until_room(LINE, load, 50) == pytest.approx(3.5)
    assert seconds_until_room(None, load, 50) is None
    assert seconds_until_room(LINE, DecodeLoad(), 50) is None
