"""SQLite engine settings that let several processes share one store file."""

import asyncio

from sqlalchemy import inspect, text

from strata.store.db import (
    SQLITE_BUSY_TIMEOUT_MS,
    create_all,
    make_engine,
    session_factory,
)
from strata.store.spans import SpanRecord, get_trace, insert_spans

pytest_plugins = ["tests.pg"]


async def test_sqlite_runs_in_wal_mode_with_a_busy_timeout_and_foreign_keys(tmp_path):
    path = tmp_path / "nested" / "dir" / "strata.db"  # parent directories are created
    engine = make_engine(f"sqlite+aiosqlite:///{path}")
    async with engine.connect() as conn:
        mode = (await conn.execute(text("PRAGMA journal_mode"))).scalar_one()
        timeout = (await conn.execute(text("PRAGMA busy_timeout"))).scalar_one()
        fks = (await conn.execute(text("PRAGMA foreign_keys"))).scalar_one()
    await engine.dispose()
    assert (mode, timeout, fks) == ("wal", SQLITE_BUSY_TIMEOUT_MS, 1)
    assert path.exists()


async def test_two_engines_on_one_file_see_each_others_writes(tmp_path):
    url = f"sqlite+aiosqlite:///{tmp_path / 'strata.db'}"
    writer, reader = make_engine(url), make_engine(url)
    await create_all(writer)
    span = SpanRecord(
        trace_id="1" * 32,
        span_id="2" * 16,
        parent_span_id="",
        name="x",
        service="s",
        start_unix_nano=1,
        end_unix_nano=2,
        attributes={"a": 1},
    )
    async with session_factory(reader)() as r:
        assert await get_trace(r, "1" * 32) == []  # reader holds a connection open
        async with session_factory(writer)() as w:
            await insert_spans(w, [span])
        assert await get_trace(r, "1" * 32) == [span]
    await writer.dispose()
    await reader.dispose()


async def test_services_starting_together_create_the_schema_once(store_url):
    engines = [make_engine(store_url) for _ in range(3)]
    try:
        await asyncio.gather(*(create_all(e) for e in engines))
        await create_all(engines[0])  # and again on a later start
        async with engines[0].connect() as conn:
            tables = await conn.run_sync(lambda c: sorted(inspect(c).get_table_names()))
    finally:
        for e in engines:
            await e.dispose()
    assert tables == [
        "api_keys",
        "node_samples",
        "placements",
        "requests",
        "runs",
        "sla_classes",
        "spans",
        "tenants",
    ]


async def test_the_sqlite_store_and_its_wal_files_are_private(tmp_path):
    import os
    import stat

    path = tmp_path / "strata.db"
    engine = make_engine(f"sqlite+aiosqlite:///{path}")
    await create_all(engine)
    await engine.dispose()
    wal = [p for p in (path, tmp_path / "strata.db-wal", tmp_path / "strata.db-shm") if p.exists()]
    assert path in wal
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in wal} == {p.name: 0o600 for p in wal}
    os.chmod(path, 0o644)  # a store from before: narrowed at the next start
    make_engine(f"sqlite+aiosqlite:///{path}")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
