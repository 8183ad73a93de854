"""Whose data a call to the metrics collector may see: one tenant's, or everyone's.

Tenants and the admin reach reports, traces and runs through the gateway, which checks their key
and forwards the call with the caller's scope in `x-strata-scope` metadata: `tenant:<name>` for
a tenant key, `admin` for the admin key. The collector is internal (only the cluster's own
credential reaches it), so the scope it reads was set by the gateway; an internal caller that
sends none (an operator's tool holding the cluster credential) sees everything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

SCOPE_METADATA = "x-strata-scope"
_TENANT = "tenant:"


@dataclass(frozen=True, slots=True)
class Scope:
    tenant: str | None = None  # None: every tenant (the admin, the cluster)

    @property
    def admin(self) -> bool:
        return self.tenant is None

    def metadata(self) -> tuple[str, str]:
        return (SCOPE_METADATA, "admin" if self.tenant is None else _TENANT + self.tenant)

    def sees(self, tenant: str | None) -> bool:
        """Whether data of `tenant` (None: of no tenant, the cluster's) is visible."""
        return self.tenant is None or tenant == self.tenant


ADMIN = Scope()


def scope_of(metadata: Sequence[tuple[str, str | bytes]] | None) -> Scope:
    """The scope a call carries; ADMIN when it carries none (an internal caller). A value that is
    neither form scopes to nothing anybody owns (an empty tenant name)."""
    for k, v in metadata or ():
        if k == SCOPE_METADATA:
            value = v.decode() if isinstance(v, bytes) else v
            if value == "admin":
                return ADMIN
            return Scope(value.removeprefix(_TENANT) if value.startswith(_TENANT) else "")
    return ADMIN
