"""API-key authentication against the SQL store, with a short positive/negative cache.

Keys are stored only as SHA-256 hashes. The cache keeps a hot path off the database; its TTL
bounds how long a key revoked through another gateway keeps working here (one revoked, or a
tenant deleted, through this gateway's Admin API is forgotten at once).
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from strata.store.tenants import authenticate, hash_key


class Authenticator:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        clock: Callable[[], float],
        ttl_s: float = 10.0,
    ):
        self.sessions = sessions
        self.clock = clock
        self.ttl_s = ttl_s
        self._cache: dict[str, tuple[str | None, float]] = {}

    async def tenant_for(self, key: str) -> str | None:
        digest = hash_key(key)
        hit = self._cache.get(digest)
        now = self.clock()
        if hit is not None and now - hit[1] < self.ttl_s:
            return hit[0]
        async with self.sessions() as session:
            tenant = await authenticate(session, key)
        self._cache[digest] = (tenant, now)
        return tenant

    def forget(self, key: str) -> None:
        """Drop key's cached answer: the next use asks the store (it was revoked here)."""
        self._cache.pop(hash_key(key), None)

    def forget_tenant(self, tenant: str) -> None:
        """Drop the cached answers of every key of tenant (it was deleted here)."""
        for digest in [d for d, (name, _) in self._cache.items() if name == tenant]:
            del self._cache[digest]


def bearer_key(metadata: tuple[tuple[str, str | bytes], ...] | None) -> str | None:
    """The key from `authorization: Bearer <key>` metadata, or None."""
    for k, v in metadata or ():
        if k.lower() == "authorization":
            value = v.decode() if isinstance(v, bytes) else v
            scheme, _, key = value.partition(" ")
            if scheme.lower() == "bearer" and key.strip():
                return key.strip()
    return None
