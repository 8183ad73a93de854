"""The worker's step meter: a known profile prices known step shapes exactly; the shared shape
function agrees between the simulator (before a step) and the meter (after it); the engine calls
the meter once per step; the step learner feeds the online step model and the meter alike;
shipped profiles are found by model and device."""

from __future__ import annotations

import json
import os
import threading

import pytest
import torch

from strata.core.profile import StepCosts, StepShape, step_shape
from strata.core.step_model import (
    SLOW_KEY_S,
    SLOW_KV_BYTES_PER_S,
    OnlineStepModel,
    prior_from_costs,
)
from strata.engine.dummy import load_dummy
from strata.engine.engine import EngineConfig, EngineRequest, LLMEngine
from strata.engine.scheduler import ScheduledSeq
from strata.engine.sequence import SamplingParams, Sequence
from strata.engine.step_meter import (
    PROFILES_DIR,
    LivePrice,
    StepLearner,
    StepMeter,
    find_profile,
    learn_steps,
    meter_from_profile,
)
from strata.kvtier.hashing import HashKeys
from strata.sim.replica import EngineLimits, SimReplica

# Powers of two, so every sum below is exact in floating point.
COSTS = StepCosts(
    step_s=2.0**-10,
    token_s=2.0**-14,
    sample_s=2.0**-12,
    prefill_attend_s=2.0**-20,
    decode_attend_s=2.0**-18,
    group_s=2.0**-11,
)
BLOCK = 16


def item(computed: int, new: int, sample: bool = True) -> ScheduledSeq:
    """A scheduled item whose sequence has `computed` tokens computed (the meter sees items
    already advanced by their `new` tokens, the simulator before)."""
    seq = Sequence(
        request_id=f"s{computed}",
        token_ids=list(range(computed + 1)),
        num_prompt=computed,
        params=SamplingParams(),
        hash_keys=HashKeys.for_request("m", "t", False),
        num_computed=computed,
    )
    return ScheduledSeq(seq, new, sample)


def test_a_mixed_step_is_priced_exactly():
    meter = StepMeter(COSTS, BLOCK)
    # A 24-token chunk after 16 computed tokens (context 40 after it), decodes at 10 and 33.
    meter([item(40, 24), item(10, 1), item(33, 1)], 0.0125)
    # prefill keys: 1 chunk x 24 tokens x 3 blocks of 16 = 1152; decode keys 10 + 33 = 43.
    expected = (
        COSTS.step_s
        + 26 * COSTS.token_s
        + 3 * COSTS.sample_s
        + 1152 * COSTS.prefill_attend_s
        + 43 * COSTS.decode_attend_s
        + COSTS.group_s  # the prefill group; the decodes add none
    )
    assert meter.solo_s == expected
    assert meter.observed_s == 0.0125
    assert meter.steps == 1


def test_decode_steps_add_the_residual_of_their_batch_and_the_sums_accumulate():
    costs = StepCosts(
        step_s=2.0**-10,
        token_s=2.0**-14,
        sample_s=2.0**-12,
        prefill_attend_s=0.0,
        decode_attend_s=2.0**-18,
        decode_batches=(1, 3),
        decode_residual_s=(0.0, 2.0**-9),
    )
    meter = StepMeter(costs, BLOCK)
    meter([item(20, 1), item(12, 1)], 0.25)
    meter([item(5, 1)], 0.125)
    two = (
        2.0**-10 + 2 * (2.0**-14 + 2.0**-12) + 32 * 2.0**-18 + 0.5 * 2.0**-9
    )  # batch 2 is halfway between the residuals' batches
    one = 2.0**-10 + 2.0**-14 + 2.0**-12 + 5 * 2.0**-18
    assert meter.solo_s == two + one
    assert meter.observed_s == 0.375
    assert meter.steps == 2


def test_a_chunk_that_does_not_sample_prices_no_sampling():
    meter = StepMeter(COSTS, BLOCK)
    meter([item(64, 64, sample=False)], 0.5)
    # 64 tokens from nothing: 1 x 64 x 64 keys; no token sampled, one prefill group.
    assert meter.solo_s == (
        COSTS.step_s + 64 * COSTS.token_s + 4096 * COSTS.prefill_attend_s + COSTS.group_s
    )


def test_step_shape_takes_contexts_after_the_step():
    shape = step_shape([(24, True, 40), (1, True, 10), (1, False, 33)], BLOCK)
    assert shape == StepShape(
        tokens=26,
        sampled=2,
        prefill_keys=1152.0,
        decode_keys=43.0,
        groups=1,
        prefill_longest=24,
        prefill_context=16,
    )
    assert step_shape([], BLOCK) == StepShape(0, 0, 0.0, 0.0, 0)


def test_the_simulator_before_a_step_and_the_meter_after_it_price_it_alike():
    replica = SimReplica("r0", "m", "n0", EngineLimits(num_blocks=8, block_size=BLOCK), COSTS)
    before = [item(16, 24), item(9, 1), item(32, 1)]  # num_computed before the step
    meter = StepMeter(COSTS, BLOCK)
    meter([item(40, 24), item(10, 1), item(33, 1)], 0.0)
    assert meter.solo_s == COSTS.seconds(replica.shape(before))


def test_the_engine_calls_its_step_observer_once_per_step_with_the_step_time_and_period():
    torch.set_num_threads(1)
    engine = LLMEngine(
        load_dummy("dummy-tiny"),
        EngineConfig(block_size=BLOCK, num_blocks=32, max_batched_tokens=64),
    )
    seen: list[tuple[list[tuple[int, int]], float, float]] = []
    engine.step_observer = lambda items, s, p: seen.append(
        ([(i.num_new, i.seq.num_computed) for i in items], s, p)
    )
    engine.add_request(
        EngineRequest("a", list(range(1, 41)), SamplingParams(max_tokens=3, ignore_eos=True))
    )
    gap, gap_s = threading.Event(), 0.05
    while engine.has_work():
        engine.step()
        if len(seen) == 2:
            gap.wait(gap_s)  # a driver slower than the step: the period includes the gap
    # Observed after the step: contexts include the step's own tokens.
    assert [items for items, _, _ in seen] == [[(40, 40)], [(1, 41)], [(1, 42)]]
    assert len(seen) == engine.stats.steps
    # Each step's time spans schedule() too, so it is at least what the engine counts busy.
    assert sum(s for _, s, _ in seen) >= engine.stats.busy_seconds > 0
    # The first step after idle has no earlier end: its period is its time.
    assert seen[0][2] == seen[0][1]
    assert seen[2][2] >= seen[2][1] + gap_s  # however long the step itself took
    # After idle() the next period starts with the step again.
    engine.idle()
    engine.add_request(
        EngineRequest("b", list(range(1, 9)), SamplingParams(max_tokens=1, ignore_eos=True))
    )
    engine.step()
    assert seen[-1][2] == seen[-1][1]


def test_the_learner_feeds_the_model_each_steps_shape_and_the_meter_as_it_was():
    alone, fed = StepMeter(COSTS, BLOCK), StepMeter(COSTS, BLOCK)
    model, twin = OnlineStepModel(prior_from_costs(COSTS)), OnlineStepModel(prior_from_costs(COSTS))
    learner = StepLearner(model, BLOCK, fed)
    steps = [  # (items, seconds, period): the model learns the period, the meter the seconds
        ([item(40, 24), item(10, 1), item(33, 1)], 0.0125, 0.0125),
        ([item(11, 1), item(34, 1)], 0.004, 0.009),
        ([item(64, 64, sample=False)], 0.5, 0.51),
    ]
    for items, seconds, period in steps:
        alone(items, seconds)
        learner(items, seconds, period)
        twin.observe(
            step_shape(((i.num_new, i.sample, i.seq.num_computed) for i in items), BLOCK), period
        )
    assert (fed.observed_s, fed.solo_s, fed.steps) == (alone.observed_s, alone.solo_s, alone.steps)
    assert model.samples == 3 and model.line() == twin.line()
    # Without a meter the learner only learns.
    bare = StepLearner(OnlineStepModel(prior_from_costs(COSTS)), BLOCK)
    bare(*steps[0])
    assert bare.model.samples == 1 and bare.meter is None


def test_learn_steps_installs_the_learner_with_the_profile_or_a_conservative_prior():
    torch.set_num_threads(1)
    engine = LLMEngine(load_dummy("dummy-tiny"), EngineConfig(block_size=BLOCK, num_blocks=32))
    meter = StepMeter(COSTS, BLOCK)
    learner = learn_steps(engine, meter)
    assert engine.step_observer is learner and learner.meter is meter
    assert learner.model.line() == prior_from_costs(COSTS)
    learner = learn_steps(engine)
    # Without a profile the meter prices with the online line itself, against step periods.
    assert engine.step_observer is learner and learner.meter is not None
    assert isinstance(learner.meter.costs, LivePrice) and learner.meter.costs.model is learner.model
    assert learner.meter.periods
    prior = learner.model.line()
    # dummy-tiny in float32: 139,584 parameters of 4 bytes, 512 KV bytes a token
    assert engine.weights_size() == (139_584, 4 * 139_584) and engine.kv_bytes_per_token == 512
    assert prior.token_s == 2 * 139_584 / 2e10
    assert prior.decode_attend_s == max(
        512 / SLOW_KV_BYTES_PER_S, SLOW_KEY_S
    )  # a tiny model: the floor
    engine.add_request(
        EngineRequest("a", list(range(1, 41)), SamplingParams(max_tokens=3, ignore_eos=True))
    )
    while engine.has_work():
        engine.step()
    assert learner.model.samples == engine.stats.steps == learner.meter.steps == 3
    assert learner.meter.observed_s > 0 and learner.meter.solo_s > 0


def test_a_line_priced_meter_prices_each_step_before_the_line_learns_it():
    model, twin = OnlineStepModel(prior_from_costs(COSTS)), OnlineStepModel(prior_from_costs(COSTS))
    meter = StepMeter(LivePrice(model), BLOCK, periods=True)
    learner = StepLearner(model, BLOCK, meter)
    steps = [  # (items, seconds, period): the line is measured against the period it learns
        ([item(40, 24), item(10, 1), item(33, 1)], 0.0125, 0.0125),
        ([item(11, 1), item(34, 1)], 0.004, 0.009),
        ([item(64, 64, sample=False)], 0.5, 0.51),
        ([item(12, 1), item(35, 1)], 0.006, 0.005),
    ]
    priced = observed = 0.0
    for items, seconds, period in steps:
        shape = step_shape(((i.num_new, i.sample, i.seq.num_computed) for i in items), BLOCK)
        priced += twin.line().seconds(shape)  # the line as it stood before this step
        observed += max(seconds, period)
        learner(items, seconds, period)
        twin.observe(shape, max(seconds, period))
    assert meter.steps == 4 and model.line() == twin.line()
    assert meter.solo_s == pytest.approx(priced, rel=1e-12)
    assert meter.observed_s == pytest.approx(observed, rel=1e-12)
    # The line moved as it learned: pricing with the final line would give another sum.
    assert model.line() != prior_from_costs(COSTS)


def test_a_profile_of_another_dtype_is_neither_prior_nor_reference():
    torch.set_num_threads(1)
    engine = LLMEngine(load_dummy("dummy-tiny"), EngineConfig(block_size=BLOCK, num_blocks=32))
    assert engine.dtype == torch.float32
    conservative = learn_steps(engine).model.line()
    same = learn_steps(engine, StepMeter(COSTS, BLOCK, "float32"))
    assert same.model.line() == prior_from_costs(COSTS)
    assert same.meter is not None and same.meter.costs is COSTS and not same.meter.periods
    other = learn_steps(engine, StepMeter(COSTS, BLOCK, "bfloat16"))
    # A bfloat16 profile is off from a float32 engine by a factor that moves with the shapes
    # run: its costs are not the online fit's prior, and the meter prices with the line.
    assert other.model.line() == conservative != prior_from_costs(COSTS)
    assert other.meter is not None and isinstance(other.meter.costs, LivePrice)


def test_shipped_profiles_are_found_by_model_and_device_type():
    assert find_profile("dummy-tiny", "cpu") == os.path.join(PROFILES_DIR, "dummy-tiny-cpu.json")
    assert find_profile("dummy-tiny", "cuda:0") == ""
    assert find_profile("no-such-model", "cpu") == ""
    assert find_profile("/models/dummy-tiny", "cpu") == ""


def test_a_profile_of_another_model_or_no_profile_is_refused(tmp_path):
    path = find_profile("dummy-tiny", "cpu")
    meter = meter_from_profile(path, "dummy-tiny", BLOCK)
    with open(path, encoding="utf-8") as f:
        assert meter.costs.step_s == json.load(f)["costs"]["step_s"]
    with pytest.raises(
        ValueError, match="measured for model 'dummy-tiny', but this worker serves 'dummy-1b'"
    ):
        meter_from_profile(path, "dummy-1b", BLOCK)
    with pytest.raises(ValueError, match="cannot read the solo profile"):
        meter_from_profile(str(tmp_path / "missing.json"), "dummy-tiny", BLOCK)
