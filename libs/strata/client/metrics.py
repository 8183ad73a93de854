"""Client of the Metrics API as the gateway serves it: reports, traces and evaluation runs,
scoped to the key sent (a tenant key: that tenant's own; the admin key: every tenant)."""

from __future__ import annotations

from strata.client import settings
from strata.rpc.channels import public_channel
from strata.v1 import metrics_pb2, metrics_pb2_grpc

METRICS_TIMEOUT_S = 10.0


class AsyncMetricsClient:
    """grpc.aio client of strata.v1.Metrics at the gateway (or `address`), with `key`."""

    def __init__(
        self,
        address: str | None = None,
        key: str | None = None,
        tls_ca: str | bytes | None = None,
        gateway: str | None = None,
    ) -> None:
        self.address = settings.metrics_address(address, gateway=gateway)
        self.metadata = (("authorization", f"Bearer {key or settings.api_key()}"),)
        self._channel = public_channel(self.address, settings.tls_ca(tls_ca))
        self.stub = metrics_pb2_grpc.MetricsStub(self._channel)

    async def report(
        self,
        tenant: str = "",
        since_unix_ms: int = 0,
        run_id: int = 0,
        timeout: float = METRICS_TIMEOUT_S,
    ) -> metrics_pb2.Report:
        request = metrics_pb2.ReportRequest(
            tenant=tenant, since_unix_ms=since_unix_ms, run_id=run_id
        )
        return await self.stub.GetReport(request, metadata=self.metadata, timeout=timeout)

    async def trace(self, trace_id: str, timeout: float = METRICS_TIMEOUT_S) -> metrics_pb2.Trace:
        return await self.stub.GetTrace(
            metrics_pb2.GetTraceRequest(trace_id=trace_id), metadata=self.metadata, timeout=timeout
        )

    async def runs(self, timeout: float = METRICS_TIMEOUT_S) -> list[metrics_pb2.RunInfo]:
        reply = await self.stub.ListRuns(
            metrics_pb2.ListRunsRequest(), metadata=self.metadata, timeout=timeout
        )
        return list(reply.runs)

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> AsyncMetricsClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
