"""The metrics collector's Prometheus metrics:

strata_metrics_spans_received_total   OTLP spans that arrived
strata_metrics_spans_dropped_total    of them lost: queue full, malformed, or a failed write
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import Metric

from strata.telemetry.prometheus import counter
from strata.telemetry.receiver import OtlpReceiver


def receiver_families(receiver: OtlpReceiver) -> Iterable[Metric]:
    s = receiver.stats
    yield counter(
        "strata_metrics_spans_received", "OTLP spans that arrived", (), [((), s.received)]
    )
    yield counter("strata_metrics_spans_dropped", "Spans lost", (), [((), s.dropped)])
