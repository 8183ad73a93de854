"""The node layer: per-node figures over a window from node samples (strata.store.samples),
and the gaps in a node's samples that mark it down. Pure functions, no I/O.

Interval figures (utilization, step tokens and budget) and cumulative counters (prompt tokens,
prefix and tier hit tokens, preemptions, energy) are taken pair by pair between consecutive
samples and pro-rated by how much of each pair's interval lies in the window, so a sample just
outside the window still bounds it. A counter that went down restarted from zero (its node
manager restarted): the later value is the growth. Instant figures (KV blocks, queue lengths)
use the samples inside the window.

Block lifetimes (commit to eviction of device prefix-cache blocks): the mean over the window is
the lifetime sum's growth over the evictions' growth; P50/P99 are the latest sample's, which
cover the worker's recent evictions. All three are unset when nothing was evicted in the window.

A node whose samples stop for more than gap_factor x its median interval was down; its
recovery time runs from its last sample before the gap to its first after.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Sequence

from strata.core.records import NodeSampleRecord
from strata.core.stats import summarize
from strata.eval.report_types import NodeFigures, NodeLayer, Outage, Series


def _overlap(a0: float, a1: float, b0: float, b1: float) -> float:
    return max(0.0, min(a1, b1) - max(a0, b0))


def _pairs(samples: Sequence[NodeSampleRecord], start: int, end: int):
    """(previous, sample, share): consecutive samples and the share of their interval inside
    [start, end]; pairs wholly outside are skipped."""
    for prev, cur in zip(samples, samples[1:]):
        span = cur.unix_ms - prev.unix_ms
        if span <= 0:
            continue
        share = _overlap(prev.unix_ms, cur.unix_ms, start, end) / span
        if share > 0:
            yield prev, cur, share


def _growth(
    samples: Sequence[NodeSampleRecord],
    start: int,
    end: int,
    value: Callable[[NodeSampleRecord], float],
) -> float:
    total = 0.0
    for prev, cur, share in _pairs(samples, start, end):
        a, b = value(prev), value(cur)
        total += share * (b - a if b >= a else b)
    return total


def _interval_sum(
    samples: Sequence[NodeSampleRecord],
    start: int,
    end: int,
    value: Callable[[NodeSampleRecord], float],
) -> float:
    # An interval figure describes (previous sample, this sample]: pro-rate it like a counter.
    return math.fsum(share * value(cur) for _, cur, share in _pairs(samples, start, end))


def covered_ms(samples: Sequence[NodeSampleRecord], start: int, end: int) -> float:
    if not samples:
        return 0.0
    return _overlap(samples[0].unix_ms, samples[-1].unix_ms, start, end)


def _node_figures(
    node_id: str, samples: Sequence[NodeSampleRecord], start: int, end: int
) -> NodeFigures:
    inside = [s for s in samples if start <= s.unix_ms <= end]
    covered_s = (
        sum(
            share * (cur.unix_ms - prev.unix_ms) for prev, cur, share in _pairs(samples, start, end)
        )
        / 1000
    )
    util_weighted = (
        sum(
            share * (cur.unix_ms - prev.unix_ms) * cur.utilization
            for prev, cur, share in _pairs(samples, start, end)
        )
        / 1000
    )
    batch_tokens = round(_interval_sum(samples, start, end, lambda s: s.batch_tokens))
    batch_budget = round(_interval_sum(samples, start, end, lambda s: s.batch_budget))
    prompt = round(_growth(samples, start, end, lambda s: s.prompt_tokens))
    prefix = round(_growth(samples, start, end, lambda s: s.prefix_hit_tokens))
    tier = round(_growth(samples, start, end, lambda s: s.tier_hit_tokens))
    energy = _growth(samples, start, end, lambda s: s.energy_joules)
    evicted = _growth(samples, start, end, lambda s: s.kv_blocks_evicted)
    lifetime_sum = _growth(samples, start, end, lambda s: s.block_lifetime_sum_s)
    used = [s.kv_blocks_device_used for s in inside]
    latest = inside[-1] if inside else samples[-1]
    return NodeFigures(
        node_id=node_id,
        samples=len(inside),
        utilization=util_weighted / covered_s if covered_s > 0 else None,
        batch_utilization=batch_tokens / batch_budget if batch_budget > 0 else None,
        batch_tokens=batch_tokens,
        batch_budget=batch_budget,
        prompt_tokens=prompt,
        prefix_hit_tokens=prefix,
        tier_hit_tokens=tier,
        prefix_hit_rate=prefix / prompt if prompt > 0 else None,
        tier_hit_rate=tier / prompt if prompt > 0 else None,
        preemptions=round(_growth(samples, start, end, lambda s: s.preemptions)),
        waiting=summarize([s.waiting for s in inside]),
        running=summarize([s.running for s in inside]),
        kv_blocks_device_total=max((s.kv_blocks_device_total for s in inside), default=0),
        kv_blocks_device_used_max=max(used, default=0),
        kv_blocks_device_used_mean=math.fsum(used) / len(used) if used else 0.0,
        kv_blocks_host_max=max((s.kv_blocks_host for s in inside), default=0),
        kv_blocks_disk_max=max((s.kv_blocks_disk for s in inside), default=0),
        energy_joules=energy,
        mean_power_watts=energy / covered_s if covered_s > 0 else None,
        energy_source=latest.energy_source,
        kv_blocks_evicted=round(evicted),
        block_lifetime_mean_s=lifetime_sum / evicted if evicted > 0 else None,
        block_lifetime_p50_s=latest.block_lifetime_p50_s if evicted > 0 else None,
        block_lifetime_p99_s=latest.block_lifetime_p99_s if evicted > 0 else None,
    )


NODE_SERIES: dict[str, Callable[[NodeSampleRecord], float]] = {
    "kv_blocks_device_used": lambda s: s.kv_blocks_device_used,
    "kv_blocks_host": lambda s: s.kv_blocks_host,
    "kv_blocks_disk": lambda s: s.kv_blocks_disk,
    "running": lambda s: s.running,
    "waiting": lambda s: s.waiting,
    "utilization": lambda s: s.utilization,
    "batch_utilization": lambda s: s.batch_tokens / s.batch_budget if s.batch_budget else 0.0,
    "power_watts": lambda s: s.power_watts,
}


def downsample(
    unix_ms: Sequence[int], values: Sequence[float], points: int
) -> tuple[list[int], list[float]]:
    """At most `points` points: consecutive runs averaged (time and value), order kept."""
    n = len(values)
    if n <= points:
        return list(unix_ms), [float(v) for v in values]
    out_t, out_v = [], []
    for i in range(points):
        lo, hi = i * n // points, (i + 1) * n // points
        out_t.append(round(math.fsum(unix_ms[lo:hi]) / (hi - lo)))
        out_v.append(math.fsum(values[lo:hi]) / (hi - lo))
    return out_t, out_v


def by_node(samples: Sequence[NodeSampleRecord]) -> dict[str, list[NodeSampleRecord]]:
    nodes: dict[str, list[NodeSampleRecord]] = defaultdict(list)
    for s in sorted(samples, key=lambda s: (s.node_id, s.unix_ms)):
        nodes[s.node_id].append(s)
    return dict(nodes)


def node_layer(
    samples: Sequence[NodeSampleRecord], start: int, end: int, series_points: int = 120
) -> NodeLayer:
    """Per-node figures over [start, end]; samples may include neighbours just outside it."""
    nodes, series = [], []
    for node_id, mine in by_node(samples).items():
        inside = [s for s in mine if start <= s.unix_ms <= end]
        if not inside and next(_pairs(mine, start, end), None) is None:
            continue  # only neighbours of the window, on one side of it
        nodes.append(_node_figures(node_id, mine, start, end))
        for name, value in NODE_SERIES.items():
            t, v = downsample(
                [s.unix_ms for s in inside], [value(s) for s in inside], series_points
            )
            series.append(Series(name, node_id, t, v))
    return NodeLayer(nodes=nodes, series=series)


def outages(
    samples: Sequence[NodeSampleRecord], start: int, end: int, gap_factor: float
) -> list[Outage]:
    """Gaps in each node's samples that overlap [start, end], and nodes silent at its end."""
    found = []
    for node_id, mine in by_node(samples).items():
        times = [s.unix_ms for s in mine]
        intervals = [b - a for a, b in zip(times, times[1:]) if b > a]
        if not intervals:
            continue
        limit = gap_factor * statistics.median(intervals)
        for a, b in zip(times, times[1:]):
            if b - a > limit and _overlap(a, b, start, end) > 0:
                found.append(Outage(node_id, a, b, (b - a) / 1000))
        # A node that went quiet before the window began was never part of it.
        if start <= times[-1] < end and end - times[-1] > limit:
            found.append(Outage(node_id, times[-1], 0, None))
    return found
