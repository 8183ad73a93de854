"""Where a client finds the gateway, its keys and the gateway's TLS certificate authority.

Explicit arguments win; then STRATA_GATEWAY_ADDR / STRATA_API_KEY / STRATA_ADMIN_KEY /
STRATA_TLS_CA; then the shared defaults, and for the keys the files the services write into the
data dir (STRATA_DATA_DIR, default ./.strata): `demo_api_key` (the metrics service) and
`admin_key` (the gateway), so `make run` then `strata generate ...` just works.

Everything a tenant or the admin does goes through the gateway: generation, models, the Admin
API, and reports, traces and evaluation runs (the gateway serves the Metrics API scoped to the
caller's key). `--metrics` names another endpoint of that API.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from strata.core import defaults


class ClientSettingError(ValueError):
    """A client setting is missing or unusable; the message says which and how to fix it."""


class MissingApiKey(ClientSettingError):
    """No key was given, STRATA_API_KEY is unset and the demo key file does not exist."""


class MissingAdminKey(MissingApiKey):
    """No admin key was given, STRATA_ADMIN_KEY is unset and the admin key file is missing."""


def gateway_address(explicit: str | None = None, environ: Mapping[str, str] = os.environ) -> str:
    return explicit or environ.get("STRATA_GATEWAY_ADDR") or defaults.GATEWAY_ADDR


def metrics_address(
    explicit: str | None = None, environ: Mapping[str, str] = os.environ, gateway: str | None = None
) -> str:
    """The Metrics API a client reads reports and traces from: the gateway (`gateway`, else
    as gateway_address finds it) unless given."""
    return explicit or gateway_address(gateway, environ)


def data_dir(environ: Mapping[str, str] = os.environ) -> str:
    return environ.get("STRATA_DATA_DIR") or os.path.join(os.getcwd(), ".strata")


def demo_key_path(environ: Mapping[str, str] = os.environ) -> str:
    return os.path.join(data_dir(environ), defaults.DEMO_KEY_FILE)


def admin_key_path(environ: Mapping[str, str] = os.environ) -> str:
    return os.path.join(data_dir(environ), defaults.ADMIN_KEY_FILE)


def read_key(path: str) -> str:
    """The key kept in `path` (a key file the services write), or "" when there is none."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    except FileNotFoundError:
        return ""


def api_key(explicit: str | None = None, environ: Mapping[str, str] = os.environ) -> str:
    """The key to send as `authorization: Bearer <key>`; raises MissingApiKey naming the sources."""
    if explicit:
        return explicit
    from_env = environ.get("STRATA_API_KEY")
    if from_env:
        return from_env
    path = demo_key_path(environ)
    key = read_key(path)
    if not key:
        raise MissingApiKey(
            f"no API key: set STRATA_API_KEY, or start the stack (make run) so that the metrics "
            f"service writes the demo key to {path}"
        )
    return key


def admin_key(explicit: str | None = None, environ: Mapping[str, str] = os.environ) -> str:
    if explicit:
        return explicit
    if environ.get("STRATA_ADMIN_KEY"):
        return environ["STRATA_ADMIN_KEY"]
    path = admin_key_path(environ)
    key = read_key(path)
    if not key:
        raise MissingAdminKey(
            f"no admin key: pass --admin-key, set STRATA_ADMIN_KEY, or run "
            f"where the gateway's data dir is (it writes the key to {path})"
        )
    return key


def tls_ca(
    explicit: str | bytes | None = None, environ: Mapping[str, str] = os.environ
) -> bytes | None:
    """The PEM certificate authority to verify the gateway's TLS certificate with: `explicit`
    (PEM bytes, or a file path), else the file STRATA_TLS_CA names; None: plaintext."""
    if isinstance(explicit, bytes):
        return explicit
    path = explicit or environ.get("STRATA_TLS_CA")
    if not path:
        return None
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as err:
        raise ClientSettingError(
            f"cannot read the TLS certificate authority {path}: {err.strerror}"
        ) from None
