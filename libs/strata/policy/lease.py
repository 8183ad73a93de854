"""Named leases with a time to live: at most one holder of a name at a time, on an injected
clock. The global scheduler keeps the table; the placement planner holds "placement" while it
plans, so two planner processes never both apply plans.

    acquire(name, holder, ttl)   granted when the name is free, expired, or already the holder's
                                 (a renewal: the time to live starts again); else the current
                                 holder and how long it still holds
    release(name, holder)        the holder gives the name up at once

A table that starts (a restarted scheduler) grants no name for its first `grace_s` seconds: a
holder of its predecessor may still act on a lease it believes in, for up to the longest time
to live granted (`max_ttl_s`, which `grace_s` should be at least).

The holder's side: a lease acquired at local time t for ttl is trusted until t + ttl (the
request's send time: the table's grant is never earlier), and the holder acts only before that.
"""

from __future__ import annotations

from dataclasses import dataclass

from strata.policy.clock import Clock

MAX_TTL_S = 120.0  # the longest grant a table gives by default


@dataclass(slots=True, frozen=True)
class Grant:
    granted: bool
    holder: str  # who holds the name now ("" when nobody does)
    remaining_s: float  # how long that holder holds it without renewing


@dataclass(slots=True)
class _Held:
    holder: str
    until: float


class LeaseTable:
    def __init__(self, clock: Clock, grace_s: float = 0.0, max_ttl_s: float = MAX_TTL_S) -> None:
        if grace_s < 0 or max_ttl_s <= 0:
            raise ValueError(f"grace_s must be >= 0 and max_ttl_s > 0, got {grace_s}, {max_ttl_s}")
        self.clock = clock
        self.max_ttl_s = max_ttl_s
        self._open_at = clock.now() + grace_s
        self._held: dict[str, _Held] = {}

    def acquire(self, name: str, holder: str, ttl_s: float) -> Grant:
        """Grant or renew `name` to `holder` for min(ttl_s, max_ttl_s) (module docstring).
        Raises ValueError for an empty name or holder, or a ttl_s that is not positive."""
        if not name or not holder:
            raise ValueError("a lease needs a name and a holder")
        if not ttl_s > 0:
            raise ValueError(f"a lease's time to live must be positive, got {ttl_s}")
        now = self.clock.now()
        held = self._held.get(name)
        if held is not None and held.until > now and held.holder != holder:
            return Grant(False, held.holder, held.until - now)
        if now < self._open_at and (held is None or held.holder != holder):
            return Grant(False, "", self._open_at - now)
        ttl = min(ttl_s, self.max_ttl_s)
        self._held[name] = _Held(holder, now + ttl)
        return Grant(True, holder, ttl)

    def release(self, name: str, holder: str) -> None:
        """`holder` gives `name` up (nothing happens when another holds it)."""
        held = self._held.get(name)
        if held is not None and held.holder == holder:
            del self._held[name]
