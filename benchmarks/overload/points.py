"""One point of the overload curve from the replay client's records (strata.eval.client_metrics):
what was offered, what the stack admitted and refused, how the admitted requests fared.

    offered     requests sent / the point's window (the span the trace was sent over)
    refused     answered RESOURCE_EXHAUSTED (shed load: the caller is told at once, with a
                retry-after hint) or FAILED_PRECONDITION (the class's targets cannot hold for it
                even when idle); the client does not retry here, a refusal is final
    admitted    every other request: completed, or failed after the stack took it (a client
                deadline, UNAVAILABLE, ...)
    latency     TTFT, TPOT, E2E P50/P95/P99 of the admitted requests that completed (a failed
                one has no full latency; they are counted beside them)
    attainment  admitted requests that met every target of their class (strata.core.sla: a
                failure does not), over the admitted ones
    goodput     admitted requests that met every target of their class, per second of window

Per class too (`by_class`), so the standard and interactive classes are judged each on its own.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from strata.core.sla import SlaTable
from strata.core.stats import summarize
from strata.eval.client_metrics import ClientRecord

REFUSED = "RESOURCE_EXHAUSTED"
INFEASIBLE = "FAILED_PRECONDITION"  # refused: the class's targets cannot hold even when idle
# Why a refusal was given, from its message (the scheduler's and the gateway's wording).
REASONS = (
    ("even when idle", "infeasible"),
    ("TPOT target of", "infeasible"),
    ("TTFT target", "sla"),
    ("best-effort request would wait", "sla"),
    ("burst share", "burst"),
    ("pool is full", "pool_full"),
    ("request rate", "rate_limit"),
)


@dataclass(slots=True, frozen=True)
class Latency:
    """P50/P95/P99 in ms of `count` samples; None where there were none."""

    p50: float | None = None
    p95: float | None = None
    p99: float | None = None
    count: int = 0

    @classmethod
    def of(cls, seconds: Iterable[float]) -> Latency:
        s = summarize([v * 1000.0 for v in seconds])
        return cls() if s is None else cls(s.p50, s.p95, s.p99, s.count)


@dataclass(slots=True, frozen=True)
class ClassStats:
    """The figures of one set of requests (a class, or all of them) at one point."""

    sent: int
    refused: int
    admitted: int
    completed: int
    failed: int  # admitted, then not completed
    attained: int  # admitted and within every target of their class
    ttft: Latency
    tpot: Latency
    e2e: Latency
    offered_rps: float
    goodput_rps: float
    attainment: float | None  # attained / admitted; None when nothing was admitted
    refused_share: float  # refused / sent


@dataclass(slots=True, frozen=True)
class PointStats:
    window_s: float
    all: ClassStats
    by_class: dict[str, ClassStats]
    failures: dict[str, int] = field(default_factory=dict)  # status -> admitted requests failed
    refusals: dict[str, int] = field(default_factory=dict)  # reason -> refused requests
    max_late_s: float = 0.0  # the sender's worst late start (an open loop that kept up: ~0)


def refusal_reason(message: str) -> str:
    for needle, reason in REASONS:
        if needle in message:
            return reason
    return "other"


def class_stats(records: Sequence[ClientRecord], window_s: float, table: SlaTable) -> ClassStats:
    """The figures of `records` (their classes judged by `table`) over a window of
    `window_s` seconds."""
    if not window_s > 0:
        raise ValueError(f"window_s must be positive, got {window_s}")
    refused = [r for r in records if r.status in (REFUSED, INFEASIBLE)]
    admitted = [r for r in records if r.status not in (REFUSED, INFEASIBLE)]
    done = [r for r in admitted if r.ok]
    attained = sum(1 for r in admitted if attains(r, table))
    return ClassStats(
        sent=len(records),
        refused=len(refused),
        admitted=len(admitted),
        completed=len(done),
        failed=len(admitted) - len(done),
        attained=attained,
        ttft=Latency.of(r.ttft_s for r in done if r.ttft_s is not None),
        tpot=Latency.of(t for r in done if (t := r.tpot_s) is not None),
        e2e=Latency.of(r.e2e_s for r in done if r.e2e_s is not None),
        offered_rps=len(records) / window_s,
        goodput_rps=attained / window_s,
        attainment=attained / len(admitted) if admitted else None,
        refused_share=len(refused) / len(records) if records else 0.0,
    )


def attains(r: ClientRecord, table: SlaTable) -> bool:
    """Whether one request met every target of its class: completed, TTFT and TPOT within."""
    sla = table.lookup(r.sla_class or table.default)
    ttft = r.ttft_s * 1000.0 if r.ttft_s is not None else None
    tpot = r.tpot_s * 1000.0 if r.tpot_s is not None else None
    return sla.attained(not r.ok, ttft, tpot)


def point_stats(records: Sequence[ClientRecord], window_s: float, table: SlaTable) -> PointStats:
    def class_of(r: ClientRecord) -> str:
        return r.sla_class or table.default

    failures = Counter(
        r.status for r in records if not r.ok and r.status not in (REFUSED, INFEASIBLE)
    )
    refusals = Counter(
        refusal_reason(r.error) for r in records if r.status in (REFUSED, INFEASIBLE)
    )
    return PointStats(
        window_s,
        class_stats(records, window_s, table),
        {
            c: class_stats([r for r in records if class_of(r) == c], window_s, table)
            for c in sorted({class_of(r) for r in records})
        },
        dict(sorted(failures.items())),
        dict(sorted(refusals.items())),
        max((r.late_s for r in records), default=0.0),
    )
