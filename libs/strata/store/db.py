"""Engine and session factory for the store; schema creation and additive upgrades.

Several processes (metrics collector, gateway, planner) share one SQLite file, so SQLite
connections run in WAL mode (readers never block the writer) with a busy timeout (a second
writer waits instead of failing at once with "database is locked").

The SQLite file holds API-key hashes and every tenant's figures: it is created, or narrowed,
to mode 0600 before the first connection (SQLite gives its -wal and -shm files the same mode).
"""

from __future__ import annotations

import asyncio
import os
import random

from sqlalchemy import Connection, event, inspect, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)
from sqlalchemy.schema import CreateColumn, CreateIndex, CreateTable

from strata.store.models import Base

SQLITE_BUSY_TIMEOUT_MS = 10_000
_SQLITE_SCHEMA_ATTEMPTS = 20
_SCHEMA_LOCK = 0x5374_7261_7461  # any constant shared by every Strata process ("Strata")


def make_engine(url: str, echo: bool = False) -> AsyncEngine:
    """An async engine for url (sqlite+aiosqlite://... or postgresql+asyncpg://...)."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database or ""
        if database and database != ":memory:" and not database.startswith("file:"):
            parent = os.path.dirname(os.path.abspath(database))
            os.makedirs(parent, exist_ok=True)
            _private_file(database)
        engine = create_async_engine(url, echo=echo)
        event.listen(engine.sync_engine, "connect", _sqlite_on_connect)
        return engine
    return create_async_engine(url, echo=echo, pool_pre_ping=True)


def _private_file(path: str) -> None:
    """Create `path` with mode 0600, or narrow an existing file (and its WAL files) to it."""
    os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
    for name in (path, f"{path}-wal", f"{path}-shm", f"{path}-journal"):
        if os.path.exists(name):
            os.chmod(name, 0o600)


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
    """Create missing tables, columns and indexes. Safe when several services start at once: a
    plain check-then-create would let two of them both see a table missing and one fail
    creating it.

    A store written by an older version gains the columns added since (ALTER TABLE ADD COLUMN;
    each is nullable or has a server default), so an existing database keeps its rows across an
    upgrade.
    """
    for attempt in range(_SQLITE_SCHEMA_ATTEMPTS):
        try:
            async with engine.begin() as conn:
                if conn.dialect.name == "postgresql":
                    # DDL is transactional here: the lock makes concurrent starters take turns.
                    await conn.execute(
                        text("SELECT pg_advisory_xact_lock(:key)"), {"key": _SCHEMA_LOCK}
                    )
                await conn.run_sync(_create_if_not_exists)
            return
        except OperationalError as err:
            # SQLite answers "database is locked" at once, without waiting out busy_timeout, when
            # two connections that both read the schema try to upgrade to writing (it would
            # deadlock otherwise). Every step here is idempotent, so the loser retries.
            if (
                engine.dialect.name != "sqlite"
                or "locked" not in str(err)
                or attempt == _SQLITE_SCHEMA_ATTEMPTS - 1
            ):
                raise
            await asyncio.sleep(0.05 * (attempt + 1) + random.uniform(0, 0.05))


def _create_if_not_exists(conn: Connection) -> None:
    for table in Base.metadata.sorted_tables:
        conn.execute(CreateTable(table, if_not_exists=True))
        _add_missing_columns(conn, table)
        for index in table.indexes:
            conn.execute(CreateIndex(index, if_not_exists=True))


def _add_missing_columns(conn: Connection, table) -> None:
    present = {c["name"] for c in inspect(conn).get_columns(table.name)}
    quote = conn.dialect.identifier_preparer.quote
    for column in table.columns:
        if column.name in present:
            continue
        if not column.nullable and column.server_default is None:
            raise RuntimeError(
                f"table {table.name} lacks column {column.name}, which cannot be "
                f"added to existing rows (it is NOT NULL without a server "
                f"default); migrate the store"
            )
        # CreateColumn renders the type, the server default and NOT NULL as CREATE TABLE would;
        # existing rows take the default.
        ddl = (
            f"ALTER TABLE {quote(table.name)} ADD COLUMN "
            f"{CreateColumn(column).compile(dialect=conn.dialect)}"
        )
        try:
            conn.execute(text(ddl))
        except OperationalError:
            # SQLite has no schema lock: another process starting now may have added it first.
            if column.name not in {c["name"] for c in inspect(conn).get_columns(table.name)}:
                raise


async def drop_all(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await conn.run_sync(Base.metadata.drop_all)
