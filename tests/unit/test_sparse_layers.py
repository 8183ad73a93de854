"""LayerBudgets: each layer measures every option (the budget ladder's levels, then dense) for a
window of calls, runs the one whose median seconds per row was least, and measures the others
again every `refresh` windows; per layer and level, a KV head group that fell back on at least
DENSE_SHARE of a window's rows runs dense outright there, and the level is timed again."""

from __future__ import annotations

import pytest

from strata.engine.sparse.config import SparseConfig
from strata.engine.sparse.layers import DENSE_SHARE, LayerBudgets, ladder

FRACTIONS = (0.125, 0.25, 0.5)


def run(policy: LayerBudgets, layer: int, calls: int, seconds, rows: int = 1) -> list:
    """`calls` calls of one layer; seconds(level) -> what a call at that level took."""
    seen = []
    for _ in range(calls):
        level = policy.choose(layer)
        seen.append(level)
        policy.observe(layer, level, rows, seconds(level))
    return seen


def test_the_ladder_doubles_below_a_whole_context():
    assert ladder(0.125) == (0.125, 0.25, 0.5)
    assert ladder(0.3) == (0.3, 0.6)
    assert ladder(0.6) == (0.6,)
    assert SparseConfig().levels == FRACTIONS
    assert SparseConfig(adaptive=False).levels == (0.125,)
    assert SparseConfig(budget_blocks=64).levels == (0.125,)
    assert SparseConfig().at_level(2).budget_fraction == 0.5
    assert SparseConfig().at_level(0) == SparseConfig()


def test_every_option_is_measured_for_a_window_then_the_cheapest_runs():
    policy = LayerBudgets(2, FRACTIONS, window=3, refresh=1000)
    took = {0: 0.9, 1: 0.4, 2: 0.6, None: 1.0}
    seen = run(policy, 0, 3 * 4 + 10, took.get)
    assert seen == [0] * 3 + [1] * 3 + [2] * 3 + [None] * 3 + [1] * 10
    assert policy.levels() == [1, 0]  # the other layer has not run yet


def test_dense_wins_where_every_level_costs_more():
    policy = LayerBudgets(1, FRACTIONS, window=2, refresh=1000)
    seen = run(policy, 0, 8 + 5, lambda level: 1.0 if level is None else 1.3)
    assert seen[8:] == [None] * 5 and policy.levels() == [None]


def test_the_median_of_a_window_ignores_one_stall():
    policy = LayerBudgets(1, FRACTIONS, window=3, refresh=1000)
    calls = iter([0.2, 9.0, 0.2] + [0.5] * 9)  # level 0 stalls once
    run(policy, 0, 12, lambda level: next(calls))
    assert policy.levels() == [0]


def test_seconds_are_per_row():
    policy = LayerBudgets(1, (0.25, 0.5), window=1, refresh=1000)
    policy.observe(0, 0, 4, 2.0)  # 0.5 s a row
    policy.observe(0, 1, 1, 0.6)
    policy.observe(0, None, 2, 1.4)  # dense: 0.7 s a row
    assert policy.levels() == [0]


def test_other_options_are_measured_again_after_refresh_windows():
    policy = LayerBudgets(1, FRACTIONS, window=1, refresh=3)
    took = {0: 2.0, 1: 1.0, 2: 3.0, None: 4.0}
    assert run(policy, 0, 4, took.get) == [0, 1, 2, None]
    took[0] = 0.5  # the smallest budget would pay now
    seen = run(policy, 0, 3 + 4 + 2, took.get)
    # three windows on level 1, then level 0, 2 and dense again, then the new cheapest
    assert seen == [1, 1, 1, 0, 2, None, 0, 0, 0]


def test_a_call_at_another_option_is_ignored():
    policy = LayerBudgets(1, FRACTIONS, window=1)
    policy.observe(0, 2, 1, 0.1)  # a call laid out before the layer moved
    policy.observe(0, 0, 0, 0.1)  # no sparse rows
    assert policy.levels() == [0]


def test_a_group_that_falls_back_on_most_rows_goes_dense_and_the_level_is_timed_again():
    assert DENSE_SHARE == 0.75
    policy = LayerBudgets(1, FRACTIONS, kv_heads=3, window=2, refresh=1000)
    # level 0, two calls of 4 rows: group 0 fell back on 6 of 8 rows, group 1 on 5, group 2 none
    policy.observe(0, 0, 4, 4.0, [3, 3, 0])
    policy.observe(0, 0, 4, 4.0, [3, 2, 0])
    assert policy.dense_groups(0, 0) == (True, False, False)
    assert policy.dense_groups(0, 1) == (False, False, False)  # other levels learn their own
    assert policy.choose(0) == 0  # the window measured the old choice: level 0 again
    policy.observe(0, 0, 4, 2.0, [0, 1, 0])
    policy.observe(0, 0, 4, 2.0, [0, 3, 0])  # group 1: 4 of 8, below the share
    assert policy.dense_groups(0, 0) == (True, False, False)
    assert policy.choose(0) == 1  # level 0 measured (0.5 s a row): the next option


def test_the_groups_choices_are_forgotten_at_refresh():
    policy = LayerBudgets(1, (0.25,), kv_heads=2, window=1, refresh=2)
    policy.observe(0, 0, 1, 1.0, [1, 0])  # group 0 goes dense; level 0 timed again
    assert policy.dense_groups(0, 0) == (True, False)
    policy.observe(0, 0, 1, 0.5, [0, 0])
    policy.observe(0, None, 1, 2.0)  # dense measured: level 0 runs
    policy.observe(0, 0, 1, 0.5, [0, 0])
    assert policy.dense_groups(0, 0) == (True, False)
    policy.observe(0, 0, 1, 0.5, [0, 0])  # its second window since it was chosen: refresh
    assert policy.dense_groups(0, 0) == (False, False)
    assert policy.choose(0) is None  # dense is measured again


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"fractions": ()}, "in \\(0, 1\\]"),
        ({"fractions": (0.0, 0.5)}, "in \\(0, 1\\]"),
        ({"fractions": (0.5, 0.25)}, "must rise"),
        ({"fractions": FRACTIONS, "window": 0}, "positive"),
        ({"fractions": FRACTIONS, "refresh": 0}, "positive"),
        ({"fractions": FRACTIONS, "kv_heads": 0}, "positive"),
    ],
)
def test_bad_settings_say_what_is_wrong(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LayerBudgets(1, **kwargs)
