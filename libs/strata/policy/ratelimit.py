"""Per-tenant request rate limits: one token bucket per tenant on an injected clock."""

from __future__ import annotations

from dataclasses import dataclass

from strata.policy.clock import Clock


@dataclass(slots=True)
class _Bucket:
    tokens: float
    updated: float


class TenantRateLimiter:
    """`rate` requests per second sustained, bursts up to `burst`, per tenant."""

    def __init__(self, clock: Clock, rate: float, burst: float):
        if rate <= 0 or burst < 1:
            raise ValueError(f"rate must be positive and burst at least 1, got {rate}, {burst}")
        self.clock = clock
        self.rate = rate
        self.burst = burst
        self._buckets: dict[str, _Bucket] = {}

    def try_acquire(self, tenant: str) -> float:
        """Take one request's token: 0.0 if allowed, else seconds until one will be available."""
        now = self.clock.now()
        b = self._buckets.get(tenant)
        if b is None:
            b = self._buckets[tenant] = _Bucket(self.burst, now)
        b.tokens = min(self.burst, b.tokens + (now - b.updated) * self.rate)
        b.updated = now
        if b.tokens >= 1:
            b.tokens -= 1
            return 0.0
        return (1 - b.tokens) / self.rate
