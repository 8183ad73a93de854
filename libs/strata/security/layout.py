"""The names of the files in a cluster secrets folder (written by strata.security.secrets, read
by strata.security.identity); no cryptography here, so clients that only read need none."""

from __future__ import annotations

import os
from pathlib import Path

TOKEN_FILE = "internal_token"
# A DNS name every service certificate carries: internal channels verify the peer against it,
# not against the address they dial (a pod IP, a StatefulSet's per-pod name), so any address
# in the cluster works; the CA, not the name, marks a peer as the cluster's own.
CLUSTER_NAME = "cluster.strata.internal"
CA_FILE, CA_KEY_FILE = "ca.pem", "ca-key.pem"
# Every process that takes part in the cluster: the seven services, the OpenTelemetry Collector
# of compose, and "operator" for command-line tools and tests that call internal services.
SERVICES = (
    "gateway",
    "scheduler",
    "node",
    "kvstore",
    "placement",
    "metrics",
    "worker",
    "otel-collector",
    "operator",
)


def cert_file(service: str) -> str:
    return f"{service}.pem"


def key_file(service: str) -> str:
    return f"{service}-key.pem"


def required_files() -> list[str]:
    return [TOKEN_FILE, CA_FILE, *(f for s in SERVICES for f in (cert_file(s), key_file(s)))]


def missing(directory: str | os.PathLike[str]) -> list[str]:
    """The files of a complete set that `directory` lacks."""
    d = Path(directory)
    return [f for f in required_files() if not (d / f).is_file()]
