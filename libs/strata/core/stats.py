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
    arr = np.asarray(values, dtype=np.float64)
    if not np.all(np.isfinite(arr)):
        raise ValueError("samples must be finite numbers (no NaN or infinity)")
    return [float(v) for v in np.percentile(arr, qs, method="linear")]


def percentile(values: Sequence[float], q: float) -> float:
    return percentiles(values, [q])[0]


def summarize(values: Sequence[float]) -> Summary | None:
    """P50/P95/P99/mean of values, or None when there are no samples (nothing to report)."""
    if len(values) == 0:
        return None
    p50, p95, p99 = percentiles(values, REPORT_PERCENTILES)
    mean = math.fsum(values) / len(values)
    return Summary(p50=p50, p95=p95, p99=p99, mean=mean, count=len(values))
