"""Spans as stored, the request rows derived from the gateway's spans, and trace lookup.

Each finished request leaves one span named SPAN_GATEWAY_GENERATE carrying the request's
figures as attributes (names in strata.telemetry.names); that span becomes one `requests` row,
tagged with the evaluation run named by its RUN_ID attribute (if any).
Writes ignore rows already present (same trace/span id, same request id), so a batch that an
OTLP exporter retries after a lost reply is stored once.
"""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict
from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from strata.core.records import RequestRecord
from strata.store.models import Request, Span
from strata.telemetry import names
from strata.telemetry.span_record import SpanRecord


def _number(attrs: dict[str, Any], key: str) -> float | None:
    # Spans come from other processes: a malformed figure is dropped from that one row rather
    # than failing the whole batch it arrived in.
    # NaN and infinity are refused too: SQLite stores NaN as NULL, PostgreSQL keeps it.
    value = attrs.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _count(attrs: dict[str, Any], key: str) -> int:
    value = _number(attrs, key)
    if value is None or not 0 <= value < 2**63:
        return 0
    return int(value)


def _text(attrs: dict[str, Any], key: str) -> str:
    value = attrs.get(key)
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return "" if value is None else str(value)


def _run_id(attrs: dict[str, Any]) -> int | None:
    # The gateway validates the metadata and records an int; a string is accepted too, since
    # other emitters copy metadata values through as they arrive.
    value = attrs.get(names.RUN_ID)
    if isinstance(value, str) and value.isdecimal():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 2**63:
        return None
    return value


def request_from_span(span: SpanRecord) -> RequestRecord | None:
    """The request row for a gateway generate span; None for any other span.

    A gateway span without a tenant (its API key was rejected) is no tenant's request and
    yields no row. Without a request id the span id stands in; without a measured E2E latency
    the span's own duration does.
    """
    if span.name != names.SPAN_GATEWAY_GENERATE:
        return None
    attrs = span.attributes
    tenant = _text(attrs, names.TENANT)
    if not tenant:
        return None
    e2e = _number(attrs, names.E2E_MS)
    if e2e is None:
        e2e = (span.end_unix_nano - span.start_unix_nano) / 1e6
    return RequestRecord(
        request_id=_text(attrs, names.REQUEST_ID) or span.span_id,
        trace_id=span.trace_id,
        tenant=tenant,
        model=_text(attrs, names.GEN_AI_REQUEST_MODEL),
        start_unix_ms=span.start_unix_nano // 1_000_000,
        ttft_ms=_number(attrs, names.TTFT_MS),
        tpot_ms=_number(attrs, names.TPOT_MS),
        e2e_ms=e2e,
        queue_ms=_number(attrs, names.QUEUE_MS),
        prompt_tokens=_count(attrs, names.GEN_AI_USAGE_INPUT_TOKENS),
        completion_tokens=_count(attrs, names.GEN_AI_USAGE_OUTPUT_TOKENS),
        cached_tokens=_count(attrs, names.CACHED_TOKENS),
        finish_reason=_text(attrs, names.GEN_AI_RESPONSE_FINISH_REASONS),
        error_code=_text(attrs, names.ERROR_CODE),
        status_code=span.status_code,
        itl_p50_ms=_number(attrs, names.ITL_P50_MS),
        itl_p95_ms=_number(attrs, names.ITL_P95_MS),
        itl_p99_ms=_number(attrs, names.ITL_P99_MS),
        run_id=_run_id(attrs),
    )


def insert_ignoring_duplicates(session: AsyncSession, model: type, conflict_columns: list[str]):
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        return postgresql.insert(model).on_conflict_do_nothing(index_elements=conflict_columns)
    if dialect == "sqlite":
        return sqlite.insert(model).on_conflict_do_nothing(index_elements=conflict_columns)
    raise ValueError(f"the store supports sqlite and postgresql, not {dialect!r}")


async def insert_spans(session: AsyncSession, spans: Sequence[SpanRecord]) -> int:
    """Store spans and the request rows derived from them in one transaction.

    Returns the number of distinct requests the batch carried (stored now or earlier).
    """
    if not spans:
        return 0
    # A batch may repeat a key (an exporter retry queued behind the original); keep the first,
    # since one statement may not hit the same conflict target twice on PostgreSQL.
    unique_spans: dict[tuple[str, str], dict[str, Any]] = {}
    unique_requests: dict[str, dict[str, Any]] = {}
    for s in spans:
        unique_spans.setdefault(
            (s.trace_id, s.span_id),
            {
                "trace_id": s.trace_id,
                "span_id": s.span_id,
                "parent_span_id": s.parent_span_id,
                "name": s.name,
                "service": s.service,
                "start_unix_nano": s.start_unix_nano,
                "end_unix_nano": s.end_unix_nano,
                "attributes_json": s.attributes_json(),
                "status_code": s.status_code,
            },
        )
        req = request_from_span(s)
        if req is not None:
            unique_requests.setdefault(req.request_id, asdict(req))
    await session.execute(
        insert_ignoring_duplicates(session, Span, ["trace_id", "span_id"]),
        list(unique_spans.values()),
    )
    if unique_requests:
        await session.execute(
            insert_ignoring_duplicates(session, Request, ["request_id"]),
            list(unique_requests.values()),
        )
    await session.commit()
    return len(unique_requests)


async def get_trace(session: AsyncSession, trace_id: str) -> list[SpanRecord]:
    """All stored spans of trace_id (32 lowercase hex characters), earliest first."""
    rows = (
        (
            await session.execute(
                select(Span)
                .where(Span.trace_id == trace_id)
                .order_by(Span.start_unix_nano, Span.span_id)
            )
        )
        .scalars()
        .all()
    )
    return [
        SpanRecord(
            trace_id=r.trace_id,
            span_id=r.span_id,
            parent_span_id=r.parent_span_id,
            name=r.name,
            service=r.service,
            start_unix_nano=r.start_unix_nano,
            end_unix_nano=r.end_unix_nano,
            attributes=json.loads(r.attributes_json),
            status_code=r.status_code,
        )
        for r in rows
    ]


async def trace_id_of_request(session: AsyncSession, request_id: str) -> str | None:
    """The trace id recorded for a finished request (the gateway's request id), or None."""
    return (
        (await session.execute(select(Request.trace_id).where(Request.request_id == request_id)))
        .scalars()
        .first()
    )


def span_sink(
    sessions: async_sessionmaker[AsyncSession],
) -> Callable[[list[SpanRecord]], Awaitable[int]]:
    """A writer for strata.telemetry.receiver: each batch in its own session and transaction."""

    async def write(batch: list[SpanRecord]) -> int:
        async with sessions() as session:
            return await insert_spans(session, batch)

    return write
