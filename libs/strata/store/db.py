"""Engine and session factory for the store; schema creation.

Several processes (metrics collector, gateway, planner) share one SQLite file, so SQLite
connections run in WAL mode (readers never block the writer) with a busy timeout (a second
writer waits instead of failing at once with "database is locked").
"""

from __future__ import annotations

import os

from sqlalchemy import Connection, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.schema import CreateIndex, CreateTable
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from strata.store.models import Base

SQLITE_BUSY_TIMEOUT_MS = 10_000
_SCHEMA_LOCK = 0x5374_7261_7461  # any constant shared by every Strata process ("Strata")


def make_engine(url: str, echo: bool = False) -> AsyncEngine:
    """An async engine for url (sqlite+aiosqlite://... or postgresql+asyncpg://...)."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database or ""
        if database and database != ":memory:" and not database.startswith("file:"):
            parent = os.path.dirname(os.path.abspath(database))
            os.makedirs(parent, exist_ok=True)
        engine = create_async_engine(url, echo=echo)
        event.listen(engine.sync_engine, "connect", _sqlite_on_connect)
        return engine
    return create_async_engine(url, echo=echo, pool_pre_ping=True)


def _sqlite_on_connect(dbapi_connection, _record) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA synchronous=NORMAL")
    # PostgreSQL always enforces foreign keys; SQLite only when asked, per connection.
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def session_factory(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    # Rows stay readable after commit; callers hand them on after the session's work is done.
    return async_sessionmaker(engine, expire_on_commit=False)


async def create_all(engine: AsyncEngine) -> None:
    """Create missing tables and indexes. Safe when several services start at once: a plain
    check-then-create would let two of them both see a table missing and one fail creating it.
    """
    async with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            # DDL is transactional here: the lock makes concurrent starters take turns.
            await conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _SCHEMA_LOCK})
            await conn.run_sync(Base.metadata.create_all)
        else:
            await conn.run_sync(_create_if_not_exists)


def _create_if_not_exists(conn: Connection) -> None:
    for table in Base.metadata.sorted_tables:
        conn.execute(CreateTable(table, if_not_exists=True))
        for index in table.indexes:
            conn.execute(CreateIndex(index, if_not_exists=True))


async def drop_all(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await conn.run_sync(Base.metadata.drop_all)
