"""The online step-time model (strata.core.step_model): before any step it prices with its prior;
on synthetic steps of a known line with +-10% noise its fit converges and its conservative line
stays above the fit and nears the truth; a model known only by its size gets a prior that
over-prices what the shipped profiles measured; bad inputs are ignored or refused."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from strata.core.profile import StepShape, load_profile, step_shape
from strata.core.step_model import (
    OnlineStepModel,
    StepLine,
    conservative_prior,
    prior_from_costs,
)
from strata.engine.config import ModelConfig
from strata.engine.dummy_configs import DUMMY_CONFIGS
from strata.engine.step_meter import PROFILES_DIR

BLOCK = 16
# SmolLM2-135M on a CPU, as a profile measured it (float32, 2026-11-29; the simulator benchmarks'
# fixed reference): the "truth" of the synthetic steps.
SMOLLM = load_profile(
    Path(__file__).parents[2] / "benchmarks/profiles/smollm2-135m-instruct-cpu-2026-11-29.json"
)
TRUTH = prior_from_costs(SMOLLM.costs)
# SmolLM2-135M's shape (the GGUF's metadata), for its parameter count without loading it.
SMOLLM_CONFIG = ModelConfig(
    name="smollm2-135m-instruct",
    vocab_size=49152,
    hidden_size=576,
    intermediate_size=1536,
    num_layers=30,
    num_heads=9,
    num_kv_heads=3,
    max_position_embeddings=8192,
    rms_norm_eps=1e-5,
    rope_theta=100000.0,
    tie_word_embeddings=True,
)


def varied_shape(rng: random.Random) -> StepShape:
    """A step as serving runs them: decodes (1 to 32 sequences, contexts to 4k), a prefill chunk
    (16 to 512 tokens after up to 2k computed), or both."""
    kind = rng.choice(("decode", "prefill", "mixed"))
    items: list[tuple[int, bool, int]] = []
    if kind != "prefill":
        items += [(1, True, rng.randint(16, 4096)) for _ in range(rng.randint(1, 32))]
    if kind != "decode":
        chunk = rng.randint(16, 512)
        items.append((chunk, rng.random() < 0.5, rng.randint(0, 2048) + chunk))
    return step_shape(items, BLOCK)


def scaled(line: StepLine, factor: float) -> StepLine:
    return StepLine.from_coefficients([v * factor for v in line.coefficients()])


def run(model: OnlineStepModel, truth: StepLine, steps: int, rng: random.Random) -> None:
    for _ in range(steps):
        shape = varied_shape(rng)
        model.observe(shape, truth.seconds(shape) * rng.uniform(0.9, 1.1))


TEST_SHAPES = [varied_shape(random.Random(1000 + i)) for i in range(200)]


def test_before_any_step_the_line_is_the_prior():
    prior = scaled(TRUTH, 2.0)
    model = OnlineStepModel(prior)
    assert model.line() == prior
    assert model.line().samples == model.samples == 0
    for shape in TEST_SHAPES[:20]:
        assert model.line().seconds(shape) == prior.seconds(shape)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("prior_factor", [0.5, 2.0])
def test_the_fit_converges_to_the_truth_from_another_machines_profile(seed, prior_factor):
    """A profile measured on a machine twice as fast or twice as slow is corrected in 300 steps."""
    model = OnlineStepModel(scaled(TRUTH, prior_factor))
    run(model, TRUTH, 300, random.Random(seed))
    fit = model.fit()
    ratios = [fit.seconds(s) / TRUTH.seconds(s) for s in TEST_SHAPES]
    assert sum(ratios) / len(ratios) == pytest.approx(1.0, abs=0.05)
    assert fit.samples == model.samples == 300


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_line_is_above_the_fit_and_nears_the_truth(seed):
    """From a faster machine's profile (the prior under-prices): the line the fit is raised to
    by its uncertainty prices every shape at least as the fit does, and within 15% of the truth
    after 1,500 steps."""
    model = OnlineStepModel(scaled(TRUTH, 0.5))
    rng = random.Random(seed)
    for steps in (300, 1200):
        run(model, TRUTH, steps, rng)
        line, fit = model.line(), model.fit()
        assert line.samples == model.samples
        for shape in TEST_SHAPES:
            assert line.seconds(shape) >= fit.seconds(shape) * (1 - 1e-12)
    assert model.samples == 1500
    for shape in TEST_SHAPES:
        assert line.seconds(shape) / TRUTH.seconds(shape) == pytest.approx(1.0, abs=0.15)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_from_the_conservative_prior_the_line_comes_down_but_stays_above_the_fit(seed):
    """The prior of a model without a profile over-prices; the line admission prices with comes
    down towards the truth and never below the fit: within 15% of the truth on every shape
    after 1,500 steps."""
    prior = conservative_prior(
        SMOLLM_CONFIG.param_count(), 4 * SMOLLM_CONFIG.param_count(), SMOLLM.kv_bytes_per_token
    )
    model = OnlineStepModel(prior)
    run(model, TRUTH, 1500, random.Random(seed))
    line, fit = model.line(), model.fit()
    over = [line.seconds(s) / TRUTH.seconds(s) for s in TEST_SHAPES]
    assert all(line.seconds(s) >= fit.seconds(s) * (1 - 1e-12) for s in TEST_SHAPES)
    assert all(line.seconds(s) < prior.seconds(s) for s in TEST_SHAPES)
    assert 1.0 <= sum(over) / len(over) <= 1.15
    assert max(over) <= 1.15


def realistic_shapes(max_seqs: int, max_context: int) -> list[StepShape]:
    """Decode batches, prefill chunks and mixed steps over a model's whole context."""
    shapes = []
    for batch in (1, 4, max_seqs):
        for context in (16, max_context // 4, max_context):
            shapes.append(step_shape([(1, True, context)] * batch, BLOCK))
    for chunk in (16, 256, 2048):
        for computed in (0, max_context // 2):
            prefill = (chunk, True, min(max_context, computed + chunk))
            shapes.append(step_shape([prefill], BLOCK))
            shapes.append(step_shape([prefill] + [(1, True, 1024)] * 8, BLOCK))
    return shapes


@pytest.mark.parametrize(
    "profile, config",
    [
        ("smollm2-135m-instruct-cpu.json", SMOLLM_CONFIG),
        ("dummy-1b-cpu.json", DUMMY_CONFIGS["dummy-1b"]),
        ("dummy-1b-h200.json", DUMMY_CONFIGS["dummy-1b"]),
        ("dummy-tiny-cpu.json", DUMMY_CONFIGS["dummy-tiny"]),  # SLOW_KEY_S rules here
    ],
)
def test_a_conservative_prior_over_prices_what_a_profile_measured(profile, config):
    measured = load_profile(f"{PROFILES_DIR}/{profile}")
    dtype_bytes = {"float32": 4, "float16": 2, "bfloat16": 2}[measured.dtype]
    assert config.kv_bytes_per_token(dtype_bytes) == measured.kv_bytes_per_token
    prior = conservative_prior(
        config.param_count(), dtype_bytes * config.param_count(), measured.kv_bytes_per_token
    )
    real = prior_from_costs(measured.costs)
    for shape in realistic_shapes(32, config.max_position_embeddings):
        assert prior.seconds(shape) > real.seconds(shape), shape


def test_bad_inputs():
    model = OnlineStepModel(TRUTH)
    shape = TEST_SHAPES[0]
    for seconds in (math.nan, math.inf, -math.inf, -1.0):
        model.observe(shape, seconds)
    assert model.samples == 0 and model.line() == TRUTH
    model.observe(shape, TRUTH.seconds(shape))
    assert model.samples == 1
    assert all(math.isfinite(v) and v >= 0 for v in model.line().coefficients())
    with pytest.raises(ValueError, match="6 coefficients, got 5"):
        StepLine.from_coefficients([0.1] * 5)
    with pytest.raises(ValueError, match="6 coefficients, got 7"):
        StepLine.from_coefficients([0.1] * 7)
    with pytest.raises(ValueError, match="token_s must be a finite number >= 0"):
        StepLine.from_coefficients([0.1, -1e-6, 0.0, 0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="group_s must be a finite number >= 0"):
        StepLine(0.1, 0.0, 0.0, 0.0, 0.0, math.nan)
    with pytest.raises(ValueError, match="positive params"):
        conservative_prior(0, 1, 1)
    with pytest.raises(ValueError, match="forgetting"):
        OnlineStepModel(TRUTH, forgetting=0.5)


def test_coefficients_round_trip_in_order():
    line = StepLine(1.0, 2.0, 3.0, 4.0, 5.0, 6.0, samples=7)
    assert line.coefficients() == (1.0, 2.0, 3.0, 4.0, 5.0, 6.0)
    assert StepLine.from_coefficients(line.coefficients(), samples=7) == line
    shape = StepShape(tokens=10, sampled=2, prefill_keys=100.0, decode_keys=1000.0, groups=2)
    assert line.seconds(shape) == 1.0 + 20.0 + 6.0 + 400.0 + 5000.0 + 12.0


def prefill_heavy_seconds(shape: StepShape) -> float:
    """An engine whose steps cost more for carrying a prefill chunk than its tokens say, as
    SmolLM2's quantized CPU engine runs them (2026-12-06, the overload benchmark's steps): 14 ms
    a step, 3 ms a decode row, and 40 ms more in a step that carries a chunk (its products leave
    the few-row kernel)."""
    chunk = shape.tokens - shape.sampled
    return 0.014 + 0.003 * shape.sampled + 0.0004 * max(0, chunk) + 0.04 * shape.groups


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_prefill_group_keeps_decode_steps_priced_at_their_time(seed):
    """The group feature counts the prefill group alone, so a step's fixed cost and a chunk's
    are told apart: the fit has no negative coefficient for the floor to drop (which priced
    decode steps at twice their time when both groups were counted), and decode and mixed
    steps are priced within 10%."""
    rng = random.Random(seed)
    model = OnlineStepModel(TRUTH)
    shapes = []
    for _ in range(2000):
        items = [(1, True, rng.randint(16, 1024)) for _ in range(rng.randint(1, 16))]
        if rng.random() < 0.2:
            chunk = rng.randint(16, 256)
            items = items[: rng.randint(0, 8)] + [(chunk, True, chunk + rng.randint(0, 1024))]
        shape = step_shape(items, BLOCK)
        shapes.append(shape)
        model.observe(shape, prefill_heavy_seconds(shape) * rng.uniform(0.95, 1.05))
    fit = model.fit()
    assert fit.step_s == pytest.approx(0.014, rel=0.15)
    assert fit.group_s == pytest.approx(0.04, rel=0.15)
    for shape in shapes[-200:]:
        assert fit.seconds(shape) / prefill_heavy_seconds(shape) == pytest.approx(1.0, abs=0.1)
