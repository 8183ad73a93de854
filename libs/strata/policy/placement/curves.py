"""Arrival curves: each model's request rate and mean token counts per time window.

Placement that ignores time packs two models whose peaks coincide as happily as two whose peaks
alternate. The curves are what lets the planner tell them apart. Time is cut one of two ways:

    recent   the last `windows` windows of `window_s` seconds before `end_s`: the next hour is
             assumed to look like the last one
    daily    the (UTC) day cut into 86400 / window_s windows; a window's rate is the requests
             that arrived in that slot on any day of the span [start_s, end_s), divided by the
             seconds of that slot the span covers, so a diurnal pattern shows after one day

A window's rate counts every request that arrived (failed ones asked for capacity too); its
token means are over the requests that succeeded (a failed request's output is cut short).

A window's mean hides its bursts: 3x the rate for 20 s moves a 150 s window's mean by a quarter.
With `burst_s` > 0 the window is also cut into slices of that many seconds (burst_s divides
window_s), and the curve keeps the rate of each window's busiest slice (over every day, for a
daily grid). Replica counts are provisioned for that rate (strata.policy.placement.loads).
Curves come from request rows, or from counts already aggregated per window (the metrics
collector aggregates in SQL and sends those).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from strata.policy.placement.capacity import Z_P99

DAY_S = 86_400.0


@dataclass(slots=True, frozen=True)
class RequestRow:
    model: str
    arrival_s: float  # Unix seconds
    prompt_tokens: int
    output_tokens: int
    failed: bool = False


@dataclass(slots=True, frozen=True)
class WindowGrid:
    """Which window a moment falls in, and how many seconds of each window were observed."""

    window_s: float
    start_s: float
    end_s: float
    daily: bool = False

    def __post_init__(self) -> None:
        if not (self.window_s > 0 and math.isfinite(self.window_s)):
            raise ValueError(f"window_s must be a positive number of seconds, got {self.window_s}")
        if self.end_s <= self.start_s:
            raise ValueError(f"the span must end after it starts: [{self.start_s}, {self.end_s})")
        if self.daily and not _divides_day(self.window_s):
            raise ValueError(
                f"a daily grid cuts the day into whole windows: {self.window_s} s "
                f"does not divide {DAY_S:.0f} s"
            )

    @classmethod
    def recent(cls, window_s: float, windows: int, end_s: float) -> WindowGrid:
        if windows < 1:
            raise ValueError(f"windows must be at least 1, got {windows}")
        return cls(window_s, end_s - window_s * windows, end_s)

    @property
    def windows(self) -> int:
        if self.daily:
            return round(DAY_S / self.window_s)
        return round((self.end_s - self.start_s) / self.window_s)

    def index(self, t: float) -> int | None:
        if not self.start_s <= t < self.end_s:
            return None
        base = (t % DAY_S) if self.daily else (t - self.start_s)
        return min(int(base // self.window_s), self.windows - 1)

    def observed_s(self) -> tuple[float, ...]:
        if not self.daily:
            return (self.window_s,) * self.windows
        seen = [0.0] * self.windows
        for day in range(int(self.start_s // DAY_S), int(math.ceil(self.end_s / DAY_S))):
            for k in range(self.windows):
                lo = day * DAY_S + k * self.window_s
                seen[k] += max(0.0, min(lo + self.window_s, self.end_s) - max(lo, self.start_s))
        return tuple(seen)


@dataclass(slots=True, frozen=True)
class ArrivalCurve:
    """One model's traffic per window; every tuple has one entry per window."""

    model: str
    window_s: float
    requests: tuple[int, ...]
    rates: tuple[float, ...]  # requests per second
    prompt_tokens: tuple[float, ...]  # mean per request; 0 where no request succeeded
    output_tokens: tuple[float, ...]
    burst_s: float = 0.0  # > 0: burst_rates holds each window's busiest slice
    burst_rates: tuple[float, ...] = ()  # requests per second in it; () when not measured

    @property
    def windows(self) -> int:
        return len(self.rates)

    @property
    def peak_rate(self) -> float:
        return max(self.rates, default=0.0)

    def provision_rate(self, window: int) -> float:
        """The rate replicas are sized for in `window`: its busiest slice's where measured.

        The busiest of many slices is busy by chance too (Poisson counts), and the capacity
        model already prices Poisson arrivals at the mean rate; so a slice counts by the lower
        99% bound of its rate, n - z sqrt(n) arrivals, and never below the window's mean."""
        rate = self.rates[window]
        if not self.burst_rates:
            return rate
        n = self.burst_rates[window] * self.burst_s
        return max(rate, (n - Z_P99 * math.sqrt(n)) / self.burst_s)

    @classmethod
    def from_counts(
        cls,
        model: str,
        window_s: float,
        requests: Sequence[int],
        observed_s: Sequence[float],
        prompt_mean: Sequence[float],
        output_mean: Sequence[float],
        burst_s: float = 0.0,
        burst_requests: Sequence[int] = (),
    ) -> ArrivalCurve:
        """`burst_requests`: arrivals in each window's busiest slice of `burst_s` seconds
        (empty: not measured)."""
        if not len(requests) == len(observed_s) == len(prompt_mean) == len(output_mean):
            raise ValueError(
                f"curve of {model}: requests, observed seconds and token means "
                f"need one entry per window each"
            )
        if burst_requests and (len(burst_requests) != len(requests) or burst_s <= 0):
            raise ValueError(
                f"curve of {model}: burst counts need one entry per window and "
                f"burst_s > 0, got {len(burst_requests)} counts for "
                f"{len(requests)} windows and burst_s {burst_s}"
            )
        rates = tuple(n / s if s > 0 else 0.0 for n, s in zip(requests, observed_s))
        bursts = tuple(n / burst_s for n in burst_requests) if burst_requests else ()
        return cls(
            model,
            window_s,
            tuple(int(n) for n in requests),
            rates,
            tuple(float(p) for p in prompt_mean),
            tuple(float(o) for o in output_mean),
            burst_s if bursts else 0.0,
            bursts,
        )

    @classmethod
    def flat(
        cls,
        model: str,
        window_s: float,
        rates: Sequence[float],
        prompt_tokens: float,
        output_tokens: float,
    ) -> ArrivalCurve:
        """A curve with the same token means in every window (tests, synthetic workloads)."""
        n = len(rates)
        return cls(
            model,
            window_s,
            tuple(round(r * window_s) for r in rates),
            tuple(rates),
            (float(prompt_tokens),) * n,
            (float(output_tokens),) * n,
        )


def arrival_curves(
    rows: Iterable[RequestRow], grid: WindowGrid, burst_s: float = 0.0
) -> dict[str, ArrivalCurve]:
    """One curve per model seen in `rows` inside the grid's span, keyed and ordered by model;
    with `burst_s` > 0 each also holds its windows' busiest-slice rates (module docstring)."""
    n = grid.windows
    slices = BurstSlices(grid, burst_s) if burst_s else None
    per_slice: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    count: dict[str, list[int]] = defaultdict(lambda: [0] * n)
    ok: dict[str, list[int]] = defaultdict(lambda: [0] * n)
    prompt: dict[str, list[float]] = defaultdict(lambda: [0.0] * n)
    output: dict[str, list[float]] = defaultdict(lambda: [0.0] * n)
    for r in rows:
        k = grid.index(r.arrival_s)
        if k is None:
            continue
        count[r.model][k] += 1
        if slices is not None:
            per_slice[r.model][slices.slice_of(r.arrival_s)] += 1
        if not r.failed:
            ok[r.model][k] += 1
            prompt[r.model][k] += r.prompt_tokens
            output[r.model][k] += r.output_tokens
    observed = grid.observed_s()
    return {
        m: ArrivalCurve.from_counts(
            m,
            grid.window_s,
            count[m],
            observed,
            [p / c if c else 0.0 for p, c in zip(prompt[m], ok[m])],
            [o / c if c else 0.0 for o, c in zip(output[m], ok[m])],
            burst_s,
            slices.busiest(per_slice[m]) if slices is not None else (),
        )
        for m in sorted(count)
    }


class BurstSlices:
    """A grid's windows cut into slices of `burst_s` seconds: which slice a moment falls in, and
    the most arrivals any slice of each window saw. Slices count from the span's start (recent
    grids) or the Unix epoch (daily grids), so each lies inside one window."""

    def __init__(self, grid: WindowGrid, burst_s: float) -> None:
        if not (math.isfinite(burst_s) and 0.001 <= burst_s <= grid.window_s):
            raise ValueError(
                f"burst_s must be between 1 ms and the window ({grid.window_s:g} s), got {burst_s}"
            )
        per_window = grid.window_s / burst_s
        if abs(per_window - round(per_window)) > 1e-9:
            raise ValueError(
                f"burst_s must divide the window: {burst_s:g} s does not divide "
                f"{grid.window_s:g} s (try {grid.window_s / 10:g} or "
                f"{grid.window_s / 5:g})"
            )
        self.grid, self.burst_s = grid, burst_s
        self.origin = 0.0 if grid.daily else grid.start_s
        self.per_window = round(per_window)

    def slice_of(self, t: float) -> int:
        return int((t - self.origin) // self.burst_s)

    def window_of(self, slice_index: int) -> int:
        k = slice_index // self.per_window
        if self.grid.daily:
            return k % self.grid.windows
        return min(k, self.grid.windows - 1)

    def busiest(self, counts: Mapping[int, int]) -> list[int]:
        """Per window, the most arrivals in one of its slices (0: none arrived)."""
        out = [0] * self.grid.windows
        for s, n in counts.items():
            w = self.window_of(s)
            out[w] = max(out[w], n)
        return out


def upcoming(curves: Mapping[str, ArrivalCurve], first: int, count: int) -> dict[str, ArrivalCurve]:
    """The curves cut to the `count` windows from `first` on, wrapping around the period.

    A plan judged over the whole period must hold at every model's busiest window at once, so
    two models share a GPU only if they can at both peaks. A plan judged over the coming windows
    (the one in progress and the ones before the next replan's moves land) lets models whose
    peaks are elsewhere share now and separate before their peaks: the replan loop turns the
    day's windows into moves. Windows are periodic, as a daily grid's are."""
    out = {}
    for model, c in curves.items():
        if not 1 <= count <= c.windows:
            raise ValueError(f"a lookahead needs 1 to {c.windows} windows, got {count}")
        idx = [(first + k) % c.windows for k in range(count)]
        out[model] = ArrivalCurve(
            model,
            c.window_s,
            tuple(c.requests[i] for i in idx),
            tuple(c.rates[i] for i in idx),
            tuple(c.prompt_tokens[i] for i in idx),
            tuple(c.output_tokens[i] for i in idx),
            c.burst_s,
            tuple(c.burst_rates[i] for i in idx) if c.burst_rates else (),
        )
    return out


def _divides_day(window_s: float) -> bool:
    slots = DAY_S / window_s
    return abs(slots - round(slots)) < 1e-9 and round(slots) >= 1
