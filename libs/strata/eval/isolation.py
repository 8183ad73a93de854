"""Isolation figures of one multi-tenant run: what the isolation benchmark compares between
static partitioning, a pooled first-come-first-served scheduler and the two-level scheduler.

From the run's request rows (failures included) and node samples only, so a simulated run and a
real one are judged by the same code:

    per tenant      requests, refused (RESOURCE_EXHAUSTED, after the client's retries), other
                    failures, P50/P99 TTFT and E2E of the successful ones, SLA attainment
                    (strata.core.sla: every request counts, a failure does not attain)
    worst tenant    the highest per-tenant P99 (TTFT and E2E) among the tenants with an SLA
    utilization     mean over the GPUs of busy time over wall time (node samples)
    fairness        Jain's index over tenants of served / offered output tokens: 1 when every
                    tenant got the same fraction of what it asked for
    inflation       per tenant, and pooled over the victims: P99 of the requests that arrived
                    inside the aggressor's burst windows over P99 of those that arrived outside
                    them (TTFT and E2E); 1.0 = the bursts did not touch them. The victims are
                    the steady tenants with an SLA (a class with a target): a best-effort
                    tenant has no latency to protect, and absorbing bursts is its job; its own
                    inflation is reported per tenant all the same.
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from strata.core.records import NodeSampleRecord, RequestRecord
from strata.core.sla import SlaTable
from strata.core.stats import percentile
from strata.eval.layers import jain_index

REFUSED = "RESOURCE_EXHAUSTED"


@dataclass(slots=True, frozen=True)
class TenantIsolation:
    tenant: str
    sla_class: str
    requests: int
    refused: int
    failed: int  # other failures
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    e2e_p50_ms: float | None
    e2e_p99_ms: float | None
    attainment: float  # of all its requests
    served_fraction: float  # output tokens served / offered
    ttft_inflation: float | None = None  # P99 inside the bursts / outside
    e2e_inflation: float | None = None


@dataclass(slots=True, frozen=True)
class IsolationFigures:
    tenants: list[TenantIsolation]
    utilization: float | None
    jain: float | None
    worst_ttft_p99_ms: float | None
    worst_e2e_p99_ms: float | None
    victim_ttft_inflation: float | None
    victim_e2e_inflation: float | None

    def tenant(self, name: str) -> TenantIsolation:
        return next(t for t in self.tenants if t.tenant == name)


def _p(values: list[float], q: float) -> float | None:
    return percentile(values, q) if values else None


def _in_windows(t_ms: float, starts: list[float], windows: Sequence[tuple[float, float]]) -> bool:
    i = bisect.bisect_right(starts, t_ms) - 1
    return i >= 0 and t_ms < windows[i][1]


def utilization(
    samples: Sequence[NodeSampleRecord], window_ms: tuple[float, float] | None = None
) -> float | None:
    """Mean over nodes of their samples' mean utilization (samples are per interval), over the
    samples taken within `window_ms` when given (the offered load's span, not the drain after
    it)."""
    per_node: dict[str, list[float]] = defaultdict(list)
    for s in samples:
        if window_ms is None or window_ms[0] < s.unix_ms <= window_ms[1]:
            per_node[s.node_id].append(s.utilization)
    if not per_node:
        return None
    return math.fsum(math.fsum(v) / len(v) for v in per_node.values()) / len(per_node)


def isolation_figures(
    rows: Sequence[RequestRecord],
    samples: Sequence[NodeSampleRecord],
    tenant_classes: Mapping[str, str],
    offered_tokens: Mapping[str, int],
    table: SlaTable,
    aggressor: str,
    burst_windows_ms: Sequence[tuple[float, float]],
    load_window_ms: tuple[float, float] | None = None,
) -> IsolationFigures:
    """Figures of one run. `offered_tokens` is each tenant's requested output tokens;
    `burst_windows_ms` the aggressor's bursts as [start, end) in the rows' unix ms;
    `load_window_ms` the span utilization is averaged over (None: every sample)."""
    by_tenant: dict[str, list[RequestRecord]] = defaultdict(list)
    for r in rows:
        by_tenant[r.tenant].append(r)
    windows = sorted(burst_windows_ms)
    starts = [w[0] for w in windows]
    figures = []
    inside: dict[str, list[float]] = {"ttft": [], "e2e": []}
    outside: dict[str, list[float]] = {"ttft": [], "e2e": []}

    def ratio(a: list[float], b: list[float]) -> float | None:
        pa, pb = _p(a, 99), _p(b, 99)
        return pa / pb if pa is not None and pb else None

    for tenant in sorted(by_tenant):
        tenant_rows = by_tenant[tenant]
        sla = table.lookup(tenant_classes.get(tenant, table.default))
        ok = [r for r in tenant_rows if not r.error_code]
        ttft = [r.ttft_ms for r in ok if r.ttft_ms is not None]
        e2e = [r.e2e_ms for r in ok]
        attained = sum(
            1 for r in tenant_rows if sla.attained(bool(r.error_code), r.ttft_ms, r.tpot_ms)
        )
        served = sum(r.completion_tokens for r in ok)
        offered = offered_tokens.get(tenant, 0)
        mine_in: dict[str, list[float]] = {"ttft": [], "e2e": []}
        mine_out: dict[str, list[float]] = {"ttft": [], "e2e": []}
        for r in ok:
            side = mine_in if _in_windows(r.start_unix_ms, starts, windows) else mine_out
            if r.ttft_ms is not None:
                side["ttft"].append(r.ttft_ms)
            side["e2e"].append(r.e2e_ms)
        figures.append(
            TenantIsolation(
                tenant,
                sla.name,
                len(tenant_rows),
                sum(1 for r in tenant_rows if r.error_code == REFUSED),
                sum(1 for r in tenant_rows if r.error_code and r.error_code != REFUSED),
                _p(ttft, 50),
                _p(ttft, 99),
                _p(e2e, 50),
                _p(e2e, 99),
                attained / len(tenant_rows),
                served / offered if offered else 1.0,
                ratio(mine_in["ttft"], mine_out["ttft"]),
                ratio(mine_in["e2e"], mine_out["e2e"]),
            )
        )
        if tenant != aggressor and not sla.best_effort:
            for metric in ("ttft", "e2e"):
                inside[metric] += mine_in[metric]
                outside[metric] += mine_out[metric]

    def worst(attr: str) -> float | None:
        values = [
            getattr(f, attr)
            for f in figures
            if getattr(f, attr) is not None and not table.lookup(f.sla_class).best_effort
        ]
        return max(values) if values else None

    return IsolationFigures(
        figures,
        utilization(samples, load_window_ms),
        jain_index([f.served_fraction for f in figures]),
        worst("ttft_p99_ms"),
        worst("e2e_p99_ms"),
        ratio(inside["ttft"], outside["ttft"]),
        ratio(inside["e2e"], outside["e2e"]),
    )
