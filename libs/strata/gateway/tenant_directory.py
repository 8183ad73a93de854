"""The gateway's view of each tenant's policy and rate limit, read from SQL and cached briefly.

A request needs its tenant's policy (SLA class, priority, targets, shares) for Route and Submit,
and its rate limit for the gateway's own token bucket. Reading them from the database on every
request would put SQL on the hot path, so answers are cached for `ttl_s` on an injected clock:
a change made through another gateway's Admin API holds here within the TTL, and one made
through this gateway's Admin API at once (the servicer calls `invalidate`).

The SLA classes are cached the same way: a class's new targets reach every tenant of it within
the TTL.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from strata.core.sla import SlaTable
from strata.core.tenant_policy import TenantPolicy
from strata.store.sla_classes import load_sla_table
from strata.store.tenants import get_tenant, policy_of, settings_of

DEFAULT_TTL_S = 2.0


@dataclass(slots=True, frozen=True)
class TenantEntry:
    policy: TenantPolicy
    rate_limit_rps: float | None  # None: the gateway's default rate


class TenantDirectory:
    """tenant name -> TenantEntry (None for a tenant that does not exist), cached for ttl_s.

    `seed` is the table used while no SLA class is stored yet (the gateway seeds the table at
    start, so only a store nobody seeded sees it)."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        clock: Callable[[], float],
        ttl_s: float = DEFAULT_TTL_S,
        seed: SlaTable | None = None,
    ):
        if not ttl_s >= 0:
            raise ValueError(f"the tenant policy TTL must be 0 or more seconds, got {ttl_s}")
        self.sessions = sessions
        self.clock = clock
        self.ttl_s = ttl_s
        self.seed = seed if seed is not None else SlaTable()
        self._tenants: dict[str, tuple[TenantEntry | None, float]] = {}
        self._classes: tuple[SlaTable, float] | None = None

    def _fresh(self, loaded_at: float, now: float) -> bool:
        return now - loaded_at < self.ttl_s

    async def lookup(self, tenant: str) -> TenantEntry | None:
        now = self.clock()
        hit = self._tenants.get(tenant)
        if hit is not None and self._fresh(hit[1], now):
            return hit[0]
        async with self.sessions() as session:
            classes = await self._sla_table(session, now)
            row = await get_tenant(session, tenant)
            entry = (
                None
                if row is None
                else TenantEntry(policy_of(tenant, settings_of(row), classes), row.rate_limit_rps)
            )
        self._tenants[tenant] = (entry, now)
        return entry

    async def _sla_table(self, session: AsyncSession, now: float) -> SlaTable:
        if self._classes is not None and self._fresh(self._classes[1], now):
            return self._classes[0]
        table = await load_sla_table(session, self.seed)
        self._classes = (table, now)
        return table

    async def as_class(self, entry: TenantEntry, sla_class: str) -> TenantPolicy:
        """The tenant's policy with `sla_class` instead of its own: a caller may ask for a
        lower class (a lower priority) than its key's, never a higher or an equal other one.
        ValueError says why not (an unknown class, or one above the key's)."""
        own = entry.policy
        if sla_class == own.sla_class:
            return own
        async with self.sessions() as session:
            table = await self._sla_table(session, self.clock())
        wanted = table.classes.get(sla_class)
        if wanted is None:
            raise ValueError(
                f"unknown SLA class {sla_class!r}; the classes are "
                f"{', '.join(sorted(table.classes))}"
            )
        if wanted.priority >= own.priority:
            raise PermissionError(
                f"this key's class is {own.sla_class!r} (priority {own.priority}); a request "
                f"may ask only for a lower one, not {sla_class!r} (priority {wanted.priority})"
            )
        return TenantPolicy.for_class(
            own.tenant, wanted, own.weight, own.guaranteed_share, own.burst_share
        )

    def invalidate(self, tenant: str) -> None:
        """Forget one tenant: its next lookup reads the store (it changed here)."""
        self._tenants.pop(tenant, None)

    def invalidate_all(self) -> None:
        """Forget every tenant and the SLA classes (a class changed here)."""
        self._tenants.clear()
        self._classes = None
