"""Interference estimate and safety margin of a node: pure, clock injected.

The worker prices every engine step with its reference (its solo profile in the engine's dtype,
else its online step line before the line learns the step: strata.engine.step_meter); the node
feeds the growth of the measured and the predicted seconds, once per sampling interval, to an
InterferenceEstimator, and the estimate to a SafetyMargin that the global scheduler reads from
heartbeats to keep headroom on a node that other work slows down.

                 observed_s / solo_s over the last window
    interference = ----------------------------------------   (clamped at 1: none)
                   baseline: a low quantile of the interval
                   ratios over the last minutes

The baseline is what a quiet machine reads: a profile measured on another machine, with other
threads, or on a GPU where this is a CPU, is off by a factor that says nothing about
interference. A low quantile learns it in one interval and unlearns it only when most of the
baseline window reads higher, so interference that lasts less than most of that window never
becomes the new normal.

    margin
    floor+e |      +-----+                  rises at once to floor + (interference - 1),
            |      |      \\                 decays with a half-life once it subsides;
      floor |------+       `------------    hysteresis: rises past `rise`, lets go below
            +----------------------------   `release`, so noise around a level cannot flap it
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from strata.core.stats import percentile
from strata.policy.clock import Clock


@dataclass(slots=True, frozen=True)
class EstimatorSettings:
    window_s: float = 2.0  # the reported ratio pools the samples this recent
    baseline_window_s: float = 300.0  # the baseline's memory
    baseline_quantile: float = 0.25  # low: interference only ever lengthens steps
    min_solo_s: float = 0.02  # an idle interval's few steps are noise: pool deltas
    # until they hold this much priced work
    warmup_samples: int = 5  # without this many samples there is no baseline yet

    def __post_init__(self) -> None:
        if not 0 < self.window_s <= self.baseline_window_s:
            raise ValueError(
                f"window_s must be positive and at most baseline_window_s "
                f"({self.baseline_window_s}), got {self.window_s}"
            )
        if not 0 <= self.baseline_quantile <= 1:
            raise ValueError(
                f"baseline_quantile must be between 0 and 1, got {self.baseline_quantile}"
            )
        if self.min_solo_s <= 0 or self.warmup_samples < 1:
            raise ValueError(
                f"min_solo_s must be positive and warmup_samples at least 1, got "
                f"{self.min_solo_s} and {self.warmup_samples}"
            )


@dataclass(slots=True, frozen=True)
class _Sample:
    at: float
    observed_s: float
    solo_s: float

    @property
    def ratio(self) -> float:
        return self.observed_s / self.solo_s


class InterferenceEstimator:
    """Observed over solo step time of one worker, normalised by its learned baseline."""

    def __init__(self, clock: Clock, settings: EstimatorSettings = EstimatorSettings()) -> None:
        self.clock = clock
        self.settings = settings
        self._samples: deque[_Sample] = deque()
        self._pending_observed = 0.0
        self._pending_solo = 0.0

    def observe(self, observed_s: float, solo_s: float) -> None:
        """The growth of the worker's two counters over one interval ending now."""
        if (
            not (math.isfinite(observed_s) and math.isfinite(solo_s))
            or observed_s < 0
            or solo_s < 0
        ):
            raise ValueError(
                f"step seconds must be finite and non-negative, got observed "
                f"{observed_s} and solo {solo_s}"
            )
        self._pending_observed += observed_s
        self._pending_solo += solo_s
        if self._pending_solo < self.settings.min_solo_s:
            return
        self._samples.append(_Sample(self.clock.now(), self._pending_observed, self._pending_solo))
        self._pending_observed = self._pending_solo = 0.0

    def _prune(self) -> float:
        now = self.clock.now()
        oldest = now - self.settings.baseline_window_s
        while self._samples and self._samples[0].at <= oldest:
            self._samples.popleft()
        return now

    def baseline(self) -> float:
        """The ratio a quiet machine reads (1.0 before any sample)."""
        self._prune()
        if not self._samples:
            return 1.0
        return percentile([s.ratio for s in self._samples], 100 * self.settings.baseline_quantile)

    def recent_solo_s(self) -> float:
        """Priced work in the current window: how much evidence ratio() stands on."""
        since = self._prune() - self.settings.window_s
        return math.fsum(s.solo_s for s in self._samples if s.at > since)

    def ratio(self) -> float:
        """Interference now: 1.0 means none, 1.5 means steps take 50% longer than alone. 1.0
        too while there is no recent work to judge by, or no baseline yet."""
        since = self._prune() - self.settings.window_s
        if len(self._samples) < self.settings.warmup_samples:
            return 1.0
        recent = [s for s in self._samples if s.at > since]
        if not recent:
            return 1.0
        pooled = math.fsum(s.observed_s for s in recent) / math.fsum(s.solo_s for s in recent)
        return max(1.0, pooled / self.baseline())


@dataclass(slots=True, frozen=True)
class MarginSettings:
    floor: float = 0.05  # headroom kept with no interference at all
    cap: float = 1.0
    half_life_s: float = 4.0  # of the decay once interference subsides
    rise: float = 0.2  # interference - 1 above this raises a margin at rest ...
    release: float = 0.1  # ... and a raised one lets go once it falls below this

    def __post_init__(self) -> None:
        if not 0 <= self.floor <= self.cap:
            raise ValueError(
                f"the margin floor must be between 0 and the cap ({self.cap}), got {self.floor}"
            )
        if self.half_life_s <= 0:
            raise ValueError(f"half_life_s must be positive, got {self.half_life_s}")
        if not 0 <= self.release <= self.rise:
            raise ValueError(f"release ({self.release}) must be between 0 and rise ({self.rise})")


class SafetyMargin:
    """The headroom a node asks the scheduler to keep, as a fraction of its capacity."""

    def __init__(self, clock: Clock, settings: MarginSettings = MarginSettings()) -> None:
        self.clock = clock
        self.settings = settings
        self.value = settings.floor
        self.raised = False
        self._at = clock.now()

    def update(self, interference: float) -> float:
        """Fold in the interference estimated now; returns the margin."""
        s = self.settings
        now = self.clock.now()
        elapsed, self._at = now - self._at, now
        excess = interference - 1.0
        self.raised = excess > (s.release if self.raised else s.rise)
        target = min(s.cap, s.floor + excess) if self.raised else s.floor
        if target >= self.value:
            self.value = target  # at once: an admission made now already runs slower
        else:
            self.value = target + (self.value - target) * 0.5 ** (elapsed / s.half_life_s)
        return self.value
