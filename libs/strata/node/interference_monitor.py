"""The node manager's interference monitor: the workers' step counters in, the node's
interference estimate and safety margin out, once per heartbeat.

Each worker prices its steps with its own reference (its model's solo profile, or its online
step line: strata.engine.step_meter), and each reference is off from this machine by its own
factor, so every worker gets its own estimator (its own baseline). The node's interference is
the estimators' ratios weighted by the priced work each saw in the window: a worker that ran
two steps says less than one that ran two hundred. One safety margin follows that node-wide
ratio.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from strata.policy.clock import Clock, WallClock
from strata.policy.scheduling.interference import (
    EstimatorSettings,
    InterferenceEstimator,
    MarginSettings,
    SafetyMargin,
)


@dataclass(slots=True, frozen=True)
class StepCounters:
    """A worker's cumulative step seconds (WorkerStats.step_seconds_observed / _solo)."""

    observed_s: float = 0.0
    solo_s: float = 0.0


@dataclass(slots=True, frozen=True)
class NodeInterference:
    interference: float  # 1.0: none
    safety_margin: float


class InterferenceMonitor:
    def __init__(
        self,
        estimator: EstimatorSettings = EstimatorSettings(),
        margin: MarginSettings = MarginSettings(),
        clock: Clock = WallClock(),
    ) -> None:
        self.clock = clock
        self.settings = estimator
        self.margin = SafetyMargin(clock, margin)
        self._estimators: dict[str, InterferenceEstimator] = {}
        self._last: dict[str, StepCounters] = {}

    def update(self, counters: Mapping[str, StepCounters]) -> NodeInterference:
        """Fold in the current counters of every serving replica, by replica id. A replica
        seen for the first time, or whose counters went back (its worker restarted), only
        sets the point its next growth is measured from: what it ran before is of unknown
        age. Replicas no longer listed are forgotten."""
        for rid in [r for r in self._last if r not in counters]:
            del self._last[rid]
            self._estimators.pop(rid, None)
        for rid, now in counters.items():
            before = self._last.get(rid)
            self._last[rid] = now
            if before is None or now.observed_s < before.observed_s or now.solo_s < before.solo_s:
                continue
            grown_solo = now.solo_s - before.solo_s
            if grown_solo <= 0:
                continue  # idle, or a worker that does not meter its steps (its counters stay 0)
            estimator = self._estimators.get(rid)
            if estimator is None:
                estimator = self._estimators[rid] = InterferenceEstimator(self.clock, self.settings)
            estimator.observe(now.observed_s - before.observed_s, grown_solo)
        ratio = self.interference()
        return NodeInterference(ratio, self.margin.update(ratio))

    def interference(self) -> float:
        weighted = [(e.ratio(), e.recent_solo_s()) for e in self._estimators.values()]
        total = math.fsum(w for _, w in weighted)
        if total <= 0:
            return 1.0
        return math.fsum(r * w for r, w in weighted) / total
