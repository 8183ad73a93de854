"""The step cap (strata.policy.scheduling.step_cap): a share of the tightest TTFT target among
the requests taken within the window, lifted while that class's own prompt is prefilling; on
an injected clock."""

from dataclasses import dataclass

import pytest

from strata.policy.scheduling.step_cap import StepCap


@dataclass
class Seq:
    priority: int
    num_pending: int


def test_the_tightest_recent_target_sets_the_cap_and_lapses_after_the_window():
    cap = StepCap(share=0.5, window_s=60.0)
    assert cap.cap_ms(0.0) is None
    cap.note(None, 2, 0.0)
    cap.note(0.0, 2, 0.0)  # no target: nothing to cap for
    assert cap.cap_ms(0.0) is None
    cap.note(2000.0, 1, 0.0)
    cap.note(500.0, 2, 10.0)
    assert cap.cap_ms(10.0) == 250.0
    assert cap.cap_ms(70.0) == 250.0  # the 500 ms class came 60 s ago: still about
    assert cap.cap_ms(70.5) is None  # neither came within the last minute
    cap.note(2000.0, 1, 80.0)
    assert cap.cap_ms(80.0) == 1000.0


def test_the_class_the_cap_protects_prefills_its_own_prompt_uncapped():
    cap = StepCap(share=0.5)
    cap.note(500.0, 2, 0.0)
    lower = [Seq(1, 300), Seq(2, 1)]  # a standard prompt, an interactive decode
    assert cap.cap_ms(1.0, lower) == 250.0
    assert cap.cap_ms(1.0, [*lower, Seq(2, 140)]) is None  # an interactive prompt: its own step
    assert cap.cap_ms(1.0, [Seq(3, 40)]) is None  # a class above it: nothing to protect


def test_stale_targets_are_dropped_and_bad_settings_refused():
    cap = StepCap(window_s=1.0)
    for k in range(20):
        cap.note(100.0 + k, 2, float(k))
    assert len(cap._seen) <= 9
    assert cap.cap_ms(19.0) == pytest.approx(0.5 * 118.0)  # 118 came 1 s ago: still about
    with pytest.raises(ValueError, match="share"):
        StepCap(share=0.0)
    with pytest.raises(ValueError, match="window_s"):
        StepCap(window_s=0.0)
