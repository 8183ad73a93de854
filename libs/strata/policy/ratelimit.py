"""Per-tenant request rate limits: token buckets on an injected clock.

`TokenBuckets` holds one bucket per key, its rate and burst given with each take: the global
scheduler keeps one for the rates the gateways send with Route, so a tenant's limit holds
across every gateway routing through it. `TenantRateLimiter` adds a gateway's defaults.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from strata.policy.clock import Clock


@dataclass(slots=True)
class _Bucket:
    tokens: float
    updated: float


class TokenBuckets:
    """One token bucket per key: `rate` tokens a second, holding at most `burst`."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._buckets: dict[str, _Bucket] = {}

    def take(self, key: str, rate: float, burst: float) -> float:
        """Take one token: 0.0 if allowed, else seconds until one will be available. A changed
        rate applies from this call on; tokens already saved are capped at the new burst.
        Raises ValueError unless rate > 0 and burst >= 1 (finite)."""
        if not (math.isfinite(rate) and rate > 0):
            raise ValueError(f"a rate must be a positive number, got {rate}")
        if not (math.isfinite(burst) and burst >= 1):
            raise ValueError(f"a burst must be a number >= 1, got {burst}")
        now = self.clock.now()
        b = self._buckets.get(key)
        if b is None:
            b = self._buckets[key] = _Bucket(burst, now)
        b.tokens = min(burst, b.tokens + (now - b.updated) * rate)
        b.updated = now
        if b.tokens >= 1:
            b.tokens -= 1
            return 0.0
        return (1 - b.tokens) / rate


class TenantRateLimiter:
    """`rate` requests per second sustained, bursts up to `burst`, per tenant.

    A tenant with a rate of its own (try_acquire's `rate`) gets a burst of the same duration:
    burst / rate seconds of its own rate, at least one request. With the defaults 50/s and 100,
    a tenant limited to 5/s may send 10 at once.
    """

    def __init__(self, clock: Clock, rate: float, burst: float):
        if rate <= 0 or burst < 1:
            raise ValueError(f"rate must be positive and burst at least 1, got {rate}, {burst}")
        self.clock = clock
        self.rate = rate
        self.burst = burst
        self._buckets = TokenBuckets(clock)

    def limits(self, rate: float | None = None) -> tuple[float, float]:
        """The (rate, burst) of a tenant whose own rate is `rate` (None = the default)."""
        if rate is None:
            return self.rate, self.burst
        if not (math.isfinite(rate) and rate > 0):
            raise ValueError(f"a tenant's rate must be a positive number, got {rate}")
        return rate, max(1.0, rate * self.burst / self.rate)

    def try_acquire(self, tenant: str, rate: float | None = None) -> float:
        """Take one request's token: 0.0 if allowed, else seconds until one will be available.

        `rate`: the tenant's own requests per second (None = the default). A changed rate
        applies from this call on; tokens already saved are capped at the new burst.
        """
        return self._buckets.take(tenant, *self.limits(rate))
