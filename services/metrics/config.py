"""Metrics collector settings: flags, STRATA_* variables, defaults (strata.core.settings)."""

from __future__ import annotations

from pydantic import Field, field_validator

from strata.core import defaults
from strata.core.sla import SlaTable, parse_classes
from strata.eval.layers import LayerSettings
from strata.security.settings import SecurityFields
from strata.store.settings import StoreFields

PROG = "python -m services.metrics"


class MetricsConfig(SecurityFields, StoreFields):
    """The metrics collector: the OTLP span receiver, the SQL store of spans, requests and node
    samples, and the layered reports over them. --print-config prints the resolved settings
    and exits."""

    metrics_bind: str = Field(defaults.METRICS_ADDR, description="host:port of the Metrics service")
    metrics_prometheus_bind: str = Field(
        "",
        description="host:port of the Prometheus /metrics endpoint (empty: none; compose and "
        f"make run use {defaults.METRICS_PROMETHEUS_ADDR.rsplit(':', 1)[1]})",
    )
    otlp_bind: str = Field(
        defaults.OTLP_ADDR, description="host:port of the OTLP/gRPC span receiver"
    )
    otlp_endpoint: str = Field(
        "", description="where the stack's spans go (this service exports its own only when asked)"
    )
    metrics_export_own_spans: bool = Field(
        False, description="also export this service's own spans (they usually lead back here)"
    )
    metrics_queue_spans: int = Field(
        65_536, ge=1, description="spans buffered before new ones are dropped (and counted)"
    )
    metrics_batch_spans: int = Field(512, ge=1, description="spans per SQL transaction")
    sla_classes: str = Field(
        "",
        description="the SLA classes stored when the table is empty "
        "(strata.core.sla spec; empty: the defaults); reports judge by "
        "the table",
    )
    tenant_weights: str = Field(
        "", description="'acme=2,beta=0.5': weights for the fairness index; unnamed tenants weigh 1"
    )
    price_per_kwh: float = Field(0.15, ge=0, description="electricity, $ per kWh")
    price_per_node_hour: float = Field(0.0, ge=0, description="a node's rent, $ per hour")

    @field_validator("sla_classes")
    @classmethod
    def _classes(cls, spec: str) -> str:
        parse_classes(spec)
        return spec

    @field_validator("tenant_weights")
    @classmethod
    def _weights(cls, spec: str) -> str:
        parse_weights(spec)
        return spec

    @property
    def sla(self) -> SlaTable:
        return parse_classes(self.sla_classes)

    @property
    def tracing_endpoint(self) -> str:
        """Where this service's own spans go: nowhere unless asked, because the stack's
        endpoint usually leads back here, and every report and stored batch would then store
        spans about itself."""
        return self.otlp_endpoint if self.metrics_export_own_spans else ""

    def layer_settings(self) -> LayerSettings:
        return LayerSettings(
            sla=self.sla,
            tenant_weights=parse_weights(self.tenant_weights),
            price_per_kwh=self.price_per_kwh,
            price_per_node_hour=self.price_per_node_hour,
        )


def parse_weights(spec: str) -> dict[str, float]:
    weights: dict[str, float] = {}
    for entry in (e.strip() for e in spec.split(",") if e.strip()):
        tenant, _, raw = entry.partition("=")
        try:
            weight = float(raw)
        except ValueError:
            weight = -1.0
        if not tenant.strip() or not weight > 0:
            raise ValueError(
                f"STRATA_TENANT_WEIGHTS entries must be tenant=positive number, got {entry!r}"
            )
        weights[tenant.strip()] = weight
    return weights
