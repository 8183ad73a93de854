"""Multi-model workloads: phases, bursts, reproducibility, validation."""

from __future__ import annotations

import random

import pytest

from strata.eval.model_mix import (
    ModelLoad,
    burst_windows,
    model_arrivals,
    model_mix,
    phase_shifted,
)
from strata.eval.synthetic import Fixed


def _load(**kw) -> ModelLoad:
    base = dict(model="m", mean_rate=20.0, prompt=Fixed(8), output=Fixed(4), period_s=100.0)
    return ModelLoad(**(base | kw))


def test_antiphase_models_peak_in_opposite_halves():
    a, b = phase_shifted(["a", "b"], 20.0, Fixed(8), Fixed(4), period_s=100.0, amplitude=0.9)
    assert (a.phase_s, b.phase_s) == (0.0, 50.0)
    assert a.diurnal_rate(25.0) == pytest.approx(38.0)  # a's peak is b's trough
    assert b.diurnal_rate(25.0) == pytest.approx(2.0)
    reqs = model_mix([a, b], 1000.0, random.Random(1))
    first_half = [r.model for r in reqs if (r.arrival_s % 100.0) < 50.0]
    # half-period means: 20 (1 +- 0.9 * 2/pi) = 31.5 vs 8.5 requests/s
    assert 3.4 < first_half.count("a") / first_half.count("b") < 4.0
    assert all(r.prompt_tokens == 8 and r.output_tokens == 4 for r in reqs)


def test_mean_rate_holds_over_whole_periods():
    n = len(model_arrivals(_load(amplitude=0.8), 2000.0, random.Random(7)))
    assert 0.95 * 40_000 < n < 1.05 * 40_000


def test_bursts_multiply_the_rate_inside_their_windows():
    load = _load(amplitude=0.0, burst_factor=5.0, burst_every_s=100.0, burst_len_s=10.0)
    windows = burst_windows(load, 300.0, random.Random(3))
    assert len(windows) == 3 and all(w[1] - w[0] == pytest.approx(10.0) for w in windows)
    arrivals = model_arrivals(load, 300.0, random.Random(3))
    inside = sum(1 for t in arrivals if any(b <= t < e for b, e in windows))
    # 30 s of bursts at 100/s against 270 s at 20/s: 3000 vs 5400 expected
    assert 2700 < inside < 3300 and 4900 < len(arrivals) - inside < 5900


def test_same_seed_same_mix_and_validation():
    loads = phase_shifted(
        [f"m{i}" for i in range(8)], 2.0, Fixed(8), Fixed(4), period_s=60.0, groups=4
    )
    assert [ld.phase_s for ld in loads] == [0.0, 15.0, 30.0, 45.0] * 2
    assert model_mix(loads, 120.0, random.Random(5)) == model_mix(loads, 120.0, random.Random(5))
    with pytest.raises(ValueError, match="model names in a mix must be unique"):
        model_mix([_load(), _load()], 10.0, random.Random(0))
    with pytest.raises(ValueError, match="m: amplitude must be between 0 and 1, got 1.5"):
        _load(amplitude=1.5)
    with pytest.raises(ValueError, match="m: burst_factor must be at least 1, got 0.5"):
        _load(burst_factor=0.5)
