"""The node's list of route ids it received lately (strata.policy.scheduling.arrivals)."""

from __future__ import annotations

import pytest

from strata.policy.scheduling.arrivals import RouteArrivals


def test_ids_stay_listed_for_the_window_in_arrival_order():
    arrivals = RouteArrivals(window_s=10.0)
    arrivals.received("a", 0.0)
    arrivals.received("", 1.0)  # not routed by a scheduler: nothing to list
    arrivals.received("b", 5.0)
    assert arrivals.recent(10.0) == ("a", "b")
    assert arrivals.recent(10.5) == ("b",)
    assert arrivals.recent(15.5) == ()


def test_the_list_is_bounded():
    arrivals = RouteArrivals(window_s=10.0, limit=3)
    for i in range(5):
        arrivals.received(f"r{i}", float(i))
    assert arrivals.recent(5.0) == ("r2", "r3", "r4")


@pytest.mark.parametrize("window_s, limit", [(0.0, 1), (-1.0, 1), (1.0, 0)])
def test_a_window_or_limit_out_of_range_is_refused(window_s, limit):
    with pytest.raises(ValueError, match="window_s must be positive and limit at least 1"):
        RouteArrivals(window_s=window_s, limit=limit)
