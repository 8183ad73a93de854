"""One row per request of a stack run, as the simulator writes them: the gateway's row of the
attempt that was served, moved back to the request's first attempt.

A refused request the client retried is several requests to the gateway, one row each. The
isolation figures count a request once, from its first attempt (what its user waited), as the
simulator does. So for each request the replay client sent:

    served                the gateway's row of its last attempt (matched by request id), its
                          start moved back and its TTFT and E2E lengthened by the time from the
                          first attempt to the last one
    refused in the end    a row from the client's record (the final refusal came without a
                          request id): RESOURCE_EXHAUSTED, E2E from the first attempt to the
                          last refusal
    no gateway row        (its span lost on the way to the store, or a failure before the
                          gateway's span) a row from the client's record; counted, since such
                          latencies are the client's, not the gateway's

The rows of refused attempts before the last are not requests of their own; the refusals are
counted per tenant from the client's attempts instead.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from strata.core.records import STATUS_ERROR, RequestRecord
from strata.eval import client_metrics
from strata.eval.isolation import REFUSED


@dataclass(slots=True)
class MergedRows:
    rows: list[RequestRecord]
    client_only: int  # rows built from the client's record alone
    refused_attempts: dict[str, int]  # per tenant, every refused attempt (retried or final)


def merge_rows(
    records: Sequence[client_metrics.ClientRecord],
    attempts: Mapping[int, Sequence[float]],
    gateway_rows: Sequence[RequestRecord],
    started_unix_ms: int,
    model: str,
) -> MergedRows:
    """`records` and `attempts` as strata.client.replay returns them, `gateway_rows` the run's
    rows from the store, `started_unix_ms` the replay's start (its records' time origin)."""
    by_id = {r.request_id: r for r in gateway_rows}
    rows, client_only = [], 0
    refused: Counter[str] = Counter()
    for record in records:
        tried = attempts.get(record.index, ())
        if tried:
            refused[record.tenant] += len(tried) - (record.status != REFUSED)
        row = by_id.get(record.request_id) if record.request_id else None
        if row is None:
            rows.append(_from_client(record, started_unix_ms, model))
            client_only += record.status != REFUSED
            continue
        wait_ms = (tried[-1] - tried[0]) * 1000.0 if tried else 0.0
        rows.append(
            dataclasses.replace(
                row,
                start_unix_ms=row.start_unix_ms - round(wait_ms),
                ttft_ms=None if row.ttft_ms is None else row.ttft_ms + wait_ms,
                e2e_ms=row.e2e_ms + wait_ms,
            )
        )
    rows.sort(key=lambda r: (r.start_unix_ms, r.request_id))
    return MergedRows(rows, client_only, {t: n for t, n in sorted(refused.items()) if n})


def _from_client(
    record: client_metrics.ClientRecord, started_unix_ms: int, model: str
) -> RequestRecord:
    failed = not record.ok
    end_s = record.finished_s if record.finished_s is not None else record.sent_s
    e2e_s = record.e2e_s if record.e2e_s is not None else end_s - record.sent_s
    tpot_s = record.tpot_s
    return RequestRecord(
        request_id=record.request_id or f"client-{record.index}",
        trace_id=record.trace_id,
        tenant=record.tenant,
        model=model,
        start_unix_ms=started_unix_ms + round(record.sent_s * 1000),
        ttft_ms=None if record.ttft_s is None else record.ttft_s * 1000,
        tpot_ms=None if tpot_s is None else tpot_s * 1000,
        e2e_ms=e2e_s * 1000,
        queue_ms=None,
        prompt_tokens=record.prompt_tokens,
        completion_tokens=record.output_tokens,
        cached_tokens=record.cached_tokens,
        finish_reason=record.finish_reason,
        error_code=record.status if failed else "",
        status_code=STATUS_ERROR if failed else 0,
    )
