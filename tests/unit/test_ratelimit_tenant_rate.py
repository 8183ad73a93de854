"""TenantRateLimiter with a tenant's own rate: the burst lasts as long as the default one, at
least one request, and a changed rate applies from the next call."""

import pytest

from strata.policy.clock import ManualClock
from strata.policy.ratelimit import TenantRateLimiter


def test_a_tenants_own_rate_gets_a_burst_of_the_same_duration():
    clock = ManualClock()
    limiter = TenantRateLimiter(clock, rate=50.0, burst=100.0)  # a 2-second burst
    assert [limiter.try_acquire("slow", 5.0) for _ in range(11)] == [0.0] * 10 + [0.2]
    assert [limiter.try_acquire("tiny", 0.1) for _ in range(2)] == [0.0, 10.0]  # at least 1
    assert all(limiter.try_acquire("default") == 0.0 for _ in range(100))
    assert limiter.try_acquire("default") == pytest.approx(0.02)


def test_a_changed_rate_applies_at_once_and_caps_saved_tokens():
    clock = ManualClock()
    limiter = TenantRateLimiter(clock, rate=10.0, burst=10.0)  # a 1-second burst
    assert limiter.try_acquire("a") == 0.0  # default bucket: 9 left
    assert [limiter.try_acquire("a", 2.0) for _ in range(3)] == [0.0, 0.0, 0.5]  # capped at 2
    clock.advance(0.5)
    assert limiter.try_acquire("a", 2.0) == 0.0
    assert limiter.try_acquire("a", 4.0) == 0.25


def test_a_tenant_rate_must_be_positive():
    limiter = TenantRateLimiter(ManualClock(), rate=10.0, burst=10.0)
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="a tenant's rate must be a positive number"):
            limiter.try_acquire("a", bad)
