"""Tenant policy columns and SLA classes in SQL on every store backend: defaults, validation
sentences, updates, deletion with its keys, the class table's seeding, and the upgrade of a store
written before the policy columns existed."""

from __future__ import annotations

import pytest
from sqlalchemy import inspect, select, text

from strata.core.sla import DEFAULT_CLASSES, SlaClass, SlaTable, parse_classes
from strata.core.tenant_policy import TenantPolicy
from strata.store.db import create_all, drop_all, make_engine, session_factory
from strata.store.models import ApiKey
from strata.store.sla_classes import (
    InvalidSlaClassError,
    list_sla_classes,
    load_sla_table,
    put_sla_class,
    seed_sla_classes,
)
from strata.store.tenants import (
    InvalidTenantError,
    TenantInfo,
    TenantSettings,
    UnknownTenantError,
    authenticate,
    create_tenant,
    delete_tenant,
    issue_api_key,
    list_tenants,
    revoke_api_key,
    tenant_info,
    tenant_policy,
    update_tenant,
)

pytest_plugins = ["tests.pg"]

DEFAULTS = SlaTable()


async def test_a_new_tenant_gets_the_default_policy(store):
    async with store() as s:
        await create_tenant(s, "acme")
        info = await tenant_info(s, "acme")
        assert await tenant_policy(s, "acme", DEFAULTS) == TenantPolicy(
            "acme", "standard", 1, 2000.0, 200.0, 1.0, 0.0, 1.0
        )
        assert await tenant_policy(s, "ghost", DEFAULTS) is None
    assert info.settings == TenantSettings("standard", 1.0, 0.0, 1.0, None)
    assert info.active_keys == 0


async def test_settings_are_stored_and_the_policy_takes_the_classes_targets(store):
    async with store() as s:
        await create_tenant(
            s,
            "chat",
            "interactive",
            weight=2.0,
            guaranteed_share=0.1,
            burst_share=0.5,
            rate_limit_rps=20.0,
        )
        await create_tenant(s, "jobs", "batch")
    async with store() as s:
        assert (await tenant_info(s, "chat")).settings == TenantSettings(
            "interactive", 2.0, 0.1, 0.5, 20.0
        )
        assert await tenant_policy(s, "chat", DEFAULTS) == TenantPolicy(
            "chat", "interactive", 2, 500.0, 100.0, 2.0, 0.1, 0.5
        )
        jobs = await tenant_policy(s, "jobs", DEFAULTS)
    assert (jobs.priority, jobs.best_effort) == (0, True)


@pytest.mark.parametrize(
    ("kwargs", "sentence"),
    [
        (dict(weight=0.0), "weight must be a positive number, got 0.0"),
        (dict(guaranteed_share=-0.1), "guaranteed_share must be between 0 and 1, got -0.1"),
        (
            dict(guaranteed_share=0.5, burst_share=0.4),
            "burst_share must be between guaranteed_share (0.5) and 1, got 0.4",
        ),
        (
            dict(burst_share=1.5),
            "burst_share must be between guaranteed_share (0.0) and 1, got 1.5",
        ),
        (
            dict(rate_limit_rps=0.0),
            "rate_limit_rps must be a positive number of requests per "
            "second, or unset for the gateway's default, got 0.0",
        ),
        (
            dict(sla_class="gold"),
            "unknown SLA class 'gold'; known classes: interactive, standard, "
            "batch (add one with `strata tenants set-class`)",
        ),
    ],
)
async def test_invalid_settings_are_refused_with_a_sentence_and_nothing_is_stored(
    store, kwargs, sentence
):
    async with store() as s:
        with pytest.raises(InvalidTenantError) as err:
            await create_tenant(s, "acme", **kwargs)
        assert str(err.value) == sentence
        assert await list_tenants(s) == []


async def test_tenant_names_must_be_printable_without_spaces(store):
    async with store() as s:
        for name, sentence in [
            ("", "a tenant name must not be empty"),
            (
                "a b",
                "a tenant name must be at most 128 printable characters without spaces, got 'a b'",
            ),
            ("x" * 129, None),
        ]:
            with pytest.raises(InvalidTenantError) as err:
                await create_tenant(s, name)
            if sentence is not None:
                assert str(err.value) == sentence


async def test_an_update_changes_only_the_named_settings(store):
    async with store() as s:
        await create_tenant(
            s,
            "acme",
            "interactive",
            weight=2.0,
            guaranteed_share=0.2,
            burst_share=0.5,
            rate_limit_rps=5.0,
        )
        await update_tenant(s, "acme", {"burst_share": 0.9, "rate_limit_rps": None})
    async with store() as s:
        assert (await tenant_info(s, "acme")).settings == TenantSettings(
            "interactive", 2.0, 0.2, 0.9, None
        )
        with pytest.raises(
            InvalidTenantError,
            match=r"^burst_share must be between "
            r"guaranteed_share \(0.2\) and 1, got 0.1$",
        ):
            await update_tenant(s, "acme", {"burst_share": 0.1})
        with pytest.raises(InvalidTenantError) as err:
            await update_tenant(s, "acme", {"name": "other", "colour": "red"})
        assert str(err.value) == (
            "cannot change colour, name; the fields a tenant update may "
            "change are sla_class, weight, guaranteed_share, burst_share, "
            "rate_limit_rps"
        )
        with pytest.raises(UnknownTenantError) as err:
            await update_tenant(s, "ghost", {"weight": 2.0})
        assert str(err.value) == (
            "tenant 'ghost' does not exist; `strata tenants list` shows the tenants"
        )
    async with store() as s:  # the refused updates left the row as it was
        assert (await tenant_info(s, "acme")).settings == TenantSettings(
            "interactive", 2.0, 0.2, 0.9, None
        )


async def test_list_counts_active_keys_and_delete_removes_the_keys(store):
    async with store() as s:
        await create_tenant(s, "beta")
        await create_tenant(s, "acme")
        keys = [await issue_api_key(s, "acme") for _ in range(3)]
        await issue_api_key(s, "beta")
        await revoke_api_key(s, keys[0])
        assert [(i.name, i.active_keys) for i in await list_tenants(s)] == [
            ("acme", 2),
            ("beta", 1),
        ]
        assert await delete_tenant(s, "acme") == 2
        assert [await authenticate(s, k) for k in keys] == [None, None, None]
        assert [i.name for i in await list_tenants(s)] == ["beta"]
        assert len((await s.execute(select(ApiKey))).scalars().all()) == 1
        with pytest.raises(UnknownTenantError):
            await delete_tenant(s, "acme")
        # the name is free again, with no key of the old tenant
        await create_tenant(s, "acme")
        assert (await tenant_info(s, "acme")).active_keys == 0


async def test_sla_classes_are_seeded_once_then_changed_through_put(store):
    spec = parse_classes("interactive=300/50@2,standard=1500/150,batch=best-effort")
    async with store() as s:
        assert (await load_sla_table(s)).spec() == DEFAULTS.spec()  # empty: the defaults
        assert (await load_sla_table(s, spec)).spec() == spec.spec()  # or the given seed
        assert await seed_sla_classes(s, spec) is True
        assert await seed_sla_classes(s, DEFAULTS) is False  # already seeded
        assert await list_sla_classes(s) == [
            SlaClass("interactive", 300.0, 50.0, 2),
            SlaClass("standard", 1500.0, 150.0, 1),
            SlaClass("batch", None, None, 0),
        ]
        assert await put_sla_class(s, SlaClass("gold", 200.0, None, 3)) == SlaClass(
            "gold", 200.0, None, 3
        )
        await put_sla_class(s, SlaClass("standard", 1000.0, 100.0, 1))
    async with store() as s:
        table = await load_sla_table(s, DEFAULTS)
        assert table.spec() == (
            "gold=200/-@3,interactive=300/50@2,standard=1000/100,batch=best-effort"
        )
        assert table.default == "standard"
        await create_tenant(s, "vip", "gold")
        assert await tenant_policy(s, "vip", table) == TenantPolicy(
            "vip", "gold", 3, 200.0, None, 1.0, 0.0, 1.0
        )


@pytest.mark.parametrize(
    ("sla", "sentence"),
    [
        (
            SlaClass("gold", 100.0, 10.0, 10),
            "SLA class 'gold': priority must be an integer from 0 to 9, got 10",
        ),
        (
            SlaClass("gold", -5.0, None, 1),
            "SLA class 'gold': ttft_ms must be a positive number of "
            "milliseconds or unset (not judged), got -5.0",
        ),
        (
            SlaClass("gold", None, float("inf"), 1),
            "SLA class 'gold': tpot_ms must be a positive "
            "number of milliseconds or unset (not judged), "
            "got inf",
        ),
        (
            SlaClass(" ", None, None, 0),
            "an SLA class name must be 1 to 64 characters without surrounding spaces, got ' '",
        ),
    ],
)
async def test_an_invalid_class_is_refused_with_a_sentence(store, sla, sentence):
    async with store() as s:
        with pytest.raises(InvalidSlaClassError) as err:
            await put_sla_class(s, sla)
        assert str(err.value) == sentence
        assert await list_sla_classes(s) == []


async def test_put_on_an_empty_table_seeds_it_first(store):
    async with store() as s:
        await put_sla_class(s, SlaClass("gold", 200.0, 20.0, 3))
        assert [c.name for c in await list_sla_classes(s)] == [
            "gold",
            "interactive",
            "standard",
            "batch",
        ]
        assert await list_sla_classes(s) == [SlaClass("gold", 200.0, 20.0, 3), *DEFAULT_CLASSES]


def _old_schema(dialect: str) -> list[str]:
    """The tenants and api_keys tables as the first schema created them."""
    serial = "SERIAL PRIMARY KEY" if dialect == "postgresql" else "INTEGER PRIMARY KEY"
    return [
        f"CREATE TABLE tenants (id {serial}, name VARCHAR(128) NOT NULL UNIQUE, "
        f"sla_class VARCHAR(64) NOT NULL, created_unix_ms BIGINT NOT NULL)",
        f"CREATE TABLE api_keys (id {serial}, key_sha256 VARCHAR(64) NOT NULL UNIQUE, "
        f"tenant_id INTEGER NOT NULL REFERENCES tenants (id) ON DELETE CASCADE, "
        f"created_unix_ms BIGINT NOT NULL, revoked BOOLEAN NOT NULL)",
        "INSERT INTO tenants (name, sla_class, created_unix_ms) "
        "VALUES ('old', 'interactive', 1700000000000)",
    ]


async def test_a_store_from_before_the_policy_columns_keeps_its_tenants(store_url):
    engine = make_engine(store_url)
    try:
        await drop_all(engine)
        async with engine.begin() as conn:
            for statement in _old_schema(conn.dialect.name):
                await conn.execute(text(statement))
        await create_all(engine)
        await create_all(engine)  # a second start finds nothing left to add
        async with engine.connect() as conn:
            columns = await conn.run_sync(
                lambda c: [col["name"] for col in inspect(c).get_columns("tenants")]
            )
        sessions = session_factory(engine)
        async with sessions() as s:
            old = await tenant_info(s, "old")
            policy = await tenant_policy(s, "old", DEFAULTS)
            await update_tenant(s, "old", {"weight": 3.0})
            await create_tenant(s, "new", rate_limit_rps=7.0)
            assert [i.name for i in await list_tenants(s)] == ["new", "old"]
            assert (await tenant_info(s, "old")).settings.weight == 3.0
    finally:
        await drop_all(engine)
        await engine.dispose()
    assert columns == [
        "id",
        "name",
        "sla_class",
        "created_unix_ms",
        "weight",
        "guaranteed_share",
        "burst_share",
        "rate_limit_rps",
    ]
    assert old == TenantInfo(
        "old", TenantSettings("interactive", 1.0, 0.0, 1.0, None), 1_700_000_000_000, 0
    )
    assert policy == TenantPolicy("old", "interactive", 2, 500.0, 100.0, 1.0, 0.0, 1.0)
