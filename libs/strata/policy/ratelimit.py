"""Per-tenant request rate limits: one token bucket per tenant on an injected clock."""

from __future__ import annotations

import math
from dataclasses import dataclass

from strata.policy.clock import Clock


@dataclass(slots=True)
class _Bucket:
    tokens: float
    updated: float


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
        self._buckets: dict[str, _Bucket] = {}

    def try_acquire(self, tenant: str, rate: float | None = None) -> float:
        """Take one request's token: 0.0 if allowed, else seconds until one will be available.

        `rate`: the tenant's own requests per second (None = the default). A changed rate
        applies from this call on; tokens already saved are capped at the new burst.
        """
        if rate is None:
            rate, burst = self.rate, self.burst
        else:
            if not (math.isfinite(rate) and rate > 0):
                raise ValueError(f"a tenant's rate must be a positive number, got {rate}")
            burst = max(1.0, rate * self.burst / self.rate)
        now = self.clock.now()
        b = self._buckets.get(tenant)
        if b is None:
            b = self._buckets[tenant] = _Bucket(burst, now)
        b.tokens = min(burst, b.tokens + (now - b.updated) * rate)
        b.updated = now
        if b.tokens >= 1:
            b.tokens -= 1
            return 0.0
        return (1 - b.tokens) / rate
