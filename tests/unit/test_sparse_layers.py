"""LayerBudgets: each layer settles on the budget level, or dense attention, that its trust-check
outcomes say costs least; it tries each level once, holds dense for doubling periods, and
measures the other levels again after a while."""

from __future__ import annotations

import pytest

from strata.engine.sparse.config import SparseConfig
from strata.engine.sparse.layers import SCORE_COST, LayerBudgets, ladder

FRACTIONS = (0.125, 0.25, 0.5)


def run(policy: LayerBudgets, layer: int, steps: int, fails_at) -> list[int | None]:
    """`steps` decode steps of one row with 3 KV heads; fails_at(level) -> failing heads."""
    seen = []
    for _ in range(steps):
        level = policy.choose(layer)
        seen.append(level)
        if level is not None:
            policy.observe(layer, level, 3, fails_at(level))
    return seen


def test_the_ladder_doubles_below_a_whole_context():
    assert ladder(0.125) == (0.125, 0.25, 0.5)
    assert ladder(0.3) == (0.3, 0.6)
    assert ladder(0.6) == (0.6,)
    assert SparseConfig().levels == FRACTIONS
    assert SparseConfig(adaptive=False).levels == (0.125,)
    assert SparseConfig(budget_blocks=64).levels == (0.125,)
    assert SparseConfig().at_level(2).budget_fraction == 0.5


def test_a_layer_whose_check_always_holds_stays_at_the_smallest_budget():
    policy = LayerBudgets(2, FRACTIONS, window=6)
    assert set(run(policy, 0, 200, lambda level: 0)) == {0}


def test_a_layer_that_holds_only_at_a_larger_budget_settles_there():
    policy = LayerBudgets(1, FRACTIONS, window=6, refresh=1000)
    seen = run(policy, 0, 100, lambda level: 3 if level == 0 else 0)
    assert seen[:2] == [0, 0]  # one window (6 pairs) at the smallest budget
    assert set(seen[2:]) == {1}  # then 0.25, which costs 0.35 against 1.225
    assert policy.levels() == [1]


def test_a_layer_that_never_holds_tries_every_level_then_runs_dense_for_doubling_periods():
    policy = LayerBudgets(1, FRACTIONS, window=3, hold=4, max_hold=8)
    seen = run(policy, 0, 3 + 4 + 3 + 8 + 3 + 8, lambda level: 3)
    # one window per level, then dense 4 steps; every level again, then dense 8 (the cap)
    assert seen == [0, 1, 2] + [None] * 4 + [0, 1, 2] + [None] * 8 + [0, 1, 2] + [None] * 8


def test_a_level_that_pays_keeps_its_layer_out_of_dense_and_shortens_the_next_hold():
    policy = LayerBudgets(1, FRACTIONS, window=3, hold=4, max_hold=64)
    run(policy, 0, 3 + 4 + 3 + 8, lambda level: 3)  # dense twice: the next hold would be 16
    seen = run(policy, 0, 3, lambda level: 0)
    assert seen == [0, 0, 0] and policy.levels() == [0]
    seen = run(policy, 0, 3 + 4 + 1, lambda level: 3)
    assert seen == [0, 1, 2] + [None] * 4 + [0]  # the hold is back to 4, not 16


def test_partial_failures_are_weighed_by_cost_not_by_pass_rate():
    # a third of the pairs fail at levels 0 and 1: level 0 costs 0.1 + 0.125 + 1/3 = 0.56,
    # level 1 0.1 + 0.25 + 1/3 = 0.68, level 2 untried 0.6: level 0 stays, failures and all
    policy = LayerBudgets(1, FRACTIONS, window=3, refresh=1000)
    seen = run(policy, 0, 60, lambda level: 1 if level < 2 else 0)
    assert seen[:3] == [0, 1, 0]  # level 1 untried (0.35) is tried once, then measured dearer
    assert set(seen[2:]) == {0}
    assert SCORE_COST + 0.125 + 1 / 3 < SCORE_COST + 0.5


def test_other_levels_are_measured_again_after_refresh_windows():
    policy = LayerBudgets(1, FRACTIONS, window=3, refresh=4)
    fails = {0: 3, 1: 0, 2: 0}
    run(policy, 0, 1, lambda level: fails[level])
    assert policy.levels() == [1]
    fails[0] = 0  # the smallest budget would hold now
    seen = run(policy, 0, 4, lambda level: fails[level])
    assert seen == [1, 1, 1, 1]
    assert policy.levels() == [0]  # after 4 windows at level 1, level 0 is tried again


def test_a_stale_observation_is_ignored():
    policy = LayerBudgets(1, FRACTIONS, window=3)
    policy.observe(0, 2, 3, 3)  # a step laid out at a level the layer is not on
    assert policy.levels() == [0]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"fractions": ()}, "in \\(0, 1\\]"),
        ({"fractions": (0.0, 0.5)}, "in \\(0, 1\\]"),
        ({"fractions": (0.5, 0.25)}, "must rise"),
        ({"fractions": FRACTIONS, "window": 0}, "positive"),
        ({"fractions": FRACTIONS, "hold": 8, "max_hold": 4}, "max_hold"),
    ],
)
def test_bad_settings_say_what_is_wrong(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LayerBudgets(1, **kwargs)
