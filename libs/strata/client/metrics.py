"""Client of the internal Metrics API: per-tenant latency reports and recorded traces."""

from __future__ import annotations

import grpc

from strata.client import settings
from strata.rpc.server import CHANNEL_OPTIONS
from strata.rpc.v1 import metrics_pb2, metrics_pb2_grpc

METRICS_TIMEOUT_S = 10.0


class AsyncMetricsClient:
    """grpc.aio client of strata.v1.Metrics. No API key: it is an operator's API, not a tenant's."""

    def __init__(self, address: str | None = None) -> None:
        self.address = settings.metrics_address(address)
        self._channel = grpc.aio.insecure_channel(self.address, options=CHANNEL_OPTIONS)
        self._stub = metrics_pb2_grpc.MetricsStub(self._channel)

    async def report(self, tenant: str = "", since_unix_ms: int = 0,
                     timeout: float = METRICS_TIMEOUT_S) -> metrics_pb2.Report:
        request = metrics_pb2.ReportRequest(tenant=tenant, since_unix_ms=since_unix_ms)
        return await self._stub.GetReport(request, timeout=timeout)

    async def trace(self, trace_id: str, timeout: float = METRICS_TIMEOUT_S) -> metrics_pb2.Trace:
        return await self._stub.GetTrace(metrics_pb2.GetTraceRequest(trace_id=trace_id),
                                         timeout=timeout)

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> AsyncMetricsClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
