"""The gateway's tenant directory over an SQLite store on a manual clock: answers cached for the
TTL (no store read meanwhile), invalidation, unknown tenants, SLA classes cached the same way."""

from __future__ import annotations

import pytest

from strata.core.sla import SlaClass, parse_classes
from strata.core.tenant_policy import TenantPolicy
from strata.gateway.tenant_directory import TenantDirectory, TenantEntry
from strata.policy.clock import ManualClock
from strata.store.db import create_all, make_engine, session_factory
from strata.store.sla_classes import put_sla_class, seed_sla_classes
from strata.store.tenants import create_tenant, delete_tenant, update_tenant

TTL_S = 2.0


class CountingSessions:
    """A session factory that counts the sessions opened: one per store read."""

    def __init__(self, sessions) -> None:
        self.sessions = sessions
        self.opened = 0

    def __call__(self):
        self.opened += 1
        return self.sessions()


@pytest.fixture
async def store(tmp_path):
    engine = make_engine(f"sqlite+aiosqlite:///{tmp_path / 'strata.db'}")
    await create_all(engine)
    sessions = session_factory(engine)
    async with sessions() as s:
        await create_tenant(
            s, "chat", "interactive", weight=2.0, guaranteed_share=0.1, burst_share=0.5
        )
    yield sessions
    await engine.dispose()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def chat(**overrides) -> TenantPolicy:
    fields = dict(
        tenant="chat",
        sla_class="interactive",
        priority=2,
        ttft_ms=500.0,
        tpot_ms=100.0,
        weight=2.0,
        guaranteed_share=0.1,
        burst_share=0.5,
    )
    fields.update(overrides)
    return TenantPolicy(**fields)


async def test_an_answer_is_cached_for_the_ttl_then_read_again(store, clock):
    counted = CountingSessions(store)
    directory = TenantDirectory(counted, clock.now, ttl_s=TTL_S)
    assert await directory.lookup("chat") == TenantEntry(chat(), None)
    async with store() as s:
        await update_tenant(s, "chat", {"weight": 3.0, "rate_limit_rps": 5.0})
    clock.advance(TTL_S - 0.001)
    assert await directory.lookup("chat") == TenantEntry(chat(), None)
    assert counted.opened == 1
    clock.advance(0.001)
    assert await directory.lookup("chat") == TenantEntry(chat(weight=3.0), 5.0)
    assert counted.opened == 2


async def test_invalidate_makes_the_next_lookup_read_the_store(store, clock):
    directory = TenantDirectory(store, clock.now, ttl_s=TTL_S)
    assert (await directory.lookup("chat")).policy.burst_share == 0.5
    async with store() as s:
        await update_tenant(s, "chat", {"burst_share": 0.8})
    assert (await directory.lookup("chat")).policy.burst_share == 0.5
    directory.invalidate("chat")
    assert (await directory.lookup("chat")).policy.burst_share == 0.8


async def test_an_unknown_tenant_is_none_and_that_answer_is_cached_too(store, clock):
    counted = CountingSessions(store)
    directory = TenantDirectory(counted, clock.now, ttl_s=TTL_S)
    assert await directory.lookup("jobs") is None
    assert await directory.lookup("jobs") is None
    assert counted.opened == 1
    assert (await directory.lookup("chat")).policy == chat()
    async with store() as s:
        await create_tenant(s, "jobs", "batch")
        await delete_tenant(s, "chat")
    directory.invalidate("jobs")
    entry = await directory.lookup("jobs")
    assert (entry.policy.sla_class, entry.policy.priority, entry.policy.best_effort) == (
        "batch",
        0,
        True,
    )
    assert (await directory.lookup("chat")).policy == chat()  # still within the TTL
    clock.advance(TTL_S)
    assert await directory.lookup("chat") is None


async def test_sla_classes_are_cached_and_invalidate_all_rereads_them(store, clock):
    directory = TenantDirectory(store, clock.now, ttl_s=TTL_S)
    assert (await directory.lookup("chat")).policy == chat()
    async with store() as s:
        await put_sla_class(s, SlaClass("interactive", 300.0, 50.0, 3))
    directory.invalidate("chat")  # the tenant is read again, the classes are not
    assert (await directory.lookup("chat")).policy == chat()
    directory.invalidate_all()
    assert (await directory.lookup("chat")).policy == chat(priority=3, ttft_ms=300.0, tpot_ms=50.0)


async def test_the_seed_classes_hold_while_the_table_is_empty(store, clock):
    seed = parse_classes("interactive=250/25@4,standard=2000/200")
    directory = TenantDirectory(store, clock.now, ttl_s=TTL_S, seed=seed)
    assert (await directory.lookup("chat")).policy == chat(priority=4, ttft_ms=250.0, tpot_ms=25.0)
    async with store() as s:
        await seed_sla_classes(s, parse_classes(""))
    clock.advance(TTL_S)
    assert (await directory.lookup("chat")).policy == chat()


async def test_a_ttl_of_zero_reads_every_time_and_a_negative_one_is_refused(store, clock):
    counted = CountingSessions(store)
    directory = TenantDirectory(counted, clock.now, ttl_s=0.0)
    await directory.lookup("chat")
    await directory.lookup("chat")
    assert counted.opened == 2
    with pytest.raises(
        ValueError,
        match=r"^the tenant policy TTL must be 0 or more seconds, "
        r"got -1.0$",
    ):
        TenantDirectory(store, clock.now, ttl_s=-1.0)
