"""Per-tenant request report: counts, token totals and P50/P95/P99/mean of TTFT, TPOT and E2E.

Percentiles are computed in Python (strata.core.stats) over the selected rows, not in SQL:
SQLite has no percentile function and PostgreSQL's percentile_cont would have to agree with it
to the last digit. Latency figures cover the requests that succeeded (a failed request's
latency measures how fast it failed); counts and token totals cover all of them.

request_rows and tenant_sla_classes hand the same rows to the layered evaluation
(strata.eval.layers), so both reports read one source.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from strata.core.records import RequestRecord, is_error
from strata.core.stats import Summary, summarize
from strata.store.models import Request, Tenant


@dataclass(slots=True)
class TenantReport:
    """One tenant's figures; a latency summary is None when no successful request measured it."""

    tenant: str
    requests: int
    errors: int
    ttft_ms: Summary | None
    tpot_ms: Summary | None
    e2e_ms: Summary | None
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int


def _where(stmt, tenant: str, since_unix_ms: int, run_id: int):
    if tenant:
        stmt = stmt.where(Request.tenant == tenant)
    if since_unix_ms > 0:
        stmt = stmt.where(Request.start_unix_ms >= since_unix_ms)
    if run_id > 0:
        stmt = stmt.where(Request.run_id == run_id)
    return stmt


async def tenant_reports(
    session: AsyncSession, tenant: str = "", since_unix_ms: int = 0, run_id: int = 0
) -> list[TenantReport]:
    """Reports for tenant ("" = every tenant with requests) over requests that started at or
    after since_unix_ms (0 = all time) and belong to run_id (0 = any run or none), ordered by
    tenant name."""
    stmt = _where(
        select(
            Request.tenant,
            Request.ttft_ms,
            Request.tpot_ms,
            Request.e2e_ms,
            Request.prompt_tokens,
            Request.completion_tokens,
            Request.cached_tokens,
            Request.error_code,
            Request.status_code,
        ),
        tenant,
        since_unix_ms,
        run_id,
    )
    by_tenant = defaultdict(list)
    for row in (await session.execute(stmt)).all():
        by_tenant[row.tenant].append(row)
    reports = []
    for name in sorted(by_tenant):
        rows = by_tenant[name]
        ok = [r for r in rows if not is_error(r.error_code, r.status_code)]
        reports.append(
            TenantReport(
                tenant=name,
                requests=len(rows),
                errors=len(rows) - len(ok),
                ttft_ms=summarize([r.ttft_ms for r in ok if r.ttft_ms is not None]),
                tpot_ms=summarize([r.tpot_ms for r in ok if r.tpot_ms is not None]),
                e2e_ms=summarize([r.e2e_ms for r in ok]),
                prompt_tokens=sum(r.prompt_tokens for r in rows),
                completion_tokens=sum(r.completion_tokens for r in rows),
                cached_tokens=sum(r.cached_tokens for r in rows),
            )
        )
    return reports


_ROW_COLUMNS = (
    "request_id",
    "trace_id",
    "tenant",
    "model",
    "start_unix_ms",
    "ttft_ms",
    "tpot_ms",
    "e2e_ms",
    "queue_ms",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "finish_reason",
    "error_code",
    "status_code",
    "itl_p50_ms",
    "itl_p95_ms",
    "itl_p99_ms",
    "run_id",
)


async def request_rows(
    session: AsyncSession, since_unix_ms: int = 0, run_id: int = 0
) -> list[RequestRecord]:
    """The request rows of run_id (0 = any) that started at or after since_unix_ms, by start."""
    stmt = _where(
        select(*(getattr(Request, c) for c in _ROW_COLUMNS)), "", since_unix_ms, run_id
    ).order_by(Request.start_unix_ms, Request.request_id)
    return [RequestRecord(**row._asdict()) for row in (await session.execute(stmt)).all()]


async def tenant_sla_classes(session: AsyncSession) -> dict[str, str]:
    """Every known tenant's SLA class, by tenant name."""
    rows = (await session.execute(select(Tenant.name, Tenant.sla_class))).all()
    return {name: sla_class for name, sla_class in rows}
