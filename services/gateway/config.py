"""Gateway settings: flags, STRATA_* variables, defaults (strata.core.settings)."""

from __future__ import annotations

import os

import grpc
from pydantic import Field, field_validator, model_validator

from strata.core import defaults
from strata.core.settings import CommaList
from strata.core.sla import SlaTable, parse_classes
from strata.rpc.mux_settings import MultiplexFields
from strata.security.settings import SecurityFields
from strata.store.settings import StoreFields

PROG = "python -m services.gateway"


class GatewayConfig(SecurityFields, StoreFields, MultiplexFields):
    """The gateway: the public per-tenant API (Generate, ListModels), the Admin API, and the
    Metrics API scoped to the caller's key. --print-config prints the resolved settings and
    exits."""

    gateway_bind: str = Field(defaults.GATEWAY_ADDR, description="host:port of the public port")
    shutdown_grace_s: float = Field(
        30.0,
        ge=0,
        description="on SIGTERM, seconds to finish the streams in flight (refusing new ones)",
    )
    gateway_http_bind: str = Field(
        defaults.GATEWAY_HTTP_ADDR,
        description="host:port of the OpenAI HTTP API, /health, /ready and /metrics",
    )
    scheduler_addr: CommaList = Field(
        (defaults.SCHEDULER_ADDR,),
        min_length=1,
        description=(
            "the schedulers, comma-separated: Route goes to the one that answered last, the others "
            "take over when it is unreachable"
        ),
    )
    metrics_addr: str = Field(
        defaults.METRICS_ADDR,
        description="the metrics collector, for the reports and traces tenants read here",
    )
    otlp_endpoint: str = Field(
        "", description="OTLP/gRPC receiver for this service's spans; empty: none"
    )
    rate_limit_rps: float = Field(
        50.0,
        gt=0,
        description="requests per second per tenant, sustained, unless the tenant has its own rate",
    )
    rate_limit_burst: float = Field(
        100.0, ge=1, description="requests a tenant may send at once at the default rate"
    )
    request_timeout_s: float = Field(
        300.0, gt=0, description="a request's deadline when the caller sets none"
    )
    tenant_policy_ttl_s: float = Field(
        2.0,
        ge=0,
        description="how long a tenant's policy is "
        "cached; a change made through another gateway holds "
        "here within it",
    )
    sla_classes: str = Field(
        "",
        description="the SLA classes stored when the table is empty: "
        "'interactive=500/100@2,standard=2000/200,batch=best-effort' "
        "(empty: those)",
    )
    gateway_tls_cert: str = Field(
        "", description="PEM certificate: with the key, the public port serves TLS"
    )
    gateway_tls_key: str = Field("", description="PEM private key of that certificate")
    gateway_stale_route_s: float = Field(
        30.0,
        ge=0,
        description="with no scheduler answering, "
        "route from the last view of the pool for at most "
        "this long after it was taken (0: refuse at once)",
    )

    @field_validator("sla_classes")
    @classmethod
    def _classes(cls, spec: str) -> str:
        parse_classes(spec)
        return spec

    @model_validator(mode="after")
    def _tls(self) -> GatewayConfig:
        if bool(self.gateway_tls_cert) != bool(self.gateway_tls_key):
            raise ValueError(
                "set both STRATA_GATEWAY_TLS_CERT and STRATA_GATEWAY_TLS_KEY (PEM "
                "files) for TLS on the public port, or neither"
            )
        for name, path in (
            ("STRATA_GATEWAY_TLS_CERT", self.gateway_tls_cert),
            ("STRATA_GATEWAY_TLS_KEY", self.gateway_tls_key),
        ):
            if path and not os.path.isfile(path):
                raise ValueError(f"{name}={path} is not a readable file")
        return self

    @property
    def sla_seed(self) -> SlaTable:
        return parse_classes(self.sla_classes)

    @property
    def admin_key_file(self) -> str:
        return os.path.join(self.resolved_data_dir(), defaults.ADMIN_KEY_FILE)

    def public_tls(self) -> grpc.ServerCredentials | None:
        """The public port's TLS credentials, or None for plaintext."""
        if not self.gateway_tls_cert:
            return None
        with open(self.gateway_tls_key, "rb") as key, open(self.gateway_tls_cert, "rb") as cert:
            return grpc.ssl_server_credentials([(key.read(), cert.read())])
