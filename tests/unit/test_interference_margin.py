"""Interference estimator and safety margin on a manual clock: the baseline a profile mismatch
teaches, the margin's rise at a load step and its decay after, noise, hysteresis, exact values."""

from __future__ import annotations

import random

import pytest

from strata.policy.clock import ManualClock
from strata.policy.scheduling.interference import (
    EstimatorSettings,
    InterferenceEstimator,
    MarginSettings,
    SafetyMargin,
)

INTERVAL_S = 1.0  # the node's heartbeat
SOLO_S = 0.8  # priced work per interval: a busy worker
FLOOR = MarginSettings().floor


class Node:
    """One worker's counters growing every interval, read by an estimator and a margin."""

    def __init__(
        self,
        mismatch: float = 1.0,
        noise: float = 0.0,
        seed: int = 0,
        margin: MarginSettings = MarginSettings(),
    ) -> None:
        self.clock = ManualClock()
        self.estimator = InterferenceEstimator(self.clock)
        self.margin = SafetyMargin(self.clock, margin)
        self.mismatch = mismatch
        self.noise = noise
        self.rng = random.Random(seed)

    def run(self, seconds: int, interference: float) -> list[tuple[float, float, float]]:
        """(time, ratio, margin) after each interval."""
        out = []
        for _ in range(seconds):
            self.clock.advance(INTERVAL_S)
            jitter = 1 + self.rng.uniform(-self.noise, self.noise) if self.noise else 1.0
            self.estimator.observe(SOLO_S * self.mismatch * interference * jitter, SOLO_S)
            ratio = self.estimator.ratio()
            out.append((self.clock.now(), ratio, self.margin.update(ratio)))
        return out


def test_a_step_to_one_and_a_half_raises_the_margin_within_two_intervals():
    node = Node()
    quiet = node.run(60, 1.0)
    assert {m for _, _, m in quiet} == {FLOOR}
    step = node.run(5, 1.5)
    # The window pools the last two intervals: half interfered, then all.
    assert [r for _, r, _ in step[:2]] == pytest.approx([1.25, 1.5])
    assert [m for _, _, m in step[:2]] == pytest.approx([FLOOR + 0.25, FLOOR + 0.5])
    assert step[1][2] >= 0.45
    assert all(m == pytest.approx(FLOOR + 0.5) for _, _, m in step[1:])


def test_after_interference_ends_the_margin_is_back_at_the_floor_within_30_s():
    node = Node()
    node.run(60, 1.0)
    node.run(30, 1.5)
    ended = node.clock.now()
    after = node.run(40, 1.0)
    settled = next(t for t, _, m in after if m - FLOOR <= 0.05) - ended
    assert settled <= 30
    # Decays rather than drops: a short lull does not give the headroom back at once.
    assert after[1][2] > FLOOR + 0.3
    # The pooled window still holds the last interfered interval, then the margin halves its
    # distance to the floor every half-life.
    assert after[1][1] == 1.0
    half_life = MarginSettings().half_life_s
    d1, d5 = after[1][2] - FLOOR, after[5][2] - FLOOR
    assert d5 == pytest.approx(d1 * 0.5 ** (4 * INTERVAL_S / half_life))
    assert settled == 14.0


def test_a_constant_profile_mismatch_reads_as_no_interference():
    node = Node(mismatch=2.0)
    out = node.run(120, 1.0)
    assert node.estimator.baseline() == pytest.approx(2.0)
    assert {r for _, r, _ in out} == {1.0}
    assert {m for _, _, m in out} == {FLOOR}
    # ... and interference on top of it is still seen, relative to the machine's own baseline.
    step = node.run(2, 1.5)
    assert step[-1][1] == pytest.approx(1.5)


def test_ten_percent_noise_does_not_move_the_margin():
    for seed in range(5):
        node = Node(mismatch=2.0, noise=0.10, seed=seed)
        out = node.run(600, 1.0)
        assert max(r for _, r, _ in out) < 1.0 + MarginSettings().rise
        assert max(m for _, _, m in out) == FLOOR


def test_hysteresis_keeps_a_raised_margin_following_its_level_until_it_falls_below_release():
    clock = ManualClock()
    margin = SafetyMargin(clock, MarginSettings(floor=0.0, rise=0.2, release=0.1, half_life_s=2.0))
    clock.advance(1)
    assert margin.update(1.15) == 0.0  # below rise: at rest
    clock.advance(1)
    assert margin.update(1.25) == pytest.approx(0.25)
    clock.advance(2)
    # 1.15 no longer raises a margin at rest, but keeps a raised one: decay toward 0.15.
    assert margin.update(1.15) == pytest.approx(0.15 + 0.1 * 0.5)
    assert margin.raised
    clock.advance(2)
    assert margin.update(1.05) == pytest.approx(0.0 + 0.2 * 0.5)
    assert not margin.raised


def test_the_margin_is_capped_and_rises_at_once():
    clock = ManualClock()
    margin = SafetyMargin(clock, MarginSettings(floor=0.1, cap=1.0))
    clock.advance(0.5)
    assert margin.update(4.0) == 1.0
    clock.advance(0.5)
    assert margin.update(1.8) == pytest.approx(0.9 + 0.1 * 0.5 ** (0.5 / 4.0))


def test_the_estimator_pools_small_intervals_and_waits_for_a_baseline():
    clock = ManualClock()
    est = InterferenceEstimator(
        clock, EstimatorSettings(window_s=2.0, min_solo_s=0.5, warmup_samples=2)
    )
    clock.advance(1)
    est.observe(0.3, 0.25)
    assert est.recent_solo_s() == 0.0  # pooled: not yet enough priced work
    clock.advance(1)
    est.observe(0.3, 0.25)
    assert est.recent_solo_s() == 0.5
    assert est.baseline() == 1.2
    assert est.ratio() == 1.0  # one sample: no baseline yet
    clock.advance(1)
    est.observe(1.2, 0.5)
    # Baseline: the 25% quantile of (1.2, 2.4) = 1.5; the window pools both samples:
    # 1.8 / 1.0 = 1.8; 1.8 / 1.5 = 1.2.
    assert est.baseline() == pytest.approx(1.5)
    assert est.ratio() == pytest.approx(1.2)
    clock.advance(2)
    assert est.ratio() == 1.0  # nothing recent: no evidence of interference


def test_samples_leave_the_baseline_after_its_window():
    clock = ManualClock()
    est = InterferenceEstimator(clock, EstimatorSettings(baseline_window_s=10.0, warmup_samples=1))
    clock.advance(1)
    est.observe(1.0, 1.0)
    clock.advance(1)
    est.observe(3.0, 1.0)
    assert est.baseline() == pytest.approx(1.5)
    clock.advance(9)
    assert est.baseline() == 3.0  # the first sample is 10 s old


def test_bad_input_and_settings_are_refused():
    est = InterferenceEstimator(ManualClock())
    with pytest.raises(ValueError, match="finite and non-negative"):
        est.observe(-1.0, 1.0)
    with pytest.raises(ValueError, match="finite and non-negative"):
        est.observe(float("nan"), 1.0)
    with pytest.raises(ValueError, match="release"):
        MarginSettings(rise=0.1, release=0.2)
    with pytest.raises(ValueError, match="floor"):
        MarginSettings(floor=1.5, cap=1.0)
    with pytest.raises(ValueError, match="window_s"):
        EstimatorSettings(window_s=600.0, baseline_window_s=300.0)


def test_even_from_the_cap_the_margin_settles_within_30_s():
    node = Node()
    node.run(60, 1.0)
    assert node.run(10, 3.0)[-1][2] == MarginSettings().cap
    ended = node.clock.now()
    after = node.run(40, 1.0)
    settled = next(t for t, _, m in after if m - FLOOR <= 0.05) - ended
    # The first interval's window still pools an interfered one (ratio 2: the margin stays at
    # the cap); from then on the distance 0.95 halves every 4 s and needs log2(0.95 / 0.05)
    # = 4.25 half-lives: 17 s, so the 18th interval after the load ended.
    assert settled == 18.0
