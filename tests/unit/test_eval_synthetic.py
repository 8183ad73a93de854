"""Synthetic workloads: exact values for a fixed seed, and the moments each process promises."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from strata.eval import synthetic as s
from strata.eval.traces import TraceRequest


def gaps(arrivals: list[float]) -> list[float]:
    return [b - a for a, b in zip([0.0, *arrivals], arrivals)]


def test_poisson_exact_for_a_seed_and_bounded_by_count_or_duration():
    assert s.poisson_arrivals(2.0, random.Random(7), count=4) == [
        0.19565742211740214,
        0.2774166506201412,
        0.8036644596556046,
        0.8412613562755774,
    ]
    # the same draws, cut at the duration instead of the count
    assert s.poisson_arrivals(2.0, random.Random(7), duration_s=0.5) == [
        0.19565742211740214,
        0.2774166506201412,
    ]
    with pytest.raises(ValueError, match="give a request count or a duration"):
        s.poisson_arrivals(2.0, random.Random(7))
    with pytest.raises(ValueError, match="rate must be a positive number, got 0"):
        s.poisson_arrivals(0, random.Random(7), count=1)


def test_poisson_gaps_have_mean_one_over_rate_and_cv_one():
    g = gaps(s.poisson_arrivals(4.0, random.Random(1), count=20000))
    assert statistics.fmean(g) == pytest.approx(0.25, rel=0.03)
    assert statistics.pstdev(g) / statistics.fmean(g) == pytest.approx(1.0, rel=0.05)


def test_gamma_exact_for_a_seed():
    assert s.gamma_arrivals(2.0, 3.0, random.Random(7), count=4) == [
        0.0002527485402373349,
        0.1356584697144566,
        0.15917775517302063,
        0.1591777552209477,
    ]
    assert s.gamma_arrivals(4.0, 0.0, random.Random(7), count=3) == [0.25, 0.5, 0.75]


@pytest.mark.parametrize("cv", [0.5, 2.0, 4.0])
def test_gamma_gaps_have_the_asked_cv_within_10_percent(cv):
    g = gaps(s.gamma_arrivals(10.0, cv, random.Random(11), count=40000))
    assert statistics.fmean(g) == pytest.approx(0.1, rel=0.05)
    assert statistics.pstdev(g) / statistics.fmean(g) == pytest.approx(cv, rel=0.10)


def test_diurnal_rate_follows_the_sine():
    period, mean, amplitude = 10.0, 40.0, 0.8
    arrivals = s.diurnal_arrivals(mean, period, amplitude, random.Random(5), duration_s=50 * period)
    assert s.diurnal_arrivals(mean, period, amplitude, random.Random(5), count=3) == arrivals[:3]
    # sin > 0 in the first half of each period: mean rate there is mean (1 + 2A/pi)
    high = sum(1 for t in arrivals if (t % period) < period / 2)
    low = len(arrivals) - high
    half_periods = 50
    assert high / (half_periods * period / 2) == pytest.approx(
        mean * (1 + 2 * amplitude / math.pi), rel=0.05
    )
    assert low / (half_periods * period / 2) == pytest.approx(
        mean * (1 - 2 * amplitude / math.pi), rel=0.08
    )
    with pytest.raises(ValueError, match="amplitude must be between 0 and 1, got 1.5"):
        s.diurnal_arrivals(mean, period, 1.5, random.Random(5), count=1)


def test_requests_at_draws_prompt_then_output_per_arrival():
    assert s.requests_at(
        [0.5, 1.0],
        s.Uniform(1, 100),
        s.LogNormal(50, 1.0, 1, 200),
        random.Random(7),
        tenant="t",
        sla_class="gold",
    ) == [
        TraceRequest(0.5, 42, 129, tenant="t", sla_class="gold"),
        TraceRequest(1.0, 7, 36, tenant="t", sla_class="gold"),
    ]


def test_length_distributions_stay_in_range():
    rng = random.Random(3)
    assert {s.Fixed(9).sample(rng) for _ in range(10)} == {9}
    assert {s.Uniform(4, 6).sample(rng) for _ in range(200)} == {4, 5, 6}
    clipped = [s.LogNormal(100, 3.0, 10, 1000).sample(rng) for _ in range(2000)]
    assert min(clipped) == 10 and max(clipped) == 1000
    with pytest.raises(ValueError, match="high must be at least low"):
        s.Uniform(5, 4)


def test_tenant_mix_merges_streams_in_time_order():
    loads = [
        s.TenantTraffic("alice", 2.0, "interactive", s.Fixed(100), s.Uniform(10, 20)),
        s.TenantTraffic("bob", 1.0, "batch", s.Uniform(50, 60), s.Fixed(5)),
    ]
    mix = s.tenant_mix(loads, random.Random(3), duration_s=2.0)
    assert [
        (r.tenant, round(r.arrival_s, 6), r.prompt_tokens, r.output_tokens, r.sla_class)
        for r in mix
    ] == [
        ("alice", 0.135881, 100, 14, "interactive"),
        ("alice", 0.528764, 100, 18, "interactive"),
        ("bob", 0.646938, 58, 5, "batch"),
        ("alice", 0.759746, 100, 13, "interactive"),
        ("alice", 1.222816, 100, 13, "interactive"),
        ("bob", 1.666004, 56, 5, "batch"),
        ("alice", 1.714191, 100, 17, "interactive"),
        ("alice", 1.748079, 100, 18, "interactive"),
        ("alice", 1.754706, 100, 18, "interactive"),
        ("bob", 1.829248, 50, 5, "batch"),
    ]
    by_count = s.tenant_mix(loads, random.Random(3), count=3)
    assert by_count == s.tenant_mix(loads, random.Random(3), count=3)
    assert len(by_count) == 3
    assert [r.arrival_s for r in by_count] == sorted(r.arrival_s for r in by_count)


def test_tenant_mix_rates_over_a_long_window():
    loads = [
        s.TenantTraffic("a", 5.0, "gold", s.Fixed(1), s.Fixed(1)),
        s.TenantTraffic("b", 1.0, "bronze", s.Fixed(1), s.Fixed(1), cv=3.0),
    ]
    mix = s.tenant_mix(loads, random.Random(9), duration_s=4000.0)
    counts = {t: sum(1 for r in mix if r.tenant == t) for t in ("a", "b")}
    assert counts["a"] / 4000.0 == pytest.approx(5.0, rel=0.03)
    assert counts["b"] / 4000.0 == pytest.approx(1.0, rel=0.15)
    with pytest.raises(ValueError, match="tenant names in a mix must be unique, got a, a"):
        s.tenant_mix([loads[0], loads[0]], random.Random(9), count=1)
