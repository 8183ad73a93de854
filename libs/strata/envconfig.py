"""Typed reads of environment settings, used only by the services' config.py modules.

A missing required setting or a malformed value fails at start with a message naming it.
"""

from __future__ import annotations

import os

from strata.security.settings import SecuritySettings


class ConfigError(ValueError):
    """A setting is missing or malformed; the message names the variable and what it expects."""


def env_str(name: str, default: str | None = None) -> str:
    value = os.environ.get(name)
    if value is None or value == "":
        if default is None:
            raise ConfigError(f"{name} is required but not set")
        return default
    return value


def env_int(name: str, default: int | None = None, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        if default is None:
            raise ConfigError(f"{name} is required but not set (an integer)")
        value = default
    else:
        try:
            value = int(raw)
        except ValueError:
            raise ConfigError(f"{name} must be an integer, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ConfigError(f"{name} must be at least {minimum}, got {value}")
    return value


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number, got {raw!r}") from None


def env_list(name: str, default: str = "") -> list[str]:
    return [item.strip() for item in env_str(name, default or " ").split(",") if item.strip()]


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    if raw.lower() in ("1", "true", "yes", "on"):
        return True
    if raw.lower() in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name} must be true or false, got {raw!r}")


def data_dir() -> str:
    """Where services keep files (SQLite store, disk KV tier, demo key). STRATA_DATA_DIR."""
    path = env_str("STRATA_DATA_DIR", os.path.join(os.getcwd(), ".strata"))
    os.makedirs(path, exist_ok=True)
    return path


def db_url() -> str:
    """SQLAlchemy async URL: STRATA_DB_URL, default an SQLite file in the data dir."""
    return env_str("STRATA_DB_URL", f"sqlite+aiosqlite:///{os.path.join(data_dir(), 'strata.db')}")


def security() -> SecuritySettings:
    """STRATA_SECRETS_DIR (default <data dir>/secrets), STRATA_INTERNAL_TLS (default true),
    STRATA_INTERNAL_AUTH (default on)."""
    explicit = env_str("STRATA_SECRETS_DIR", " ").strip()
    return SecuritySettings(
        secrets_dir=explicit or os.path.join(data_dir(), "secrets"),
        internal_tls=env_bool("STRATA_INTERNAL_TLS", True),
        enabled=env_bool("STRATA_INTERNAL_AUTH", True))
