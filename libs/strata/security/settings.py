"""A service's security settings: where the cluster secrets are and whether internal TLS is on.

    STRATA_SECRETS_DIR    the folder strata.security.secrets writes (default <data dir>/secrets)
    STRATA_INTERNAL_TLS   true (default): internal calls run over mutual TLS; false: plaintext,
                          still refused without the internal token
    STRATA_INTERNAL_AUTH  on (default); off serves internal RPCs to anyone, for a single process
                          under test only: `make run`, compose and Kubernetes never set it

`identity(service)` writes a complete set into the folder first if it lacks one and can be
written (a process started by hand, `make run` on a fresh machine); a read-only folder
(compose's secrets volume, a Kubernetes Secret) must already hold it.
"""

from __future__ import annotations

from dataclasses import dataclass

from strata.rpc.identity import ClusterIdentity, IdentityError
from strata.security import layout


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
            from strata.security.secrets import ensure_secrets   # cryptography: writers only

            try:
                ensure_secrets(self.secrets_dir)
            except OSError as err:
                raise IdentityError(f"the cluster secrets in {self.secrets_dir} are incomplete "
                                    f"and cannot be written there ({err.strerror}); run "
                                    f"`python -m strata.security.secrets DIR` where they are "
                                    f"made") from None
        return ClusterIdentity.load(self.secrets_dir, service, self.internal_tls)

    def client_identity(self, service: str = "operator") -> ClusterIdentity | None:
        """The identity of a tool calling an internal service: loaded, never written (a new
        set would not match the cluster's); IdentityError naming what is missing."""
        if not self.enabled:
            return None
        return ClusterIdentity.load(self.secrets_dir, service, self.internal_tls)

    def env(self) -> dict[str, str]:
        """The variables that give a child process (a decode worker) these settings."""
        return {"STRATA_SECRETS_DIR": self.secrets_dir,
                "STRATA_INTERNAL_TLS": "true" if self.internal_tls else "false",
                "STRATA_INTERNAL_AUTH": "on" if self.enabled else "off"}


# In-process tests of one servicer: no secrets, no checks (what a config built without
# from_env gets, and what it hands its workers).
UNSECURED = SecuritySettings(secrets_dir="", enabled=False)
