"""The metrics collector's reports, traces and runs, served to tenants and the admin through the
gateway: the only door tenants have.

Each call is authenticated here (a tenant key, or the gateway's admin key) and forwarded to the
internal collector with the cluster's credential and the caller's scope (strata.rpc.scope); the
collector shows a tenant only its own data. Node samples and arrival curves are the cluster's
own and are not served here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc

from strata.gateway.admin_key import is_admin_key
from strata.gateway.auth import Authenticator, bearer_key
from strata.gateway.errors import public_details
from strata.rpc.scope import ADMIN, Scope
from strata.v1 import metrics_pb2, metrics_pb2_grpc

T = TypeVar("T")
DEFAULT_TIMEOUT_S = 30.0
NO_KEY = (
    "missing API key: send metadata 'authorization: Bearer <key>' (a tenant key reads its "
    "own tenant, the admin key every tenant)"
)
BAD_KEY = "unknown or revoked API key; ask your admin for a valid key"
CLUSTER_ONLY = "node samples and arrival curves are the cluster's own, not served to callers"


class MetricsProxyServicer(metrics_pb2_grpc.MetricsServicer):
    def __init__(
        self, metrics: metrics_pb2_grpc.MetricsStub, auth: Authenticator, admin_key: str
    ) -> None:
        self._metrics = metrics
        self._auth = auth
        self._admin_key = admin_key

    async def _scope(self, context: grpc.aio.ServicerContext) -> Scope:
        key = bearer_key(context.invocation_metadata())
        if key is None:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, NO_KEY)
        if is_admin_key(key, self._admin_key):
            return ADMIN
        tenant = await self._auth.tenant_for(key)
        if tenant is None:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, BAD_KEY)
        return Scope(tenant)

    async def _forward(
        self, call: Callable[..., Awaitable[T]], request, context: grpc.aio.ServicerContext
    ) -> T:
        scope = await self._scope(context)
        try:
            return await call(
                request,
                metadata=(scope.metadata(),),
                timeout=context.time_remaining() or DEFAULT_TIMEOUT_S,
            )
        except grpc.aio.AioRpcError as err:
            await context.abort(err.code(), public_details(err, "the metrics collector"))

    async def GetReport(
        self, request: metrics_pb2.ReportRequest, context: grpc.aio.ServicerContext
    ) -> metrics_pb2.Report:
        return await self._forward(self._metrics.GetReport, request, context)

    async def GetTrace(
        self, request: metrics_pb2.GetTraceRequest, context: grpc.aio.ServicerContext
    ) -> metrics_pb2.Trace:
        return await self._forward(self._metrics.GetTrace, request, context)

    async def StartRun(
        self, request: metrics_pb2.StartRunRequest, context: grpc.aio.ServicerContext
    ) -> metrics_pb2.RunInfo:
        return await self._forward(self._metrics.StartRun, request, context)

    async def FinishRun(
        self, request: metrics_pb2.FinishRunRequest, context: grpc.aio.ServicerContext
    ) -> metrics_pb2.RunInfo:
        return await self._forward(self._metrics.FinishRun, request, context)

    async def ListRuns(
        self, request: metrics_pb2.ListRunsRequest, context: grpc.aio.ServicerContext
    ) -> metrics_pb2.ListRunsResponse:
        return await self._forward(self._metrics.ListRuns, request, context)

    async def RecordNodeSamples(self, request, context):
        await context.abort(grpc.StatusCode.PERMISSION_DENIED, CLUSTER_ONLY)

    async def GetArrivalCurves(self, request, context):
        await context.abort(grpc.StatusCode.PERMISSION_DENIED, CLUSTER_ONLY)
