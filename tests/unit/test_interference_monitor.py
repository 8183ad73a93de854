"""The node's interference monitor on a manual clock: counter growth per replica, restarts and
first sightings, replicas without a profile, the work-weighted node ratio, forgotten replicas."""

from __future__ import annotations

import pytest

from strata.node.interference_monitor import InterferenceMonitor, StepCounters
from strata.policy.clock import ManualClock
from strata.policy.scheduling.interference import EstimatorSettings, MarginSettings

SETTINGS = EstimatorSettings(window_s=2.0, min_solo_s=0.01, warmup_samples=2)
MARGIN = MarginSettings(floor=0.05)


class Counters:
    """Cumulative counters of one worker whose solo profile is `mismatch` times too fast."""

    def __init__(self, mismatch: float) -> None:
        self.mismatch = mismatch
        self.now = StepCounters()

    def grow(self, solo_s: float, interference: float = 1.0) -> StepCounters:
        self.now = StepCounters(
            self.now.observed_s + solo_s * self.mismatch * interference, self.now.solo_s + solo_s
        )
        return self.now


def beat(monitor: InterferenceMonitor, clock: ManualClock, **counters: StepCounters):
    clock.advance(1.0)
    return monitor.update(counters)


def test_each_replica_learns_its_own_baseline_and_the_node_weights_them_by_work():
    clock = ManualClock()
    monitor = InterferenceMonitor(SETTINGS, MARGIN, clock)
    a, b = Counters(mismatch=2.0), Counters(mismatch=0.5)
    for _ in range(4):
        est = beat(monitor, clock, a=a.grow(0.3), b=b.grow(0.1))
    assert (est.interference, est.safety_margin) == (1.0, 0.05)
    # Interference on the machine: both slow down 1.6x; a did three times b's work.
    beat(monitor, clock, a=a.grow(0.3, 1.6), b=b.grow(0.1, 1.6))
    est = beat(monitor, clock, a=a.grow(0.3, 1.6), b=b.grow(0.1, 1.6))
    assert est.interference == pytest.approx(1.6)
    assert est.safety_margin == pytest.approx(0.65)
    # Only a is slowed: the node's ratio is a's, weighted by a's share of the work.
    beat(monitor, clock, a=a.grow(0.3, 2.0), b=b.grow(0.1))
    est = beat(monitor, clock, a=a.grow(0.3, 2.0), b=b.grow(0.1))
    assert est.interference == pytest.approx(0.75 * 2.0 + 0.25 * 1.0)


def test_a_first_sighting_or_a_restart_only_sets_the_starting_point():
    clock = ManualClock()
    monitor = InterferenceMonitor(SETTINGS, MARGIN, clock)
    # Counters from long before the node saw this worker: not one interval's growth.
    beat(monitor, clock, a=StepCounters(observed_s=500.0, solo_s=100.0))
    assert monitor._estimators == {}
    beat(monitor, clock, a=StepCounters(observed_s=501.0, solo_s=100.5))
    beat(monitor, clock, a=StepCounters(observed_s=502.0, solo_s=101.0))
    assert monitor._estimators["a"].baseline() == 2.0
    # The worker restarted: its counters start again from zero and are not a negative growth.
    est = beat(monitor, clock, a=StepCounters(observed_s=0.2, solo_s=0.1))
    assert est.interference == 1.0
    est = beat(monitor, clock, a=StepCounters(observed_s=1.7, solo_s=0.6))
    assert est.interference == pytest.approx(1.5)


def test_replicas_without_a_profile_or_idle_add_nothing_and_gone_ones_are_forgotten():
    clock = ManualClock()
    monitor = InterferenceMonitor(SETTINGS, MARGIN, clock)
    a = Counters(mismatch=1.0)
    for _ in range(3):
        est = beat(monitor, clock, a=a.grow(0.5), noprofile=StepCounters())
    assert est.interference == 1.0
    assert set(monitor._estimators) == {"a"}
    est = beat(monitor, clock, noprofile=StepCounters())
    assert (est.interference, monitor._estimators, monitor._last) == (
        1.0,
        {},
        {"noprofile": StepCounters()},
    )
