"""Metrics gRPC servicer: layered reports, traces, evaluation runs and node samples over the
store, protobuf in and out.

Every call is scoped (strata.rpc.scope): a tenant's scope sees its own requests' figures (the
request layer and its own tenant row; node and cluster layers are the operator's), its own
traces and the runs it opened, and nothing else exists for it: another tenant's trace or run is
NOT_FOUND, as one that does not exist. Node samples and arrival curves are the cluster's.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import time
from collections.abc import Callable

import grpc
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from services.metrics.arrival_curves import burst_for, curves_reply, grid_for
from strata.core.records import NodeSampleRecord
from strata.core.stats import Summary
from strata.eval.layers import LayerSettings, layered_report, report_window
from strata.eval.report_codec import fill_report, run_pb
from strata.rpc.scope import scope_of
from strata.store.arrivals import arrivals
from strata.store.report import (
    TenantReport,
    request_rows,
    tenant_reports,
    tenant_sla_classes,
)
from strata.store.runs import check_new_run, create_run, finish_run, get_run, list_runs
from strata.store.samples import (
    insert_samples,
    sample_time_range,
    samples_between,
)
from strata.store.sla_classes import load_sla_table
from strata.store.spans import get_trace, trace_id_of_request
from strata.telemetry import names
from strata.telemetry.receiver import OtlpReceiver
from strata.telemetry.span_record import SpanRecord
from strata.v1 import metrics_pb2, metrics_pb2_grpc

log = logging.getLogger(__name__)

_TRACE_ID = re.compile(r"[0-9a-f]{32}")
# A report waits this long for spans already received to reach SQL, so a client that just
# finished its requests sees them; a slower database yields the rows stored so far.
REPORT_FLUSH_TIMEOUT_S = 2.0
# Samples this far outside a report's window are read too: the nearest one on each side bounds
# the window's first and last intervals (strata.eval.layers pro-rates them).
SAMPLE_MARGIN_MS = 60_000
MAX_SAMPLES_PER_CALL = 10_000
CLUSTER_ONLY = (
    "node samples and arrival curves are the cluster's own; a tenant or admin key "
    "does not reach them"
)


def trace_owner(spans: list[SpanRecord]) -> str | None:
    """The tenant a trace belongs to: the gateway span's, else any span's tenant attribute."""
    for s in spans:
        if s.name == names.SPAN_GATEWAY_GENERATE and names.TENANT in s.attributes:
            return str(s.attributes[names.TENANT])
    for s in spans:
        if names.TENANT in s.attributes:
            return str(s.attributes[names.TENANT])
    return None


def _percentiles(summary: Summary | None) -> metrics_pb2.Percentiles | None:
    if summary is None:
        return None  # field left unset: no request measured this figure
    return metrics_pb2.Percentiles(
        p50=summary.p50, p95=summary.p95, p99=summary.p99, mean=summary.mean
    )


def _tenant_pb(r: TenantReport) -> metrics_pb2.TenantReport:
    return metrics_pb2.TenantReport(
        tenant=r.tenant,
        requests=r.requests,
        errors=r.errors,
        ttft_ms=_percentiles(r.ttft_ms),
        tpot_ms=_percentiles(r.tpot_ms),
        e2e_ms=_percentiles(r.e2e_ms),
        prompt_tokens=r.prompt_tokens,
        completion_tokens=r.completion_tokens,
    )


def _span_pb(s: SpanRecord) -> metrics_pb2.SpanRecord:
    return metrics_pb2.SpanRecord(
        trace_id=s.trace_id,
        span_id=s.span_id,
        parent_span_id=s.parent_span_id,
        name=s.name,
        service=s.service,
        start_unix_nano=s.start_unix_nano,
        end_unix_nano=s.end_unix_nano,
        attributes_json=s.attributes_json(),
        status_code=s.status_code,
    )


def _sample(m: metrics_pb2.NodeSample) -> NodeSampleRecord:
    return NodeSampleRecord(
        node_id=m.node_id,
        unix_ms=m.unix_ms,
        utilization=m.utilization,
        batch_tokens=m.batch_tokens,
        batch_budget=m.batch_budget,
        kv_blocks_device_used=m.kv_blocks_device_used,
        kv_blocks_device_total=m.kv_blocks_device_total,
        kv_blocks_host=m.kv_blocks_host,
        kv_blocks_disk=m.kv_blocks_disk,
        running=m.running,
        waiting=m.waiting,
        preemptions=m.preemptions,
        power_watts=m.power_watts,
        energy_joules=m.energy_joules,
        energy_source=m.energy_source,
        prefix_hit_tokens=m.prefix_hit_tokens,
        tier_hit_tokens=m.tier_hit_tokens,
        prompt_tokens=m.prompt_tokens,
        kv_blocks_evicted=m.kv_blocks_evicted,
        block_lifetime_sum_s=m.block_lifetime_sum_s,
        block_lifetime_p50_s=m.block_lifetime_p50_s,
        block_lifetime_p99_s=m.block_lifetime_p99_s,
        sparse_layer_steps=m.sparse_layer_steps,
        sparse_fallbacks=m.sparse_fallbacks,
    )


class MetricsServicer(metrics_pb2_grpc.MetricsServicer):
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        receiver: OtlpReceiver,
        settings: LayerSettings | None = None,
        clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self._sessions = sessions
        self._receiver = receiver
        self._settings = settings or LayerSettings()
        self._now_ms = clock_ms

    async def _layer_settings(self, session: AsyncSession) -> LayerSettings:
        """The settings with the SLA classes in force: the SQL table (changed through the
        gateway's Admin API), or the configured classes while it is empty."""
        sla = await load_sla_table(session, self._settings.sla)
        return dataclasses.replace(self._settings, sla=sla)

    async def GetReport(
        self, request: metrics_pb2.ReportRequest, context: grpc.aio.ServicerContext
    ) -> metrics_pb2.Report:
        if request.since_unix_ms < 0:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"since_unix_ms must be 0 (all time) or a Unix time in "
                f"milliseconds, got {request.since_unix_ms}",
            )
        if request.run_id < 0:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"run_id must be 0 (every request) or an id from StartRun, got {request.run_id}",
            )
        scope = scope_of(context.invocation_metadata())
        tenant = request.tenant
        if not scope.admin:
            if tenant and tenant != scope.tenant:
                await context.abort(
                    grpc.StatusCode.PERMISSION_DENIED,
                    f"this key reads the report of tenant {scope.tenant!r} "
                    f"only; leave tenant empty or name {scope.tenant!r}",
                )
            tenant = scope.tenant or ""
        if not await self._receiver.flush(timeout=REPORT_FLUSH_TIMEOUT_S):
            log.warning("report built before all received spans were stored (slow database)")
        async with self._sessions() as session:
            run = None
            if request.run_id:
                run = await get_run(session, request.run_id)
                if run is None or not scope.sees(run.tenant):
                    await context.abort(
                        grpc.StatusCode.NOT_FOUND,
                        f"no run {request.run_id}; `strata report --runs` lists the stored runs",
                    )
            reports = await tenant_reports(session, tenant, request.since_unix_ms, request.run_id)
            rows = await request_rows(session, request.since_unix_ms, request.run_id)
            classes = await tenant_sla_classes(session)
            settings = await self._layer_settings(session)
            sample_range = None if rows or run else await sample_time_range(session)
            start, end = report_window(
                run, rows, request.since_unix_ms, sample_range, self._now_ms()
            )
            samples = await samples_between(
                session, start - SAMPLE_MARGIN_MS, end + SAMPLE_MARGIN_MS
            )
        layered = layered_report(rows, samples, classes, start, end, settings, run, tenant)
        stats = self._receiver.stats
        layered.spans_received, layered.spans_dropped = stats.received, stats.dropped
        report = fill_report(layered, metrics_pb2.Report(tenants=[_tenant_pb(r) for r in reports]))
        return report if scope.admin else tenant_view(report)

    async def StartRun(
        self, request: metrics_pb2.StartRunRequest, context: grpc.aio.ServicerContext
    ) -> metrics_pb2.RunInfo:
        try:
            check_new_run(request.name, request.kind, request.params_json)
        except ValueError as err:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
        scope = scope_of(context.invocation_metadata())
        async with self._sessions() as session:
            run = await create_run(
                session,
                request.name,
                request.kind,
                request.params_json,
                self._now_ms(),
                tenant=scope.tenant,
            )
        return run_pb(run)

    async def FinishRun(
        self, request: metrics_pb2.FinishRunRequest, context: grpc.aio.ServicerContext
    ) -> metrics_pb2.RunInfo:
        if request.run_id <= 0:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"run_id must be the positive id StartRun returned, got {request.run_id}",
            )
        # The replay's last spans may still be queued: the run's finish time is now, whatever
        # the database's pace.
        now = self._now_ms()
        scope = scope_of(context.invocation_metadata())
        try:
            async with self._sessions() as session:
                owned = await get_run(session, request.run_id)
                run = (
                    None
                    if owned is None or not scope.sees(owned.tenant)
                    else await finish_run(session, request.run_id, request.client_summary_json, now)
                )
        except ValueError as err:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
        if run is None:
            await context.abort(
                grpc.StatusCode.NOT_FOUND, f"no run {request.run_id}; StartRun creates one"
            )
        return run_pb(run)

    async def ListRuns(
        self, request: metrics_pb2.ListRunsRequest, context: grpc.aio.ServicerContext
    ) -> metrics_pb2.ListRunsResponse:
        scope = scope_of(context.invocation_metadata())
        async with self._sessions() as session:
            runs = await list_runs(session, scope.tenant)
        return metrics_pb2.ListRunsResponse(runs=[run_pb(r) for r in runs])

    async def RecordNodeSamples(
        self, request: metrics_pb2.NodeSamplesRequest, context: grpc.aio.ServicerContext
    ) -> metrics_pb2.NodeSamplesResponse:
        await _cluster_only(context)
        if len(request.samples) > MAX_SAMPLES_PER_CALL:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"at most {MAX_SAMPLES_PER_CALL} samples per call, got "
                f"{len(request.samples)}; send them in several calls",
            )
        samples = [_sample(m) for m in request.samples]
        for s in samples:
            problem = s.problem()
            if problem is not None:
                await context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"{problem}; no sample of this call was stored",
                )
        async with self._sessions() as session:
            stored = await insert_samples(session, samples)
        return metrics_pb2.NodeSamplesResponse(stored=stored)

    async def GetArrivalCurves(
        self, request: metrics_pb2.ArrivalCurvesRequest, context: grpc.aio.ServicerContext
    ) -> metrics_pb2.ArrivalCurvesResponse:
        await _cluster_only(context)
        try:
            grid = grid_for(request, self._now_ms())
            burst_s = burst_for(request, grid)
        except ValueError as err:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
        async with self._sessions() as session:
            found = await arrivals(session, grid, burst_s)
            classes = await tenant_sla_classes(session)
            sla = await load_sla_table(session, self._settings.sla)
        return curves_reply(grid, found, classes, sla, burst_s)

    async def GetTrace(
        self, request: metrics_pb2.GetTraceRequest, context: grpc.aio.ServicerContext
    ) -> metrics_pb2.Trace:
        trace_id = request.trace_id.strip().lower()
        if not _TRACE_ID.fullmatch(trace_id) or trace_id == "0" * 32:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"trace_id must be 32 hexadecimal characters and not all zero "
                f"(as Jaeger and the traceparent header show it), got "
                f"{request.trace_id!r}",
            )
        await self._receiver.flush(timeout=REPORT_FLUSH_TIMEOUT_S)
        scope = scope_of(context.invocation_metadata())
        async with self._sessions() as session:
            spans = await get_trace(session, trace_id)
            if not spans:  # maybe a request id (also 32 hex characters): its trace, then
                by_request = await trace_id_of_request(session, trace_id)
                if by_request:
                    spans = await get_trace(session, by_request)
        if spans and not scope.admin and trace_owner(spans) != scope.tenant:
            spans = []  # another tenant's: as if it did not exist
        if not spans:
            await context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"no spans stored for trace or request {trace_id}: it may not "
                f"have been exported yet, or it was sent to another collector",
            )
        return metrics_pb2.Trace(spans=[_span_pb(s) for s in spans])


def tenant_view(report: metrics_pb2.Report) -> metrics_pb2.Report:
    """A report as a tenant sees it: its own request figures, no node or cluster layer (other
    tenants' load is in them), no collector counters."""
    for name in ("node_layer", "cluster_layer", "spans_received", "spans_dropped"):
        report.ClearField(name)
    return report


async def _cluster_only(context: grpc.aio.ServicerContext) -> None:
    if not scope_of(context.invocation_metadata()).admin:
        await context.abort(grpc.StatusCode.PERMISSION_DENIED, CLUSTER_ONLY)
