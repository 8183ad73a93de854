"""The prompt tokens still queued on a replica between its reports
(strata.policy.scheduling.backlog)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strata.policy.scheduling.backlog import backlog_tokens


def test_the_report_drains_at_the_rate_until_empty():
    assert backlog_tokens(900, 10.0, (), 1000.0, 10.0) == 900  # fresh: as reported
    assert backlog_tokens(900, 10.0, (), 1000.0, 10.4) == pytest.approx(500)
    assert backlog_tokens(900, 10.0, (), 1000.0, 11.5) == 0  # worked off, never negative


def test_a_routed_prompt_joins_when_routed_and_an_idle_replica_saves_no_credit():
    # 100 reported at t=0 are gone by t=0.1; the replica idles until a 300-token prompt is
    # routed at t=0.5 (no credit for the idle time), then drains it from then on.
    assert backlog_tokens(100, 0.0, [(0.5, 300)], 1000.0, 0.6) == pytest.approx(200)
    # Two prompts routed 0.1 s apart onto an empty queue: the first is half done when the
    # second joins.
    assert backlog_tokens(0, 0.0, [(0.3, 100), (0.2, 200)], 1000.0, 0.3) == pytest.approx(200)
    # A route taken before the report that the report does not include counts from it.
    assert backlog_tokens(0, 1.0, [(0.8, 400)], 1000.0, 1.1) == pytest.approx(300)


def test_without_a_rate_everything_stays_queued():
    assert backlog_tokens(900, 0.0, [(0.5, 100)], 0.0, 9.0) == 1000


arrivals = st.lists(
    st.tuples(st.floats(0.0, 5.0, allow_nan=False), st.integers(0, 5000)), max_size=12
)


@given(
    st.integers(0, 10_000),
    arrivals,
    st.floats(0.0, 1e5, allow_nan=False),
    st.floats(0.0, 5.0, allow_nan=False),
    st.floats(0.0, 5.0, allow_nan=False),
)
def test_bounded_by_the_raw_sum_and_falling_with_time(queued, routed, rate, now, later):
    raw = queued + sum(tokens for _, tokens in routed)
    late = max(now, later) + 5.0  # past every arrival
    left = backlog_tokens(queued, 0.0, routed, rate, late)
    assert 0.0 <= left <= raw
    assert backlog_tokens(queued, 0.0, routed, rate, late + 1.0) <= left
    # A replica that computes no faster leaves no less queued.
    assert backlog_tokens(queued, 0.0, routed, rate / 2, late) >= left - 1e-6
