"""Store backends for tests: SQLite, a throwaway local PostgreSQL, PostgreSQL in testcontainers.

Load as a plugin (`pytest_plugins = ["tests.pg"]`); then a test that takes `store_url` runs once
per backend, and one that takes `store` gets an empty schema on each. Backends that this
machine lacks skip with the reason:

- postgresql: PostgreSQL server binaries (initdb, pg_ctl), from `pg_config --bindir` or
  /usr/lib/postgresql/*/bin. PostgreSQL refuses to run as root, so as root the server runs as
  the `postgres` user through runuser.
- testcontainers: a reachable Docker engine.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from benchmarks.common.ports import free_port
from strata.store.db import create_all, drop_all, make_engine, session_factory

PG_USER = "postgres"
PG_DATABASE = "strata_test"


def find_pg_bindir() -> str | None:
    candidates = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=False)
        if out.returncode == 0:
            candidates.append(out.stdout.strip())
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    for path in candidates:
        if all(os.access(os.path.join(path, b), os.X_OK) for b in ("initdb", "pg_ctl", "postgres")):
            return path
    return None


def _run(cmd: list[str], as_postgres: bool) -> None:
    if as_postgres:
        cmd = ["runuser", "-u", PG_USER, "--", *cmd]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}): {out.stdout}{out.stderr}")


@dataclass(slots=True)
class LocalPostgres:
    """A PostgreSQL server in a temp dir, trust auth on 127.0.0.1, fsync off (tests only)."""

    bindir: str
    root: str
    port: int
    as_postgres: bool

    @property
    def url(self) -> str:
        return f"postgresql+asyncpg://{PG_USER}@127.0.0.1:{self.port}/{PG_DATABASE}"

    @classmethod
    def start(cls, bindir: str) -> LocalPostgres:
        as_postgres = os.geteuid() == 0
        root = tempfile.mkdtemp(prefix="strata-pg-")
        if as_postgres:
            shutil.chown(root, user=PG_USER)
        server = cls(bindir=bindir, root=root, port=free_port(), as_postgres=as_postgres)
        try:
            _run(
                [
                    f"{bindir}/initdb",
                    "-D",
                    f"{root}/data",
                    "-U",
                    PG_USER,
                    "--auth=trust",
                    "-E",
                    "UTF8",
                    "--no-sync",
                ],
                as_postgres,
            )
            _run(
                [
                    f"{bindir}/pg_ctl",
                    "-D",
                    f"{root}/data",
                    "-l",
                    f"{root}/log",
                    "-o",
                    f"-c listen_addresses=127.0.0.1 -p {server.port} -k {root} -c fsync=off",
                    "-w",
                    "start",
                ],
                as_postgres,
            )
            _run(
                [
                    f"{bindir}/createdb",
                    "-h",
                    "127.0.0.1",
                    "-p",
                    str(server.port),
                    "-U",
                    PG_USER,
                    PG_DATABASE,
                ],
                as_postgres=False,
            )
        except BaseException:
            server.stop()
            raise
        return server

    def stop(self) -> None:
        if os.path.exists(f"{self.root}/data/postmaster.pid"):
            _run(
                [f"{self.bindir}/pg_ctl", "-D", f"{self.root}/data", "-m", "fast", "-w", "stop"],
                self.as_postgres,
            )
        shutil.rmtree(self.root, ignore_errors=True)


def local_postgres_skip_reason() -> str | None:
    if find_pg_bindir() is None:
        return (
            "PostgreSQL server binaries (initdb, pg_ctl) not found via pg_config or "
            "/usr/lib/postgresql/*/bin; install the postgresql package to run these tests"
        )
    if os.geteuid() == 0:
        if shutil.which("runuser") is None:
            return "running as root without runuser; PostgreSQL refuses to run as root"
        try:
            import pwd

            pwd.getpwnam(PG_USER)
        except KeyError:
            return f"running as root and no {PG_USER!r} user exists to run PostgreSQL as"
    return None


def docker_skip_reason() -> str | None:
    import docker
    from docker.errors import DockerException

    # Without DOCKER_HOST, the engine is the default socket; when it is absent there is nothing
    # to ask (and docker-py's failed constructor would leak its socket).
    if not os.environ.get("DOCKER_HOST") and not os.path.exists("/var/run/docker.sock"):
        return "no Docker engine"
    try:
        client = docker.from_env(timeout=2)
    except DockerException:
        return "no Docker engine"
    try:
        client.ping()
    except DockerException:
        return "no Docker engine"
    finally:
        client.close()
    return None


@pytest.fixture(scope="session")
def local_postgres_url() -> Iterator[str]:
    reason = local_postgres_skip_reason()
    if reason:
        pytest.skip(reason)
    server = LocalPostgres.start(find_pg_bindir())
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="session")
def testcontainers_postgres_url() -> Iterator[str]:
    reason = docker_skip_reason()
    if reason:
        pytest.skip(reason)
    try:
        from testcontainers.community.postgres import PostgresContainer
    except ImportError:
        from testcontainers.postgres import PostgresContainer
    with PostgresContainer("postgres:15-alpine", driver="asyncpg") as container:
        yield container.get_connection_url()


@pytest.fixture(params=["sqlite", "postgresql", "testcontainers"])
def store_url(request: pytest.FixtureRequest, tmp_path) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'strata.db'}"
    if request.param == "postgresql":
        return request.getfixturevalue("local_postgres_url")
    return request.getfixturevalue("testcontainers_postgres_url")


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    """A session factory over an empty schema on each backend."""
    engine = make_engine(store_url)
    # The PostgreSQL servers live for the session: clear what an earlier test left.
    await drop_all(engine)
    await create_all(engine)
    try:
        yield session_factory(engine)
    finally:
        await engine.dispose()
