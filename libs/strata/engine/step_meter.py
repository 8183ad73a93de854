"""The worker's step meter: every engine step, measured and as a reference line prices it.

The meter prices each step the engine runs and keeps two cumulative sums, the seconds measured
and the seconds its reference predicted for the same shapes; the node manager reads their growth
between heartbeats, and the ratio of the growths is the interference the other work on the
machine causes (strata.policy.scheduling.interference learns the ratio a quiet machine shows,
since a reference is off by a constant factor). The reference is

- the model's solo profile (`strata profile`, strata.core.profile: how long a step of a given
  shape takes on an otherwise idle machine) where one was measured in the dtype the engine
  computes in; or else
- the worker's own online step line (strata.core.step_model), each step priced before the line
  learns it, against the step's period as the line learns it.

A profile of another dtype (a bfloat16 one on a CPU that computes float32) is off from this
machine by a factor that changes with the shapes (its decode steps by one, its prefill steps by
another), so the mix of shapes a load runs would move the ratio where nothing interferes.

Every worker also learns its own step-time line online, with or without a profile: the
StepLearner is the engine's step observer, feeding each step's shape and period (the seconds
between consecutive step ends while busy) to an OnlineStepModel and its meter; GetStats reports
the model's line and the meter's sums.

Imports no torch: the engine calls it with its scheduled items after each step.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from strata.core.profile import StepCosts, StepShape, load_profile, step_shape
from strata.core.step_model import OnlineStepModel, conservative_prior, prior_from_costs
from strata.engine.scheduler import ScheduledSeq

if TYPE_CHECKING:
    from strata.engine.engine import LLMEngine

# Profiles shipped with the code, named <model>-<device type>.json as a folder of them must be.
PROFILES_DIR = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "core", "profiles"
)


def find_profile(model: str, device: str, folder: str = PROFILES_DIR) -> str:
    """The profile of `model` on this kind of device ("cuda:0" -> cuda) in `folder` (by
    default the shipped ones), or "" when there is none: a profile of another device type
    would price every step wrong by more than the baseline can learn away while the load's mix
    of shapes changes."""
    if os.sep in model or model.startswith("."):
        return ""  # a model served from a folder has no profile named after it
    path = os.path.join(folder, f"{model}-{device.split(':')[0]}.json")
    return path if os.path.isfile(path) else ""


def meter_from_profile(path: str, model: str, block_size: int) -> StepMeter:
    """A meter pricing with the profile at `path`, for a worker serving `model` with KV blocks
    of `block_size` tokens; ValueError with a sentence naming the file when it cannot be read
    or is of another model."""
    try:
        profile = load_profile(path)
    except OSError as err:
        raise ValueError(f"cannot read the solo profile {path}: {err.strerror}") from None
    if profile.model != model:
        raise ValueError(
            f"the solo profile {path} was measured for model {profile.model!r}, "
            f"but this worker serves {model!r}; point STRATA_PROFILE_PATH at "
            f"a profile of {model!r} or leave it unset"
        )
    return StepMeter(profile.costs, block_size, profile.dtype)


class Pricer(Protocol):
    """What a meter prices a step with: a solo profile's costs or a step line."""

    def seconds(self, shape: StepShape) -> float: ...


class LivePrice:
    """The current line of an online step model as a Pricer (the meter calls it before the
    model learns the step, so each step is priced out of sample)."""

    __slots__ = ("model",)

    def __init__(self, model: OnlineStepModel) -> None:
        self.model = model

    def seconds(self, shape: StepShape) -> float:
        return self.model.line().seconds(shape)


class StepMeter:
    """Cumulative measured and reference-predicted seconds of the engine's steps; `periods`:
    the measured seconds of a step are its period, as an online line learns it (else the
    step's own time, as a solo profile was measured).

    Invariant: both sums cover the same steps, so their growths over any interval compare
    like with like. Called on the engine's thread only; readers on other threads see floats
    that are each whole (a read between the two additions is off by one step, which the next
    read repairs).
    """

    __slots__ = ("costs", "block_size", "dtype", "periods", "observed_s", "solo_s", "steps")

    def __init__(
        self, costs: Pricer, block_size: int, dtype: str = "", periods: bool = False
    ) -> None:
        self.costs = costs
        self.block_size = block_size
        self.dtype = dtype  # the profile's engine dtype ("": not stated)
        self.periods = periods
        self.observed_s = 0.0
        self.solo_s = 0.0
        self.steps = 0

    def __call__(
        self, scheduled: Sequence[ScheduledSeq], seconds: float, period_s: float = 0.0
    ) -> None:
        """One step that ran `seconds` in a period of `period_s`; its items are already
        advanced, so each sequence's num_computed includes the step's tokens."""
        self.add(
            step_shape(
                ((i.num_new, i.sample, i.seq.num_computed) for i in scheduled), self.block_size
            ),
            seconds,
            period_s,
        )

    def add(self, shape: StepShape, seconds: float, period_s: float = 0.0) -> None:
        """One step of `shape` that ran `seconds` in a period of `period_s`."""
        self.observed_s += max(seconds, period_s) if self.periods else seconds
        self.solo_s += self.costs.seconds(shape)
        self.steps += 1


class StepLearner:
    """The engine's step observer on a worker: each step's shape and seconds into its meter
    (when it has one), then into the worker's online step model (so that a meter priced by
    the model's line prices each step before the line learns it).

    Called on the engine's thread only; `model.line()` is an immutable snapshot other threads
    may read.
    """

    __slots__ = ("model", "meter", "block_size")

    def __init__(self, model: OnlineStepModel, block_size: int, meter: StepMeter | None = None):
        self.model = model
        self.meter = meter
        self.block_size = block_size

    def __call__(self, scheduled: Sequence[ScheduledSeq], seconds: float, period_s: float) -> None:
        """One step that ran `seconds` in a period of `period_s` (LLMEngine.step_observer);
        its items are already advanced (as StepMeter's). The model learns the period: what
        the running streams wait between tokens, the gaps between steps included (the
        worker's gRPC streaming shares its process), which is what a TPOT target bounds."""
        shape = step_shape(
            ((i.num_new, i.sample, i.seq.num_computed) for i in scheduled), self.block_size
        )
        if self.meter is not None:
            self.meter.add(shape, seconds, period_s)
        self.model.observe(shape, max(seconds, period_s))


def learn_steps(llm: LLMEngine, profile: StepMeter | None = None) -> StepLearner:
    """Install on `llm` the observer that learns its step-time line and meters its steps, and
    return it. Where `profile` (a meter of a solo profile) was measured in the dtype `llm`
    computes in (or does not say), the profile is the line's prior and the meter's reference;
    else the prior is a conservative line from the model's size (its weights as loaded, and
    the KV bytes per token the engine sized its pool with: an optimistic prior would admit more
    than the engine serves before the fit has data) and the meter prices with the online line
    itself (module docstring). Install it after warm-up: the warm-up's first-shape costs
    (kernel selection, first allocations) are not what serving steps cost."""
    block = llm.config.block_size
    dtype = str(llm.dtype).removeprefix("torch.")
    if (
        profile is not None
        and isinstance(profile.costs, StepCosts)
        and profile.dtype in ("", dtype)
    ):
        learner = StepLearner(OnlineStepModel(prior_from_costs(profile.costs)), block, profile)
    else:
        params, weight_bytes = llm.weights_size()
        model = OnlineStepModel(conservative_prior(params, weight_bytes, llm.kv_bytes_per_token))
        learner = StepLearner(model, block, StepMeter(LivePrice(model), block, periods=True))
    llm.step_observer = learner
    return learner
