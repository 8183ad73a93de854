"""Tenants and API keys on every store backend: keys stored hashed, authentication, demo key."""

import hashlib
import os
import stat
from pathlib import Path

import pytest
from sqlalchemy import select

from strata.core.defaults import DEMO_TENANT
from strata.store.models import ApiKey, Tenant
from strata.store.tenants import (
    TenantExistsError,
    UnknownTenantError,
    authenticate,
    create_tenant,
    ensure_demo_tenant,
    issue_api_key,
    revoke_api_key,
)

pytest_plugins = ["tests.pg"]


async def test_key_is_stored_only_as_its_sha256(store):
    async with store() as s:
        await create_tenant(s, "acme", sla_class="interactive")
        key = await issue_api_key(s, "acme")
    assert key.startswith("sk-strata-") and len(key) > 40
    async with store() as s:
        rows = (await s.execute(select(ApiKey.key_sha256, ApiKey.revoked))).all()
        tenant = (await s.execute(select(Tenant))).scalar_one()
    assert [tuple(r) for r in rows] == [(hashlib.sha256(key.encode()).hexdigest(), False)]
    assert (tenant.name, tenant.sla_class) == ("acme", "interactive")


async def test_authenticate_maps_keys_to_their_tenant(store):
    async with store() as s:
        await create_tenant(s, "acme")
        await create_tenant(s, "beta")
        acme_key = await issue_api_key(s, "acme")
        beta_key = await issue_api_key(s, "beta")
        assert await authenticate(s, acme_key) == "acme"
        assert await authenticate(s, beta_key) == "beta"
        assert await authenticate(s, acme_key + "x") is None
        assert await authenticate(s, "not-a-key") is None
        assert await revoke_api_key(s, acme_key) is True
        assert await authenticate(s, acme_key) is None
        assert await revoke_api_key(s, "sk-strata-unknown") is False


async def test_duplicate_tenant_and_key_for_unknown_tenant_are_refused(store):
    async with store() as s:
        await create_tenant(s, "acme")
        with pytest.raises(TenantExistsError, match="'acme' already exists"):
            await create_tenant(s, "acme")
        with pytest.raises(UnknownTenantError, match="'ghost' does not exist"):
            await issue_api_key(s, "ghost")


async def test_demo_key_is_written_0600_and_reused_then_reissued_when_file_is_gone(store, tmp_path):
    key_file = str(tmp_path / "data" / "demo_api_key")
    async with store() as s:
        first = await ensure_demo_tenant(s, key_file)
    assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600
    assert Path(key_file).read_text().strip() == first
    async with store() as s:
        assert await ensure_demo_tenant(s, key_file) == first
        assert await authenticate(s, first) == DEMO_TENANT
    os.remove(key_file)
    async with store() as s:
        second = await ensure_demo_tenant(s, key_file)
        assert second != first
        assert Path(key_file).read_text().strip() == second
        assert await authenticate(s, second) == DEMO_TENANT
        tenants = (await s.execute(select(Tenant.name))).scalars().all()
    assert tenants == [DEMO_TENANT]


async def test_demo_key_file_with_a_revoked_key_gets_a_new_key(store, tmp_path):
    key_file = str(tmp_path / "demo_api_key")
    async with store() as s:
        first = await ensure_demo_tenant(s, key_file)
        await revoke_api_key(s, first)
        second = await ensure_demo_tenant(s, key_file)
    assert second != first
    assert Path(key_file).read_text().strip() == second
