"""Where a client finds the gateway, the metrics service and its API key.

Explicit arguments win; then STRATA_GATEWAY_ADDR / STRATA_METRICS_ADDR / STRATA_API_KEY; then the
shared defaults, and for the key the demo key file that the metrics service writes into the data
dir (STRATA_DATA_DIR, default ./.strata), so `make run` then `strata generate ...` just works.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from strata import defaults


class MissingApiKey(ValueError):
    """No key was given, STRATA_API_KEY is unset and the demo key file does not exist."""


def gateway_address(explicit: str | None = None,
                    environ: Mapping[str, str] = os.environ) -> str:
    return explicit or environ.get("STRATA_GATEWAY_ADDR") or defaults.GATEWAY_ADDR


def metrics_address(explicit: str | None = None,
                    environ: Mapping[str, str] = os.environ) -> str:
    return explicit or environ.get("STRATA_METRICS_ADDR") or defaults.METRICS_ADDR


def demo_key_path(environ: Mapping[str, str] = os.environ) -> str:
    data_dir = environ.get("STRATA_DATA_DIR") or os.path.join(os.getcwd(), ".strata")
    return os.path.join(data_dir, defaults.DEMO_KEY_FILE)


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
            f"service writes the demo key to {path}")
    return key
