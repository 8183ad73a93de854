"""Prometheus `/metrics` for the services that have no HTTP port of their own (the gateway serves
its registry on its HTTP front instead).

A service describes its metrics as a function that builds metric families from its live state
(`Build`); the function runs on the service's event loop at each scrape, so it reads the
service's objects without locks, and the HTTP server (prometheus-client's, in a thread of its
own) waits for it at most `SCRAPE_TIMEOUT_S`. Counters are read from the service's own
cumulative counters (never reset in the process's life), gauges are read as they are.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from wsgiref.simple_server import WSGIServer

from prometheus_client import start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

log = logging.getLogger(__name__)
SCRAPE_TIMEOUT_S = 5.0

Build = Callable[[], Iterable[Metric]]
Row = tuple[Sequence[str], float]  # label values, value


def gauge(name: str, doc: str, labels: Sequence[str], rows: Iterable[Row]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=list(labels))
    for values, value in rows:
        family.add_metric(list(values), value)
    return family


def counter(name: str, doc: str, labels: Sequence[str], rows: Iterable[Row]) -> CounterMetricFamily:
    """`name` without the _total suffix (the exposition adds it)."""
    family = CounterMetricFamily(name, doc, labels=list(labels))
    for values, value in rows:
        family.add_metric(list(values), value)
    return family


class LoopCollector(Collector):
    """Builds its families on `loop` (the service's) when scraped from another thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop, build: Build) -> None:
        self.loop = loop
        self.build = build

    async def _families(self) -> list[Metric]:
        return list(self.build())

    def collect(self) -> Iterator[Metric]:
        future = asyncio.run_coroutine_threadsafe(self._families(), self.loop)
        yield from future.result(SCRAPE_TIMEOUT_S)


class MetricsEndpoint:
    """`/metrics` (any path) on `bind`, serving `registry` (metrics a service updates as it
    goes) and `build`'s families (read from its state at each scrape). Started on the loop
    `build` must run on."""

    def __init__(
        self, bind: str, build: Build | None = None, registry: CollectorRegistry | None = None
    ) -> None:
        host, _, port = bind.rpartition(":")
        if not host or not port.isdecimal():
            raise ValueError(f"the Prometheus bind address must be host:port, got {bind!r}")
        self.registry = registry if registry is not None else CollectorRegistry()
        if build is not None:
            self.registry.register(LoopCollector(asyncio.get_running_loop(), build))
        try:
            self._server, _ = start_http_server(int(port), host, self.registry)
        except OSError as err:
            raise RuntimeError(
                f"cannot serve Prometheus metrics on {bind}: {err.strerror}; set another "
                f"address or free the port"
            ) from None

    @property
    def server(self) -> WSGIServer:
        return self._server

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def open_endpoint(
    bind: str, build: Build | None = None, registry: CollectorRegistry | None = None
) -> MetricsEndpoint | None:
    """The endpoint on `bind`, or None when `bind` is empty (metrics turned off)."""
    return MetricsEndpoint(bind, build, registry) if bind else None


def close_endpoint(endpoint: MetricsEndpoint | None) -> None:
    if endpoint is not None:
        endpoint.close()
