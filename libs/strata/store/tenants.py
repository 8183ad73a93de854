"""Tenants and their API keys.

A key is shown once, when issued, and stored only as its sha256 hex digest: a leaked database
does not leak usable keys. The keys are long random tokens, so an unsalted fast hash is enough
(there is nothing to brute-force, unlike a password).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import time

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from strata.defaults import DEMO_TENANT
from strata.eval.sla import DEFAULT_CLASS
from strata.store.models import ApiKey, Tenant

KEY_PREFIX = "sk-strata-"
DEFAULT_SLA_CLASS = DEFAULT_CLASS


class TenantExistsError(ValueError):
    """create_tenant was asked for a name that is taken."""


class UnknownTenantError(LookupError):
    """A key was asked for a tenant that does not exist."""


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


async def create_tenant(session: AsyncSession, name: str,
                        sla_class: str = DEFAULT_SLA_CLASS) -> Tenant:
    if not name:
        raise ValueError("a tenant name must not be empty")
    tenant = Tenant(name=name, sla_class=sla_class, created_unix_ms=_now_ms())
    session.add(tenant)
    try:
        await session.commit()
    except IntegrityError:
        await session.rollback()
        raise TenantExistsError(f"tenant {name!r} already exists") from None
    return tenant


async def get_tenant(session: AsyncSession, name: str) -> Tenant | None:
    return (await session.execute(select(Tenant).where(Tenant.name == name))).scalar_one_or_none()


async def issue_api_key(session: AsyncSession, tenant: str) -> str:
    """A new key for tenant; the plaintext is returned here and nowhere else."""
    row = await get_tenant(session, tenant)
    if row is None:
        raise UnknownTenantError(f"tenant {tenant!r} does not exist; create it first")
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    session.add(ApiKey(key_sha256=hash_key(key), tenant_id=row.id, created_unix_ms=_now_ms(),
                       revoked=False))
    await session.commit()
    return key


async def authenticate(session: AsyncSession, key: str) -> str | None:
    """The tenant name that key belongs to, or None for an unknown or revoked key."""
    if not key.startswith(KEY_PREFIX):
        return None
    stmt = (select(Tenant.name).join(ApiKey, ApiKey.tenant_id == Tenant.id)
            .where(ApiKey.key_sha256 == hash_key(key), ApiKey.revoked.is_(False)))
    return (await session.execute(stmt)).scalar_one_or_none()


async def revoke_api_key(session: AsyncSession, key: str) -> bool:
    """Revoke key; False if no such key exists."""
    row = (await session.execute(
        select(ApiKey).where(ApiKey.key_sha256 == hash_key(key)))).scalar_one_or_none()
    if row is None:
        return False
    row.revoked = True
    await session.commit()
    return True


async def ensure_demo_tenant(session: AsyncSession, key_file_path: str) -> str:
    """Make sure the demo tenant exists and has a key; return that key's plaintext.

    The plaintext lives in key_file_path (mode 0600) so the CLI can find it and later starts
    hand out the same key. A missing file, or a key the store no longer accepts (revoked, or a
    fresh database), gets a new key written in its place.
    """
    if await get_tenant(session, DEMO_TENANT) is None:
        try:
            await create_tenant(session, DEMO_TENANT)
        except TenantExistsError:
            pass  # another process created it between our check and insert: same outcome
    existing = _read_key_file(key_file_path)
    if existing is not None and await authenticate(session, existing) == DEMO_TENANT:
        return existing
    key = await issue_api_key(session, DEMO_TENANT)
    _write_key_file(key_file_path, key)
    return key


def _read_key_file(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip() or None
    except FileNotFoundError:
        return None


def _write_key_file(path: str, key: str) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    # Created 0600 from the start (not chmod-ed after), then renamed: no reader ever sees a
    # world-readable or half-written key.
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.fchmod(fd, 0o600)  # exactly 0600 whatever the umask
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(key + "\n")
    os.replace(tmp, path)
