"""The history the planner learns arrival curves from, written into the collector's store.

The metrics collector computes arrival curves from request rows in SQL (strata.store.arrivals):
per model and window, how many requests arrived and their mean token counts. Replaying a whole
period of history through the stack before the measured one would double every way's length on
a machine where the comparison must fit in minutes, and would only produce the same rows. So the
history trace's requests are written as rows directly, before the planner starts, as one stored
run (kind `benchmark`) that says what they are: arrivals and token counts as the gateway would
record them, no latencies (a planner reads none). They end where the evaluation replay starts,
so at any moment the planner's last `windows` windows hold a whole period, first of history,
then more and more of the evaluation.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from sqlalchemy import insert

from strata.eval.traces import TraceRequest
from strata.store.db import make_engine, session_factory
from strata.store.models import Request
from strata.store.runs import create_run

HISTORY_RUN = "placement-bench history"
FINISH_REASON = "length"  # the replay ignores EOS: every answer is max_tokens long


def history_rows(
    history: Sequence[TraceRequest], end_unix_ms: int, tenant: str, run_id: int
) -> list[dict]:
    """Request rows for `history` (arrival_s <= 0: seconds before `end_unix_ms`)."""
    return [
        dict(
            request_id=f"history-{i}",
            trace_id=f"{i:032x}",
            tenant=tenant,
            model=r.model,
            start_unix_ms=end_unix_ms + round(r.arrival_s * 1000),
            ttft_ms=None,
            tpot_ms=None,
            e2e_ms=0.0,
            queue_ms=None,
            prompt_tokens=r.prompt_tokens,
            completion_tokens=r.output_tokens,
            cached_tokens=0,
            finish_reason=FINISH_REASON,
            error_code="",
            status_code=0,
            run_id=run_id,
        )
        for i, r in enumerate(history)
    ]


async def write_history(
    db_url: str, history: Sequence[TraceRequest], end_unix_ms: int, tenant: str, now_ms: int
) -> int:
    """Stores `history` as rows of a new run ending at `end_unix_ms`; returns the run's id."""
    engine = make_engine(db_url)
    try:
        sessions = session_factory(engine)
        async with sessions() as s:
            run = await create_run(
                s,
                HISTORY_RUN,
                "benchmark",
                json.dumps(
                    {
                        "what": "arrivals and token counts of the placement benchmark's history, "
                        "inserted for the planner's arrival curves; no latencies",
                        "requests": len(history),
                        "end_unix_ms": end_unix_ms,
                    }
                ),
                now_ms,
            )
        rows = history_rows(history, end_unix_ms, tenant, run.run_id)
        async with sessions() as s:
            if rows:
                await s.execute(insert(Request), rows)
            await s.commit()
        return run.run_id
    finally:
        await engine.dispose()
