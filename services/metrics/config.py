"""Metrics collector settings, read from the environment once at start."""

from __future__ import annotations

from dataclasses import dataclass

from strata import defaults
from strata.envconfig import data_dir, db_url, env_bool, env_int, env_str


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
        )

    @property
    def tracing_endpoint(self) -> str:
        """Where this service's own spans go: nowhere unless asked, because the stack's
        endpoint usually leads back here, and every report and stored batch would then store
        spans about itself."""
        return self.otlp_endpoint if self.export_own_spans else ""
