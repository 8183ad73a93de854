"""Gateway settings, read from the environment once at start."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import grpc

from strata import defaults
from strata.envconfig import (ConfigError, data_dir, db_url, env_float, env_int, env_list,
                              env_str, security)
from strata.eval.sla import SlaTable, parse_classes
from strata.security.settings import UNSECURED, SecuritySettings


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    bind: str
    # STRATA_SCHEDULER_ADDR: one scheduler, or several side by side (comma-separated): Route
    # goes to the one that answered last, the others take over when it is unreachable
    scheduler_addrs: tuple[str, ...]
    db_url: str
    otlp_endpoint: str
    rate_limit_rps: float        # per tenant, sustained, unless the tenant has its own rate
    rate_limit_burst: float
    request_timeout_s: float     # applied when the caller sets no deadline
    block_size: int = 16         # the workers' KV block size: prompts are hashed in these blocks
    data_dir: str = ""           # STRATA_DATA_DIR: holds the admin key file
    # STRATA_TENANT_POLICY_TTL_S: how long a tenant's policy is cached; a change made through
    # another gateway holds here within it (through this one, at once)
    tenant_policy_ttl_s: float = 2.0
    # STRATA_SLA_CLASSES (strata.eval.sla spec): the classes stored when the SQL table is empty
    sla_seed: SlaTable = field(default_factory=SlaTable)
    security: SecuritySettings = UNSECURED     # the internal credential for outgoing calls
    # STRATA_GATEWAY_TLS_CERT / _KEY: PEM files; both set: the public port serves TLS
    tls_cert: str = ""
    tls_key: str = ""
    metrics_addr: str = defaults.METRICS_ADDR  # reports and traces, scoped to the caller
    # STRATA_GATEWAY_STALE_ROUTE_S: with no scheduler answering, route from the last view of
    # the pool for at most this long after it was taken (0: refuse at once)
    stale_route_s: float = 30.0

    def public_tls(self) -> grpc.ServerCredentials | None:
        """The public port's TLS credentials, or None for plaintext."""
        if not self.tls_cert:
            return None
        with open(self.tls_key, "rb") as key, open(self.tls_cert, "rb") as cert:
            return grpc.ssl_server_credentials([(key.read(), cert.read())])

    @property
    def admin_key_file(self) -> str:
        return os.path.join(self.data_dir, defaults.ADMIN_KEY_FILE)

    @classmethod
    def from_env(cls) -> GatewayConfig:
        ttl = env_float("STRATA_TENANT_POLICY_TTL_S", 2.0)
        if not ttl >= 0:
            raise ConfigError(f"STRATA_TENANT_POLICY_TTL_S must be 0 or more seconds, got {ttl}")
        try:
            seed = parse_classes(env_str("STRATA_SLA_CLASSES", " "))
        except ValueError as err:
            raise ConfigError(f"STRATA_SLA_CLASSES: {err}") from None
        stale = env_float("STRATA_GATEWAY_STALE_ROUTE_S", 30.0)
        if not 0 <= stale < float("inf"):
            raise ConfigError(f"STRATA_GATEWAY_STALE_ROUTE_S must be 0 or more seconds, got "
                              f"{stale}")
        tls_cert = env_str("STRATA_GATEWAY_TLS_CERT", " ").strip()
        tls_key = env_str("STRATA_GATEWAY_TLS_KEY", " ").strip()
        if bool(tls_cert) != bool(tls_key):
            raise ConfigError("set both STRATA_GATEWAY_TLS_CERT and STRATA_GATEWAY_TLS_KEY (PEM "
                              "files) for TLS on the public port, or neither")
        for name, path in (("STRATA_GATEWAY_TLS_CERT", tls_cert),
                           ("STRATA_GATEWAY_TLS_KEY", tls_key)):
            if path and not os.path.isfile(path):
                raise ConfigError(f"{name}={path} is not a readable file")
        return cls(
            bind=env_str("STRATA_GATEWAY_BIND", defaults.GATEWAY_ADDR),
            scheduler_addrs=tuple(env_list("STRATA_SCHEDULER_ADDR", defaults.SCHEDULER_ADDR)),
            db_url=db_url(),
            otlp_endpoint=env_str("STRATA_OTLP_ENDPOINT", ""),
            rate_limit_rps=env_float("STRATA_RATE_LIMIT_RPS", 50.0),
            rate_limit_burst=env_float("STRATA_RATE_LIMIT_BURST", 100.0),
            request_timeout_s=env_float("STRATA_REQUEST_TIMEOUT_S", 300.0),
            block_size=env_int("STRATA_BLOCK_SIZE", 16, minimum=1),
            data_dir=data_dir(),
            tenant_policy_ttl_s=ttl,
            sla_seed=seed,
            security=security(),
            tls_cert=tls_cert,
            tls_key=tls_key,
            metrics_addr=env_str("STRATA_METRICS_ADDR", defaults.METRICS_ADDR),
            stale_route_s=stale,
        )
