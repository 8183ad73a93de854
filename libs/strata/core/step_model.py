"""An engine's step-time model learned online: what a step of a given shape costs on this
worker, starting from a prior and corrected by every step the engine runs.

The model is the profile's line (strata.core.profile): seconds = theta . features(shape), with
features (1, tokens, sampled, prefill_keys, decode_keys, prefill groups). It is fitted by recursive
least squares with forgetting, started at the prior's coefficients with a prior weight worth
`prior_steps` steps, so that:

- before any step it predicts exactly the prior;
- a shipped profile (`prior_from_costs`) is a prior the measurements correct (a profile from
  another machine converges to this one's costs);
- a model without one gets `conservative_prior`, priced from its size with pessimistic machine
  speeds, so admission admits less, never more, than the hardware allows until it has data.

`line()` is what admission prices with: the fitted coefficients floored at zero and raised by
`z` times the fit's relative standard error at the shapes the engine runs (each coefficient no
higher than the larger of the prior's and the fit's). All features are non-negative, so a
line's prediction is at least the fit's; it tends to the fit as the steps add up.

Invariant: every coefficient of `line()` is finite and >= 0. Called on one thread (the
engine's); `line()` returns an immutable snapshot that other threads may read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from strata.core.profile import StepCosts, StepShape

FEATURES = 6  # (1, tokens, sampled, prefill_keys, decode_keys, prefill groups)
# Feature scales: keys run to millions, tokens to thousands; the fit runs on scaled features so
# that its covariance stays well conditioned.
_SCALE = np.array([1.0, 1e3, 1e2, 1e6, 1e6, 1.0])


@dataclass(slots=True, frozen=True)
class StepLine:
    """Seconds of a step = step_s + token_s x tokens + sample_s x sampled + prefill_attend_s x
    prefill keys + decode_attend_s x decode keys + group_s x prefill groups (0 or 1)."""

    step_s: float
    token_s: float
    sample_s: float
    prefill_attend_s: float
    decode_attend_s: float
    group_s: float
    samples: int = 0  # steps the fit has seen (0: the prior alone)

    def __post_init__(self) -> None:
        for name in ("step_s", "token_s", "sample_s", "prefill_attend_s", "decode_attend_s",
                     "group_s"):  # fmt: skip
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {value}")

    @classmethod
    def from_coefficients(
        cls, values: tuple[float, ...] | list[float], samples: int = 0
    ) -> StepLine:
        if len(values) != FEATURES:
            raise ValueError(f"a step line has {FEATURES} coefficients, got {len(values)}")
        step, token, sample, prefill, decode, group = (float(v) for v in values)
        return cls(step, token, sample, prefill, decode, group, samples=samples)

    def coefficients(self) -> tuple[float, ...]:
        return (self.step_s, self.token_s, self.sample_s, self.prefill_attend_s,
                self.decode_attend_s, self.group_s)  # fmt: skip

    def seconds(self, shape: StepShape) -> float:
        return (
            self.step_s
            + self.token_s * shape.tokens
            + self.sample_s * shape.sampled
            + self.prefill_attend_s * shape.prefill_keys
            + self.decode_attend_s * shape.decode_keys
            + self.group_s * shape.groups
        )

    def decode_step_s(
        self,
        decodes: int,
        context_tokens: float,
        prefill_tokens: int = 0,
        prefill_history: int = 0,
    ) -> float:
        """A step of `decodes` one-token decodes over `context_tokens` keys in all, with a
        prefill chunk of `prefill_tokens` beside them whose prompt has `prefill_history` tokens
        computed before it (its attention: the chunk's queries over the history and itself)."""
        groups = int(prefill_tokens > 0)
        return self.seconds(
            StepShape(
                tokens=decodes + prefill_tokens,
                sampled=decodes + (prefill_tokens > 0),
                prefill_keys=float(prefill_tokens * (prefill_history + prefill_tokens)),
                decode_keys=float(context_tokens),
                groups=groups,
            )
        )


def prior_from_costs(costs: StepCosts) -> StepLine:
    """A shipped or measured profile's line as the prior."""
    return StepLine(
        max(0.0, costs.step_s),
        max(0.0, costs.token_s),
        max(0.0, costs.sample_s),
        max(0.0, costs.prefill_attend_s),
        max(0.0, costs.decode_attend_s),
        max(0.0, costs.group_s),
    )


# Pessimistic machine speeds for a model without a profile: what a small, busy CPU core
# sustains (a real machine is faster, so the prior over-prices steps and admits less).
SLOW_FLOPS = 2e10  # multiply-adds x 2 per second
SLOW_BYTES_PER_S = 5e9  # memory read bandwidth
# KV bytes an attention kernel gets through: each element is converted and reduced, not only
# read, so a narrow cache is not priced cheaper per element than the kernel runs it
SLOW_KV_BYTES_PER_S = 2.5e9
SLOW_STEP_S = 0.005  # fixed cost of a step (scheduling, launches, sampling setup)
SLOW_KEY_S = 5e-7  # a key read costs at least this (small heads: the loop, not the bytes)


def conservative_prior(params: int, weight_bytes: int, kv_bytes_per_token: int) -> StepLine:
    """A prior for a model known only by its size: every step reads the weights once, every
    token costs 2 x params flops, every key read costs its KV bytes (at the attention kernel's
    slower pace)."""
    if params <= 0 or weight_bytes <= 0 or kv_bytes_per_token <= 0:
        raise ValueError(
            f"a conservative prior needs positive params, weight bytes and KV bytes per token, "
            f"got {params}, {weight_bytes}, {kv_bytes_per_token}"
        )
    key_s = max(kv_bytes_per_token / SLOW_KV_BYTES_PER_S, SLOW_KEY_S)
    return StepLine(
        step_s=SLOW_STEP_S + weight_bytes / SLOW_BYTES_PER_S,
        token_s=2.0 * params / SLOW_FLOPS,
        sample_s=0.0,
        prefill_attend_s=key_s,
        decode_attend_s=key_s,
        group_s=0.0,
    )


NOISE_FLOOR = 0.01  # step times are never trusted to better than 1%
PRIOR_NOISE = 0.1  # the relative noise the prior's spread is measured against
NOISE_FORGETTING = 0.95  # the noise estimate follows the last ~20 residuals


class OnlineStepModel:
    """Bayesian linear regression over step shapes, updated step by step (recursive least
    squares with forgetting), from a prior line (module docstring).

    Each step is weighted by the inverse of its measured time, so the fit minimises relative
    error: a step of one decode and a step of thirty-two count alike, and the noise (learned
    from the recent relative residuals, a faster forgetting than the fit's, floored at
    NOISE_FLOOR) is one figure for all shapes. The prior says each coefficient is its prior
    value give or take a third of it (or of the step's fixed cost where the prior has none).
    """

    def __init__(self, prior: StepLine, forgetting: float = 0.999, z: float = 2.0) -> None:
        if not 0.9 <= forgetting <= 1.0 or z < 0:
            raise ValueError(f"forgetting must be in [0.9, 1] and z >= 0; got {forgetting}, {z}")
        self.prior = prior
        self._theta = np.array(prior.coefficients()) * _SCALE  # per scaled feature
        spread = np.maximum(np.abs(self._theta), prior.step_s + 1e-4) / 3.0
        # P is the posterior covariance over the (relative) noise variance, RLS's normalisation.
        self._p = np.diag(spread**2) / PRIOR_NOISE**2
        self._forget = forgetting
        self._z = z
        self._sq_err = 0.0  # forgetting-weighted sum of squared residuals
        self._weight = 0.0  # forgetting-weighted count of steps
        self._spread = 0.0  # forgetting-weighted sum of x' P x over the steps seen
        self.samples = 0
        self._line = prior

    def observe(self, shape: StepShape, seconds: float) -> None:
        """One step of `shape` that took `seconds` (non-finite or negative times are ignored)."""
        if not (math.isfinite(seconds) and seconds >= 0):
            return
        x = np.array(shape.features()) / _SCALE
        weight = 1.0 / max(seconds, 1e-5)  # relative to what was measured: always defined
        x = x * weight
        p_x = self._p @ x
        residual = seconds * weight - float(x @ self._theta)
        gain = p_x / (self._forget + float(x @ p_x))
        self._theta = self._theta + gain * residual
        self._p = (self._p - np.outer(gain, p_x)) / self._forget
        # The fit's relative uncertainty at the shapes the engine runs (after this step).
        self._spread = NOISE_FORGETTING * self._spread + float(x @ self._p @ x)
        self._sq_err = NOISE_FORGETTING * self._sq_err + residual * residual
        self._weight = NOISE_FORGETTING * self._weight + 1.0
        self.samples += 1
        line = self._upper()
        if line is not None:
            self._line = line

    def line(self) -> StepLine:
        """The conservative line admission prices with (module docstring); the prior itself
        before the first step."""
        return self._line

    def fit(self) -> StepLine:
        """The fitted coefficients themselves, floored at zero."""
        return StepLine.from_coefficients(
            list(np.maximum(self._theta, 0.0) / _SCALE), samples=self.samples
        )

    def _upper(self) -> StepLine | None:
        noise_var = max(NOISE_FLOOR**2, self._sq_err / max(self._weight, 1.0))
        # Relative standard error of the fit's prediction at the recent shapes: a prediction
        # is a sum over coefficients whose errors offset each other, far tighter than the sum
        # of each coefficient's own error.
        margin = self._z * math.sqrt(self._spread / max(self._weight, 1.0) * noise_var)
        fit = np.maximum(self._theta, 0.0)
        # Never above what the prior or the fit itself says, whichever is more: the first
        # residuals (the prior's error) inflate the noise estimate for a while.
        prior = np.array(self.prior.coefficients()) * _SCALE
        line = np.minimum(fit * (1.0 + margin), np.maximum(prior, fit)) / _SCALE
        if not np.all(np.isfinite(line)):
            return None
        return StepLine.from_coefficients(list(line), samples=self.samples)
