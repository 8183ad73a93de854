"""Who a process is to the rest of the cluster: its service name, the internal token, and (with
internal TLS on) the cluster CA and its own certificate and key, read from the secrets folder
strata.security.secrets writes.

Every internal call carries the token in `x-strata-internal` metadata, and with internal TLS on
it runs over mutual TLS: the server presents its service certificate, the client its own, and
each side accepts only certificates the cluster CA signed. The channels and the server-side
check that use an identity are in strata.rpc (channels, internal_auth).
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc

from strata.security import layout as secrets

TOKEN_METADATA = "x-strata-internal"


class IdentityError(ValueError):
    """The secrets folder lacks what this process needs; the message names the files."""


@dataclass(frozen=True, slots=True)
class ClusterIdentity:
    service: str
    token: str
    ca: bytes | None = None  # PEM; None: internal TLS is off
    cert: bytes | None = None
    key: bytes | None = None

    @property
    def tls(self) -> bool:
        return self.ca is not None

    @classmethod
    def load(cls, directory: str, service: str, tls: bool = True) -> ClusterIdentity:
        d = Path(directory)
        need = [secrets.TOKEN_FILE]
        if tls:
            need += [secrets.CA_FILE, secrets.cert_file(service), secrets.key_file(service)]
        absent = [f for f in need if not (d / f).is_file()]
        if absent:
            raise IdentityError(
                f"the cluster secrets in {directory} lack {', '.join(absent)}; `make run` "
                f"writes them on first start, or run `python -m strata.security.secrets "
                f"{directory}`"
            )
        token = (d / secrets.TOKEN_FILE).read_text().strip()
        if not tls:
            return cls(service, token)
        return cls(
            service,
            token,
            (d / secrets.CA_FILE).read_bytes(),
            (d / secrets.cert_file(service)).read_bytes(),
            (d / secrets.key_file(service)).read_bytes(),
        )

    def server_credentials(self) -> grpc.ServerCredentials | None:
        if not self.tls:
            return None
        return grpc.ssl_server_credentials(
            [(self.key, self.cert)], root_certificates=self.ca, require_client_auth=True
        )

    def channel_options(self) -> list[tuple[str, object]]:
        """Options an internal channel adds: with TLS, verify the server's certificate against
        the cluster's name (every service certificate carries it), whatever address it dials."""
        return [("grpc.ssl_target_name_override", secrets.CLUSTER_NAME)] if self.tls else []

    def channel_credentials(self) -> grpc.ChannelCredentials | None:
        if not self.tls:
            return None
        return grpc.ssl_channel_credentials(
            root_certificates=self.ca, private_key=self.key, certificate_chain=self.cert
        )

    def accepts(self, metadata: Sequence[tuple[str, str | bytes]] | None) -> bool:
        """Whether call metadata carries this cluster's token (constant-time comparison)."""
        for k, v in metadata or ():
            if k == TOKEN_METADATA:
                given = v.decode() if isinstance(v, bytes) else v
                return hmac.compare_digest(given.encode(), self.token.encode())
        return False
