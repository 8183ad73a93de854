"""The store's setting, shared by the services that keep rows in it (gateway, metrics)."""

from __future__ import annotations

import os

from pydantic import Field

from strata.core.settings import StrataSettings


class StoreFields(StrataSettings):
    db_url: str = Field(
        "",
        description="SQLAlchemy async URL of the store (e.g. postgresql+"
        "asyncpg://...); empty: an SQLite file in the data dir",
    )

    def database_url(self, data_dir: str) -> str:
        return self.db_url or f"sqlite+aiosqlite:///{os.path.join(data_dir, 'strata.db')}"
