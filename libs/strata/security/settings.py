"""A service's security settings: where the cluster secrets are and whether internal TLS is on.

    STRATA_SECRETS_DIR    the folder strata.security.secrets writes (default <data dir>/secrets)
    STRATA_INTERNAL_TLS   true (default): internal calls run over mutual TLS; false: plaintext,
                          still refused without the internal token
    STRATA_INTERNAL_AUTH  on (default); off serves internal RPCs to anyone, for a single process
                          under test only: `make run`, compose and Kubernetes never set it

`SecurityFields` is the part of every service's settings (strata.core.settings) that gives
them; `SecuritySettings` is what they resolve to.

`identity(service)` writes a complete set into the folder first if it lacks one and can be
written (a process started by hand, `make run` on a fresh machine); a read-only folder
(compose's secrets volume, a Kubernetes Secret) must already hold it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from pydantic import Field

from strata.core.settings import StrataSettings
from strata.security import layout
from strata.security.identity import ClusterIdentity, IdentityError


@dataclass(frozen=True, slots=True)
class SecuritySettings:
    secrets_dir: str
    internal_tls: bool = True
    enabled: bool = True

    def identity(self, service: str) -> ClusterIdentity | None:
        """This service's identity (None when internal auth is off); IdentityError naming what
        is missing."""
        if not self.enabled:
            return None
        if layout.missing(self.secrets_dir):
            from strata.security.secrets import (
                ensure_secrets,  # cryptography: writers only
            )

            try:
                ensure_secrets(self.secrets_dir)
            except OSError as err:
                raise IdentityError(
                    f"the cluster secrets in {self.secrets_dir} are incomplete "
                    f"and cannot be written there ({err.strerror}); run "
                    f"`python -m strata.security.secrets DIR` where they are "
                    f"made"
                ) from None
        return ClusterIdentity.load(self.secrets_dir, service, self.internal_tls)

    def client_identity(self, service: str = "operator") -> ClusterIdentity | None:
        """The identity of a tool calling an internal service: loaded, never written (a new
        set would not match the cluster's); IdentityError naming what is missing."""
        if not self.enabled:
            return None
        return ClusterIdentity.load(self.secrets_dir, service, self.internal_tls)

    def env(self) -> dict[str, str]:
        """The variables that give a child process (a decode worker) these settings."""
        return {
            "STRATA_SECRETS_DIR": self.secrets_dir,
            "STRATA_INTERNAL_TLS": "true" if self.internal_tls else "false",
            "STRATA_INTERNAL_AUTH": "on" if self.enabled else "off",
        }


# In-process tests of one servicer: no secrets, no checks (what a config built without
# from_env gets, and what it hands its workers).
UNSECURED = SecuritySettings(secrets_dir="", enabled=False)


class SecurityFields(StrataSettings):
    """The settings every service has: where its files are and its cluster credential."""

    data_dir: str = Field(
        "",
        description="where the service keeps its files (SQLite store, "
        "keys, KV disk tier, cluster secrets); empty: "
        "./.strata",
    )
    secrets_dir: str = Field(
        "",
        description="the cluster secrets folder (CA, certificates, "
        "internal token); empty: <data dir>/secrets",
    )
    internal_tls: bool = Field(
        True,
        description="internal calls over mutual TLS (false: "
        "plaintext, still with the internal token)",
    )
    internal_auth: bool = Field(
        True,
        description="require the cluster credential on internal "
        "RPCs; false only for a single process under "
        "test",
    )
    health_bind: str = Field(
        "",
        description="host:port of a plaintext port that serves gRPC health only, for "
        "probes that cannot present the cluster's certificate (Kubernetes' grpc probes); "
        "empty: none",
    )

    def resolved_data_dir(self) -> str:
        """data_dir, or ./.strata, created if missing."""
        path = self.data_dir or os.path.join(os.getcwd(), ".strata")
        os.makedirs(path, exist_ok=True)
        return path

    def security(self) -> SecuritySettings:
        return SecuritySettings(
            secrets_dir=self.secrets_dir or os.path.join(self.resolved_data_dir(), "secrets"),
            internal_tls=self.internal_tls,
            enabled=self.internal_auth,
        )
