"""Metrics collector settings, read from the environment once at start."""

from __future__ import annotations

from dataclasses import dataclass, field

from strata import defaults
from strata.envconfig import (ConfigError, data_dir, db_url, env_bool, env_float, env_int,
                              env_str, security)
from strata.eval.layers import LayerSettings
from strata.eval.sla import SlaTable, parse_classes
from strata.security.settings import UNSECURED, SecuritySettings


@dataclass(frozen=True, slots=True)
class MetricsConfig:
    bind: str               # STRATA_METRICS_BIND: the Metrics gRPC service
    otlp_bind: str          # STRATA_OTLP_BIND: the OTLP/gRPC TraceService receiver
    db_url: str             # STRATA_DB_URL
    data_dir: str           # STRATA_DATA_DIR: holds the demo tenant's key file
    otlp_endpoint: str      # STRATA_OTLP_ENDPOINT: where the stack's spans go
    export_own_spans: bool  # STRATA_METRICS_EXPORT_OWN_SPANS: also export this service's spans
    queue_spans: int        # STRATA_METRICS_QUEUE_SPANS: spans buffered before dropping
    batch_spans: int        # STRATA_METRICS_BATCH_SPANS: spans per SQL transaction
    # STRATA_SLA_CLASSES: e.g. "interactive=500/100@2,standard=2000/200,batch=best-effort"
    # (strata.eval.sla; empty = its defaults): stored in the sla_classes table when that is
    # empty; reports judge by the table
    sla: SlaTable = field(default_factory=SlaTable)
    # STRATA_TENANT_WEIGHTS: "acme=2,beta=0.5" for the fairness index; unnamed tenants weigh 1
    tenant_weights: dict[str, float] = field(default_factory=dict)
    price_per_kwh: float = 0.15       # STRATA_PRICE_PER_KWH: electricity, $ per kWh
    price_per_node_hour: float = 0.0  # STRATA_PRICE_PER_NODE_HOUR: a node's rent, $ per hour
    security: SecuritySettings = UNSECURED

    @classmethod
    def from_env(cls) -> MetricsConfig:
        return cls(
            bind=env_str("STRATA_METRICS_BIND", defaults.METRICS_ADDR),
            otlp_bind=env_str("STRATA_OTLP_BIND", defaults.OTLP_ADDR),
            db_url=db_url(),
            data_dir=data_dir(),
            otlp_endpoint=env_str("STRATA_OTLP_ENDPOINT", ""),
            export_own_spans=env_bool("STRATA_METRICS_EXPORT_OWN_SPANS", False),
            queue_spans=env_int("STRATA_METRICS_QUEUE_SPANS", 65_536, minimum=1),
            batch_spans=env_int("STRATA_METRICS_BATCH_SPANS", 512, minimum=1),
            sla=_sla(env_str("STRATA_SLA_CLASSES", " ")),
            tenant_weights=_weights(env_str("STRATA_TENANT_WEIGHTS", " ")),
            price_per_kwh=_price("STRATA_PRICE_PER_KWH", 0.15),
            price_per_node_hour=_price("STRATA_PRICE_PER_NODE_HOUR", 0.0),
            security=security(),
        )

    @property
    def tracing_endpoint(self) -> str:
        """Where this service's own spans go: nowhere unless asked, because the stack's
        endpoint usually leads back here, and every report and stored batch would then store
        spans about itself."""
        return self.otlp_endpoint if self.export_own_spans else ""

    def layer_settings(self) -> LayerSettings:
        return LayerSettings(sla=self.sla, tenant_weights=self.tenant_weights,
                             price_per_kwh=self.price_per_kwh,
                             price_per_node_hour=self.price_per_node_hour)


def _sla(spec: str) -> SlaTable:
    try:
        return parse_classes(spec)
    except ValueError as err:
        raise ConfigError(f"STRATA_SLA_CLASSES: {err}") from None


def _weights(spec: str) -> dict[str, float]:
    weights: dict[str, float] = {}
    for entry in (e.strip() for e in spec.split(",") if e.strip()):
        tenant, _, raw = entry.partition("=")
        try:
            weight = float(raw)
        except ValueError:
            weight = -1.0
        if not tenant.strip() or not weight > 0:
            raise ConfigError(f"STRATA_TENANT_WEIGHTS entries must be tenant=positive number, "
                              f"got {entry!r}")
        weights[tenant.strip()] = weight
    return weights


def _price(name: str, default: float) -> float:
    value = env_float(name, default)
    if not value >= 0:
        raise ConfigError(f"{name} must be a non-negative price in dollars, got {value}")
    return value
