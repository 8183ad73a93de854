"""Arrival curves: exact rates and token means per window, recent and daily grids."""

from __future__ import annotations

import pytest

from strata.policy.placement import ArrivalCurve, RequestRow, WindowGrid, arrival_curves
from strata.policy.placement.curves import upcoming

DAY = 86_400.0


def test_recent_windows_count_rates_and_token_means_exactly():
    grid = WindowGrid.recent(window_s=60, windows=3, end_s=1_000_180.0)  # [1e6, 1e6+180)
    rows = [
        RequestRow("a", 1_000_000.0, 100, 10),
        RequestRow("a", 1_000_059.9, 300, 30),
        RequestRow("a", 1_000_060.0, 50, 5, failed=True),  # counts, but not in the means
        RequestRow("b", 1_000_179.0, 8, 2),
        RequestRow("a", 999_999.0, 1, 1),  # before the span: ignored
        RequestRow("a", 1_000_180.0, 1, 1),  # the end is exclusive
    ]
    curves = arrival_curves(rows, grid)
    assert list(curves) == ["a", "b"]
    a = curves["a"]
    assert a.requests == (2, 1, 0)
    assert a.rates == (2 / 60, 1 / 60, 0.0)
    assert a.prompt_tokens == (200.0, 0.0, 0.0)
    assert a.output_tokens == (20.0, 0.0, 0.0)
    assert curves["b"].requests == (0, 0, 1) and curves["b"].prompt_tokens == (0.0, 0.0, 8.0)
    assert a.peak_rate == 2 / 60 and a.windows == 3


def test_daily_grid_folds_days_by_time_of_day_and_divides_by_seconds_observed():
    # Span: day 0 at 12:00 to day 2 at 00:00, so the morning slot is seen once, the
    # afternoon slot twice.
    grid = WindowGrid(window_s=DAY / 2, start_s=DAY / 2, end_s=2 * DAY, daily=True)
    assert grid.windows == 2
    assert grid.observed_s() == (DAY / 2, DAY)
    rows = [
        RequestRow("m", DAY / 2 + 10, 10, 1),  # day 0 afternoon
        RequestRow("m", DAY + 3600, 20, 2),  # day 1 morning
        RequestRow("m", DAY + DAY / 2 + 1, 30, 3),  # day 1 afternoon
        RequestRow("m", DAY + DAY / 2 + 2, 40, 4),
    ]
    [curve] = arrival_curves(rows, grid).values()
    assert curve.requests == (1, 3)
    assert curve.rates == (1 / (DAY / 2), 3 / DAY)
    assert curve.prompt_tokens == (20.0, (10 + 30 + 40) / 3)


def test_grids_refuse_what_they_cannot_cut():
    with pytest.raises(ValueError, match="does not divide 86400 s"):
        WindowGrid(7000, 0, DAY, daily=True)
    with pytest.raises(ValueError, match="windows must be at least 1, got 0"):
        WindowGrid.recent(60, 0, 100)
    with pytest.raises(ValueError, match="window_s must be a positive number of seconds"):
        WindowGrid.recent(0, 3, 100)


def test_curve_from_aggregated_counts():
    c = ArrivalCurve.from_counts("m", 30, [3, 0], [30.0, 30.0], [12.0, 0.0], [4.0, 0.0])
    assert c.rates == (0.1, 0.0) and c.requests == (3, 0) and c.output_tokens == (4.0, 0.0)
    with pytest.raises(ValueError, match="one entry per window"):
        ArrivalCurve.from_counts("m", 30, [1], [30.0, 30.0], [1.0], [1.0])


def test_upcoming_cuts_the_coming_windows_and_wraps_around_the_period():
    c = ArrivalCurve.from_counts(
        "a", 60.0, [6, 12, 18, 24], [60.0] * 4, [10, 20, 30, 40], [1, 2, 3, 4]
    )
    [cut] = upcoming({"a": c}, 3, 2).values()
    assert (cut.model, cut.window_s, cut.requests, cut.rates) == ("a", 60.0, (24, 6), (0.4, 0.1))
    assert (cut.prompt_tokens, cut.output_tokens) == ((40.0, 10.0), (4.0, 1.0))
    assert upcoming({"a": c}, 5, 4)["a"].rates == (0.2, 0.3, 0.4, 0.1)
    with pytest.raises(ValueError, match="a lookahead needs 1 to 4 windows, got 5"):
        upcoming({"a": c}, 0, 5)


def test_burst_slices_keep_each_windows_busiest_slice():
    grid = WindowGrid.recent(window_s=60, windows=2, end_s=1_000_120.0)
    rows = (
        [RequestRow("a", 1_000_000.0 + i, 10, 1) for i in range(3)]  # slice 0: 3
        + [RequestRow("a", 1_000_045.0 + i / 10, 10, 1) for i in range(5)]  # slice 3: 5
        + [RequestRow("a", 1_000_075.0, 10, 1, failed=True)]
    )  # slice 5: 1
    [a] = arrival_curves(rows, grid, burst_s=15).values()
    assert a.requests == (8, 1)
    assert (a.burst_s, a.burst_rates) == (15, (5 / 15, 1 / 15))
    assert upcoming({"a": a}, 1, 2)["a"].burst_rates == (1 / 15, 5 / 15)
    # Without burst_s the curve measures no slices and provisions for the window's mean.
    [plain] = arrival_curves(rows, grid).values()
    assert plain.burst_rates == () and plain.provision_rate(0) == 8 / 60


def test_daily_burst_slices_take_the_busiest_over_every_day():
    grid = WindowGrid(window_s=DAY / 2, start_s=0.0, end_s=2 * DAY, daily=True)
    rows = (
        [RequestRow("m", 100.0 + i, 1, 1) for i in range(4)]  # day 0: 4
        + [RequestRow("m", DAY + 200.0 + i, 1, 1) for i in range(6)]
    )  # day 1: 6
    [m] = arrival_curves(rows, grid, burst_s=3600).values()
    assert m.burst_rates == (6 / 3600, 0.0)


def test_provision_rate_discounts_chance_and_never_goes_below_the_mean():
    # 900 arrivals in one 30 s slice of a window averaging 10/s: a burst, counted at its lower
    # 99% bound (900 - 2.326 * 30) / 30; 340 in the busiest slice of a steady 10/s window is
    # within chance, so the mean stands.
    c = ArrivalCurve.from_counts(
        "m",
        300,
        [6000, 3000],
        [300.0, 300.0],
        [1, 1],
        [1, 1],
        burst_s=30,
        burst_requests=[900, 340],
    )
    assert c.provision_rate(0) == pytest.approx((900 - 2.326 * 30) / 30)
    assert c.provision_rate(1) == 10.0
    with pytest.raises(ValueError, match="burst counts need one entry per window"):
        ArrivalCurve.from_counts(
            "m", 300, [1, 1], [300.0] * 2, [1, 1], [1, 1], burst_s=30, burst_requests=[1]
        )


def test_burst_slices_must_divide_the_window():
    grid = WindowGrid.recent(150, 2, 300)
    with pytest.raises(ValueError, match="20 s does not divide 150 s"):
        arrival_curves([], grid, burst_s=20)
    with pytest.raises(ValueError, match="burst_s must be between 1 ms and the window"):
        arrival_curves([], grid, burst_s=300)
    with pytest.raises(ValueError, match="burst_s must be between 1 ms and the window"):
        arrival_curves([], grid, burst_s=0.0005)
