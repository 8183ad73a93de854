"""Tenants, their scheduling policy and their API keys.

A tenant row holds its SLA class, fair-share weight, guaranteed and burst shares of the pool and
an optional request rate; `tenant_policy` turns it, with the SLA classes in force, into the
TenantPolicy the gateway sends with each request.

A key is shown once, when issued, and stored only as its sha256 hex digest: a leaked database
does not leak usable keys. The keys are long random tokens, so an unsalted fast hash is enough
(there is nothing to brute-force, unlike a password).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import math
import os
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from strata.core.defaults import DEMO_TENANT
from strata.core.sla import DEFAULT_CLASS, SlaTable
from strata.core.tenant_policy import TenantPolicy, policy_problem
from strata.store.models import ApiKey, Tenant
from strata.store.sla_classes import load_sla_table

KEY_PREFIX = "sk-strata-"
DEFAULT_SLA_CLASS = DEFAULT_CLASS
MAX_NAME_CHARS = 128
# What an operator may change on a tenant (its name is its identity).
SETTINGS_FIELDS = ("sla_class", "weight", "guaranteed_share", "burst_share", "rate_limit_rps")


class TenantExistsError(ValueError):
    """create_tenant was asked for a name that is taken."""


class UnknownTenantError(LookupError):
    """A tenant that does not exist was named."""


class InvalidTenantError(ValueError):
    """Settings that cannot be stored; the message names the field and the accepted values."""


@dataclass(slots=True, frozen=True)
class TenantSettings:
    """What an operator sets on a tenant; the defaults are those of a new tenant."""

    sla_class: str = DEFAULT_SLA_CLASS
    weight: float = 1.0
    guaranteed_share: float = 0.0
    burst_share: float = 1.0
    rate_limit_rps: float | None = None  # None: the gateway's default rate

    def problem(self, classes: SlaTable) -> str | None:
        """Why these settings are not valid against the classes in force, or None."""
        if self.sla_class not in classes.classes:
            return (
                f"unknown SLA class {self.sla_class!r}; known classes: "
                f"{', '.join(classes.classes)} (add one with `strata tenants set-class`)"
            )
        problem = policy_problem(self.weight, self.guaranteed_share, self.burst_share)
        if problem is not None:
            return problem
        rate = self.rate_limit_rps
        if rate is not None and not (math.isfinite(rate) and rate > 0):
            return (
                f"rate_limit_rps must be a positive number of requests per second, or unset "
                f"for the gateway's default, got {rate}"
            )
        return None


@dataclass(slots=True, frozen=True)
class TenantInfo:
    name: str
    settings: TenantSettings
    created_unix_ms: int
    active_keys: int


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _name_problem(name: str) -> str | None:
    if not name:
        return "a tenant name must not be empty"
    if len(name) > MAX_NAME_CHARS or not name.isprintable() or any(c.isspace() for c in name):
        return (
            f"a tenant name must be at most {MAX_NAME_CHARS} printable characters without "
            f"spaces, got {name!r}"
        )
    return None


def settings_of(row: Tenant) -> TenantSettings:
    return TenantSettings(
        row.sla_class, row.weight, row.guaranteed_share, row.burst_share, row.rate_limit_rps
    )


def policy_of(name: str, settings: TenantSettings, classes: SlaTable) -> TenantPolicy:
    """The tenant's policy under the classes in force (an unknown class reads as the default)."""
    return TenantPolicy.for_class(
        name,
        classes.lookup(settings.sla_class),
        settings.weight,
        settings.guaranteed_share,
        settings.burst_share,
    )


async def _checked(session: AsyncSession, settings: TenantSettings) -> TenantSettings:
    problem = settings.problem(await load_sla_table(session))
    if problem is not None:
        raise InvalidTenantError(problem)
    return settings


async def create_tenant(
    session: AsyncSession,
    name: str,
    sla_class: str = DEFAULT_SLA_CLASS,
    *,
    weight: float = 1.0,
    guaranteed_share: float = 0.0,
    burst_share: float = 1.0,
    rate_limit_rps: float | None = None,
) -> Tenant:
    """Raises InvalidTenantError (bad name or settings) or TenantExistsError."""
    problem = _name_problem(name)
    if problem is not None:
        raise InvalidTenantError(problem)
    s = await _checked(
        session, TenantSettings(sla_class, weight, guaranteed_share, burst_share, rate_limit_rps)
    )
    tenant = Tenant(
        name=name,
        sla_class=s.sla_class,
        created_unix_ms=_now_ms(),
        weight=s.weight,
        guaranteed_share=s.guaranteed_share,
        burst_share=s.burst_share,
        rate_limit_rps=s.rate_limit_rps,
    )
    session.add(tenant)
    try:
        await session.commit()
    except IntegrityError:
        await session.rollback()
        raise TenantExistsError(f"tenant {name!r} already exists") from None
    return tenant


async def get_tenant(session: AsyncSession, name: str) -> Tenant | None:
    return (await session.execute(select(Tenant).where(Tenant.name == name))).scalar_one_or_none()


async def _existing(session: AsyncSession, name: str) -> Tenant:
    row = await get_tenant(session, name)
    if row is None:
        raise UnknownTenantError(
            f"tenant {name!r} does not exist; `strata tenants list` shows the tenants"
        )
    return row


async def update_tenant(session: AsyncSession, name: str, changes: Mapping[str, Any]) -> Tenant:
    """Change the named settings (keys of SETTINGS_FIELDS, each valued as its TenantSettings
    field) of tenant `name`; the others keep their values. Raises UnknownTenantError or
    InvalidTenantError."""
    unknown = sorted(set(changes) - set(SETTINGS_FIELDS))
    if unknown:
        raise InvalidTenantError(
            f"cannot change {', '.join(unknown)}; the fields a tenant "
            f"update may change are {', '.join(SETTINGS_FIELDS)}"
        )
    row = await _existing(session, name)
    s = await _checked(session, dataclasses.replace(settings_of(row), **changes))
    row.sla_class, row.weight = s.sla_class, s.weight
    row.guaranteed_share, row.burst_share = s.guaranteed_share, s.burst_share
    row.rate_limit_rps = s.rate_limit_rps
    await session.commit()
    return row


async def _active_keys(session: AsyncSession) -> dict[int, int]:
    rows = (
        await session.execute(
            select(ApiKey.tenant_id, func.count())
            .where(ApiKey.revoked.is_(False))
            .group_by(ApiKey.tenant_id)
        )
    ).all()
    return {tenant_id: count for tenant_id, count in rows}


def _info(row: Tenant, keys: Mapping[int, int]) -> TenantInfo:
    return TenantInfo(row.name, settings_of(row), row.created_unix_ms, keys.get(row.id, 0))


async def tenant_info(session: AsyncSession, name: str) -> TenantInfo:
    """Raises UnknownTenantError."""
    row = await _existing(session, name)
    return _info(row, await _active_keys(session))


async def list_tenants(session: AsyncSession) -> list[TenantInfo]:
    """Every tenant, by name."""
    rows = (await session.execute(select(Tenant).order_by(Tenant.name))).scalars().all()
    keys = await _active_keys(session)
    return [_info(r, keys) for r in rows]


async def delete_tenant(session: AsyncSession, name: str) -> int:
    """Delete tenant `name` and its keys; the number of keys that were still active.
    Raises UnknownTenantError. Its finished requests stay in the report tables."""
    row = await _existing(session, name)
    active = (await _active_keys(session)).get(row.id, 0)
    # Explicitly, not through ON DELETE CASCADE: SQLite enforces that only per connection.
    await session.execute(delete(ApiKey).where(ApiKey.tenant_id == row.id))
    await session.delete(row)
    await session.commit()
    return active


async def tenant_policy(session: AsyncSession, name: str, classes: SlaTable) -> TenantPolicy | None:
    """The policy of tenant `name` under `classes`, or None if there is no such tenant."""
    row = await get_tenant(session, name)
    return None if row is None else policy_of(name, settings_of(row), classes)


async def issue_api_key(session: AsyncSession, tenant: str) -> str:
    """A new key for tenant; the plaintext is returned here and nowhere else."""
    row = await get_tenant(session, tenant)
    if row is None:
        raise UnknownTenantError(f"tenant {tenant!r} does not exist; create it first")
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    session.add(
        ApiKey(key_sha256=hash_key(key), tenant_id=row.id, created_unix_ms=_now_ms(), revoked=False)
    )
    await session.commit()
    return key


async def authenticate(session: AsyncSession, key: str) -> str | None:
    """The tenant name that key belongs to, or None for an unknown or revoked key."""
    if not key.startswith(KEY_PREFIX):
        return None
    stmt = (
        select(Tenant.name)
        .join(ApiKey, ApiKey.tenant_id == Tenant.id)
        .where(ApiKey.key_sha256 == hash_key(key), ApiKey.revoked.is_(False))
    )
    return (await session.execute(stmt)).scalar_one_or_none()


async def revoke_api_key(session: AsyncSession, key: str) -> bool:
    """Revoke key; False if no such key exists."""
    row = (
        await session.execute(select(ApiKey).where(ApiKey.key_sha256 == hash_key(key)))
    ).scalar_one_or_none()
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
    existing = read_key_file(key_file_path)
    if existing is not None and await authenticate(session, existing) == DEMO_TENANT:
        return existing
    key = await issue_api_key(session, DEMO_TENANT)
    write_key_file(key_file_path, key)
    return key


def read_key_file(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip() or None
    except FileNotFoundError:
        return None


def write_key_file(path: str, key: str) -> None:
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
