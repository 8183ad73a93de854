"""Percentiles: linear interpolation between closest ranks, numpy's default rule."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strata.core.stats import Summary, percentile, percentiles, summarize


def test_ranks_that_land_on_samples_return_them():
    values = [float(v) for v in range(0, 1010, 10)]  # 101 samples: rank q lands on values[q]
    assert percentiles(values, [0, 50, 95, 99, 100]) == [0.0, 500.0, 950.0, 990.0, 1000.0]


def test_between_ranks_interpolates_linearly():
    values = [40.0, 10.0, 30.0, 20.0]  # order does not matter
    assert percentile(values, 50) == 25.0  # rank 1.5: halfway between 20 and 30
    assert percentile(values, 95) == pytest.approx(38.5, abs=1e-12)  # rank 2.85
    assert percentile(values, 99) == pytest.approx(39.7, abs=1e-12)  # rank 2.97
    assert percentile(values, 25) == 17.5  # rank 0.75


def test_single_sample_is_every_percentile():
    assert summarize([7.0]) == Summary(p50=7.0, p95=7.0, p99=7.0, mean=7.0, count=1)


def test_summary_of_one_to_ten():
    s = summarize([float(v) for v in range(1, 11)])
    assert s.p50 == 5.5
    assert s.p95 == pytest.approx(9.55, abs=1e-12)
    assert s.p99 == pytest.approx(9.91, abs=1e-12)
    assert s.mean == 5.5
    assert s.count == 10


def test_no_samples_is_no_summary():
    assert summarize([]) is None
    with pytest.raises(ValueError, match="empty"):
        percentile([], 50)


def test_rejects_percentile_out_of_range_and_non_finite_samples():
    with pytest.raises(ValueError, match="between 0 and 100, got 101"):
        percentile([1.0], 101)
    with pytest.raises(ValueError, match="finite"):
        percentile([1.0, float("nan")], 50)


@settings(max_examples=400, deadline=None)
@given(
    values=st.lists(
        st.floats(min_value=-1e9, max_value=1e9, allow_nan=False), min_size=1, max_size=300
    ),
    qs=st.lists(st.floats(min_value=0.0, max_value=100.0), min_size=1, max_size=4),
)
def test_equals_numpy_to_the_bit(values, qs):
    """The small-sample Python path and numpy's linear method give the same floats."""
    assert percentiles(values, qs) == [
        float(v) for v in np.percentile(np.asarray(values, dtype=np.float64), qs, method="linear")
    ]
