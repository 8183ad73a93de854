"""The worker's step meter: every engine step, measured and as the solo profile prices it.

A solo profile (`strata profile`, strata.core.profile) says how long a step of a given shape takes
on an otherwise idle machine. The meter prices each step the engine runs with it and keeps two
cumulative sums, the seconds measured and the seconds predicted for the same shapes; the node
manager reads their growth between heartbeats, and the ratio of the growths is the interference
the other work on the machine causes (strata.policy.scheduling.interference learns the ratio a
quiet machine shows, since a profile measured elsewhere is off by a constant factor).

Every worker also learns its own step-time line online (strata.core.step_model), with or without
a profile: the StepLearner is the engine's step observer, feeding each step's shape and period
(the seconds between consecutive step ends while busy) to an OnlineStepModel, and its seconds
to the meter when there is one; GetStats reports the model's line.

Imports no torch: the engine calls it with its scheduled items after each step.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

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


class StepMeter:
    """Cumulative measured and solo-predicted seconds of the engine's steps.

    Invariant: both sums cover the same steps, so their growths over any interval compare
    like with like. Called on the engine's thread only; readers on other threads see floats
    that are each whole (a read between the two additions is off by one step, which the next
    read repairs).
    """

    __slots__ = ("costs", "block_size", "dtype", "observed_s", "solo_s", "steps")

    def __init__(self, costs: StepCosts, block_size: int, dtype: str = "") -> None:
        self.costs = costs
        self.block_size = block_size
        self.dtype = dtype  # the profile's engine dtype ("": not stated)
        self.observed_s = 0.0
        self.solo_s = 0.0
        self.steps = 0

    def __call__(
        self, scheduled: Sequence[ScheduledSeq], seconds: float, period_s: float = 0.0
    ) -> None:
        """One step that ran `seconds`; its items are already advanced, so each sequence's
        num_computed includes the step's tokens. The period is not the meter's: a solo profile
        times steps, not what streams them."""
        self.add(
            step_shape(
                ((i.num_new, i.sample, i.seq.num_computed) for i in scheduled), self.block_size
            ),
            seconds,
        )

    def add(self, shape: StepShape, seconds: float) -> None:
        """One step of `shape` that ran `seconds`."""
        self.observed_s += seconds
        self.solo_s += self.costs.seconds(shape)
        self.steps += 1


class StepLearner:
    """The engine's step observer on a worker: each step's shape and seconds into the worker's
    online step model, and into the step meter when the worker has a solo profile (the meter's
    sums are the same as when it observes alone).

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
        self.model.observe(shape, max(seconds, period_s))
        if self.meter is not None:
            self.meter.add(shape, seconds)


def learn_steps(llm: LLMEngine, meter: StepMeter | None = None) -> StepLearner:
    """Install on `llm` the observer that learns its step-time line (and feeds `meter`), and
    return it. The prior is the meter's solo profile when it was measured in the dtype `llm`
    computes in (or does not say), else a conservative line from the model's size (its weights
    as loaded, and the KV bytes per token the engine sized its pool with): a profile of another
    dtype prices every step wrong by up to 2x, and an optimistic prior would admit more than the
    engine serves before the fit has data. Install it after warm-up: the warm-up's first-shape
    costs (kernel selection, first allocations) are not what serving steps cost."""
    if meter is not None and meter.dtype in ("", str(llm.dtype).removeprefix("torch.")):
        prior = prior_from_costs(meter.costs)
    else:
        params, weight_bytes = llm.weights_size()
        prior = conservative_prior(params, weight_bytes, llm.kv_bytes_per_token)
    learner = StepLearner(OnlineStepModel(prior), llm.config.block_size, meter)
    llm.step_observer = learner
    return learner
