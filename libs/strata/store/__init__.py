"""SQL store: tenants and API keys, spans and the request rows derived from them, node samples,
placements. SQLAlchemy 2 async; SQLite (sqlite+aiosqlite) by default, PostgreSQL
(postgresql+asyncpg) in compose; every query here behaves the same on both.

Functions take an AsyncSession and commit their own unit of work.
"""
