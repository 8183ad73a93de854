"""Percentile summaries for latency reports: P50/P95/P99 and the mean of a set of samples.

Percentiles use linear interpolation between closest ranks, the same rule as numpy's default
(`method="linear"`, Hyndman & Fan type 7): for n sorted samples x[0..n-1] the q-th percentile
sits at rank r = q/100 * (n - 1) and equals x[floor(r)] + (r - floor(r)) * (x[ceil(r)] -
x[floor(r)]). So P50 of [10, 20, 30, 40] is 25 and P99 of it is 39.7: never a value outside the
observed range, and a single sample is its own P50/P95/P99.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

REPORT_PERCENTILES = (50.0, 95.0, 99.0)
# Up to this many samples the rule runs in Python: numpy's call costs more than the sort (a
# request's own inter-token gaps, summarized on the gateway's path for every request).
SMALL_SAMPLE = 256


@dataclass(slots=True, frozen=True)
class Summary:
    """P50/P95/P99 and mean of `count` samples (count is at least 1)."""

    p50: float
    p95: float
    p99: float
    mean: float
    count: int


def percentiles(values: Sequence[float], qs: Iterable[float]) -> list[float]:
    """The qs-th percentiles (0..100) of values, by linear interpolation (see module docstring)."""
    qs = list(qs)
    for q in qs:
        if not 0.0 <= q <= 100.0:
            raise ValueError(f"a percentile must be between 0 and 100, got {q}")
    if len(values) == 0:
        raise ValueError("percentiles of an empty sample are undefined")
    if len(values) <= SMALL_SAMPLE:
        ordered = sorted(float(v) for v in values)
        if not all(math.isfinite(v) for v in ordered):
            raise ValueError("samples must be finite numbers (no NaN or infinity)")
        return [_interpolated(ordered, q) for q in qs]
    arr = np.asarray(values, dtype=np.float64)
    if not np.all(np.isfinite(arr)):
        raise ValueError("samples must be finite numbers (no NaN or infinity)")
    return [float(v) for v in np.percentile(arr, qs, method="linear")]


def _interpolated(ordered: list[float], q: float) -> float:
    """numpy's linear rule on a sorted list, to the bit: its rank and its two-sided lerp."""
    rank = (len(ordered) - 1) * (q / 100.0)
    lo = math.floor(rank)
    hi = min(lo + 1, len(ordered) - 1)
    t = rank - lo
    a, b = ordered[lo], ordered[hi]
    diff = b - a
    return b - diff * (1.0 - t) if t >= 0.5 else a + diff * t


def percentile(values: Sequence[float], q: float) -> float:
    return percentiles(values, [q])[0]


def summarize(values: Sequence[float]) -> Summary | None:
    """P50/P95/P99/mean of values, or None when there are no samples (nothing to report)."""
    if len(values) == 0:
        return None
    p50, p95, p99 = percentiles(values, REPORT_PERCENTILES)
    mean = math.fsum(values) / len(values)
    return Summary(p50=p50, p95=p95, p99=p99, mean=mean, count=len(values))
