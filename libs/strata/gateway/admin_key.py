"""The gateway's admin key: one secret in a 0600 file in the data dir, created at first start.

Whoever can read the file may call the Admin API (`strata tenants ...` reads it from the same
place). Every gateway sharing the data dir uses the same key; the first to start writes it.
"""

from __future__ import annotations

import contextlib
import hmac
import os
import secrets

from strata.store.tenants import read_key_file, write_key_file

ADMIN_KEY_PREFIX = "sk-strata-admin-"


def ensure_admin_key(path: str) -> str:
    """The admin key in `path`, written there first (mode 0600) if the file is missing."""
    existing = read_key_file(path)
    if existing is not None:
        return existing
    candidate = f"{path}.{os.getpid()}.new"
    write_key_file(candidate, ADMIN_KEY_PREFIX + secrets.token_urlsafe(32))
    try:
        # link() fails if the file exists: of two gateways starting at once, one key wins and
        # both read it back.
        with contextlib.suppress(FileExistsError):
            os.link(candidate, path)
    finally:
        os.unlink(candidate)
    key = read_key_file(path)
    if key is None:
        raise RuntimeError(
            f"the admin key file {path} is empty; delete it and restart the "
            f"gateway to write a new key"
        )
    return key


def is_admin_key(given: str, admin_key: str) -> bool:
    """Constant-time comparison: the time taken says nothing about how much of a guess matched."""
    return hmac.compare_digest(given.encode("utf-8"), admin_key.encode("utf-8"))
