"""Per-tenant request report: counts, token totals and P50/P95/P99/mean of TTFT, TPOT and E2E.

Percentiles are computed in Python (strata.eval.stats) over the selected rows, not in SQL:
SQLite has no percentile function and PostgreSQL's percentile_cont would have to agree with it
to the last digit. Latency figures cover the requests that succeeded (a failed request's
latency measures how fast it failed); counts and token totals cover all of them.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from strata.eval.stats import Summary, summarize
from strata.store.models import Request
from strata.store.spans import is_error


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


async def tenant_reports(session: AsyncSession, tenant: str = "",
                         since_unix_ms: int = 0) -> list[TenantReport]:
    """Reports for tenant ("" = every tenant with requests) over requests that started at or
    after since_unix_ms (0 = all time), ordered by tenant name."""
    stmt = select(Request.tenant, Request.ttft_ms, Request.tpot_ms, Request.e2e_ms,
                  Request.prompt_tokens, Request.completion_tokens, Request.cached_tokens,
                  Request.error_code, Request.status_code)
    if tenant:
        stmt = stmt.where(Request.tenant == tenant)
    if since_unix_ms > 0:
        stmt = stmt.where(Request.start_unix_ms >= since_unix_ms)
    by_tenant = defaultdict(list)
    for row in (await session.execute(stmt)).all():
        by_tenant[row.tenant].append(row)
    reports = []
    for name in sorted(by_tenant):
        rows = by_tenant[name]
        ok = [r for r in rows if not is_error(r.error_code, r.status_code)]
        reports.append(TenantReport(
            tenant=name,
            requests=len(rows),
            errors=len(rows) - len(ok),
            ttft_ms=summarize([r.ttft_ms for r in ok if r.ttft_ms is not None]),
            tpot_ms=summarize([r.tpot_ms for r in ok if r.tpot_ms is not None]),
            e2e_ms=summarize([r.e2e_ms for r in ok]),
            prompt_tokens=sum(r.prompt_tokens for r in rows),
            completion_tokens=sum(r.completion_tokens for r in rows),
            cached_tokens=sum(r.cached_tokens for r in rows),
        ))
    return reports
