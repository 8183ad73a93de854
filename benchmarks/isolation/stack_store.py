"""What a stack run left in the SQL store: its request rows, the nodes' samples over the trace,
and why the scheduler refused what it refused.

The rows come from the gateway's spans, which the metrics service stores in batches: the reader
waits until every request the client saw served has its row (at most ROW_WAIT_S, after which the
rows missing are built from the client's records, stack_rows). A refusal's reason is the
scheduler's route span in the same trace (burst | pool_full | sla | partition); a refused
gateway row without one was refused further on, by the node (`node`).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from dataclasses import dataclass

from sqlalchemy import select

from strata.core.records import NodeSampleRecord, RequestRecord
from strata.eval.isolation import REFUSED
from strata.store.db import make_engine, session_factory
from strata.store.models import Span
from strata.store.report import request_rows
from strata.store.samples import samples_between
from strata.telemetry import names

ROW_WAIT_S = 30.0
NODE_REFUSAL = "node"


@dataclass(slots=True)
class StoredRun:
    rows: list[RequestRecord]
    samples: list[NodeSampleRecord]
    refusal_reasons: dict[tuple[str, str], int]  # (tenant, reason) -> refused attempts


async def read_run(
    db_url: str, run_id: int, served_ids: set[str], window_ms: tuple[int, int]
) -> StoredRun:
    """Run `run_id`'s rows (once `served_ids` all have one, or after ROW_WAIT_S), the samples
    taken within `window_ms`, and the reasons of its refusals."""
    engine = make_engine(db_url)
    try:
        sessions = session_factory(engine)
        deadline = time.monotonic() + ROW_WAIT_S
        while True:
            async with sessions() as s:
                rows = await request_rows(s, run_id=run_id)
            if served_ids <= {r.request_id for r in rows} or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
        refused = [r for r in rows if r.error_code == REFUSED]
        async with sessions() as s:
            samples = await samples_between(s, *window_ms)
            routes = (
                await s.execute(
                    select(Span.trace_id, Span.attributes_json).where(
                        Span.name == names.SPAN_SCHEDULER_ROUTE,
                        Span.trace_id.in_({r.trace_id for r in refused}),
                    )
                )
            ).all()
    finally:
        await engine.dispose()
    reason = {}
    for trace_id, attributes in routes:
        refusal = json.loads(attributes).get(names.ROUTE_REFUSED)
        if refusal:
            reason[trace_id] = str(refusal)
    counts = Counter((r.tenant, reason.get(r.trace_id, NODE_REFUSAL)) for r in refused)
    return StoredRun(rows, samples, dict(sorted(counts.items())))
