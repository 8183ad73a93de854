"""Metrics gRPC servicer: reports and traces from the store, protobuf in and out."""

from __future__ import annotations

import logging
import re

import grpc
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from strata.eval.stats import Summary
from strata.rpc.v1 import metrics_pb2, metrics_pb2_grpc
from strata.store.report import TenantReport, tenant_reports
from strata.store.spans import SpanRecord, get_trace
from strata.telemetry.receiver import OtlpReceiver

log = logging.getLogger(__name__)

_TRACE_ID = re.compile(r"[0-9a-f]{32}")
# A report waits this long for spans already received to reach SQL, so a client that just
# finished its requests sees them; a slower database yields the rows stored so far.
REPORT_FLUSH_TIMEOUT_S = 2.0


def _percentiles(summary: Summary | None) -> metrics_pb2.Percentiles | None:
    if summary is None:
        return None  # field left unset: no request measured this figure
    return metrics_pb2.Percentiles(p50=summary.p50, p95=summary.p95, p99=summary.p99,
                                   mean=summary.mean)


def _tenant_pb(r: TenantReport) -> metrics_pb2.TenantReport:
    return metrics_pb2.TenantReport(
        tenant=r.tenant, requests=r.requests, errors=r.errors,
        ttft_ms=_percentiles(r.ttft_ms), tpot_ms=_percentiles(r.tpot_ms),
        e2e_ms=_percentiles(r.e2e_ms),
        prompt_tokens=r.prompt_tokens, completion_tokens=r.completion_tokens)


def _span_pb(s: SpanRecord) -> metrics_pb2.SpanRecord:
    return metrics_pb2.SpanRecord(
        trace_id=s.trace_id, span_id=s.span_id, parent_span_id=s.parent_span_id, name=s.name,
        service=s.service, start_unix_nano=s.start_unix_nano, end_unix_nano=s.end_unix_nano,
        attributes_json=s.attributes_json(), status_code=s.status_code)


class MetricsServicer(metrics_pb2_grpc.MetricsServicer):
    def __init__(self, sessions: async_sessionmaker[AsyncSession], receiver: OtlpReceiver) -> None:
        self._sessions = sessions
        self._receiver = receiver

    async def GetReport(self, request: metrics_pb2.ReportRequest,
                        context: grpc.aio.ServicerContext) -> metrics_pb2.Report:
        if request.since_unix_ms < 0:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"since_unix_ms must be 0 (all time) or a Unix time in "
                                f"milliseconds, got {request.since_unix_ms}")
        if not await self._receiver.flush(timeout=REPORT_FLUSH_TIMEOUT_S):
            log.warning("report built before all received spans were stored (slow database)")
        async with self._sessions() as session:
            reports = await tenant_reports(session, request.tenant, request.since_unix_ms)
        stats = self._receiver.stats
        return metrics_pb2.Report(tenants=[_tenant_pb(r) for r in reports],
                                  spans_received=stats.received, spans_dropped=stats.dropped)

    async def GetTrace(self, request: metrics_pb2.GetTraceRequest,
                       context: grpc.aio.ServicerContext) -> metrics_pb2.Trace:
        trace_id = request.trace_id.strip().lower()
        if not _TRACE_ID.fullmatch(trace_id) or trace_id == "0" * 32:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"trace_id must be 32 hexadecimal characters and not all zero "
                                f"(as Jaeger and the traceparent header show it), got "
                                f"{request.trace_id!r}")
        await self._receiver.flush(timeout=REPORT_FLUSH_TIMEOUT_S)
        async with self._sessions() as session:
            spans = await get_trace(session, trace_id)
        if not spans:
            await context.abort(grpc.StatusCode.NOT_FOUND,
                                f"no spans stored for trace {trace_id}: it may not have been "
                                f"exported yet, or it was sent to another collector")
        return metrics_pb2.Trace(spans=[_span_pb(s) for s in spans])
