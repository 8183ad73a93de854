"""Leases (strata.policy.lease) on a manual clock: one holder at a time, renewals, expiry,
release, and a restarted table's grace."""

import pytest

from strata.policy.clock import ManualClock
from strata.policy.lease import LeaseTable


def test_one_holder_at_a_time_until_it_expires_or_releases():
    clock = ManualClock()
    table = LeaseTable(clock, grace_s=0.0, max_ttl_s=30.0)
    assert table.acquire("placement", "a", 10.0).granted
    refused = table.acquire("placement", "b", 10.0)
    assert (refused.granted, refused.holder, refused.remaining_s) == (False, "a", 10.0)
    clock.advance(6.0)
    assert table.acquire("placement", "a", 10.0).granted  # a renewal starts the ttl again
    clock.advance(6.0)
    assert not table.acquire("placement", "b", 10.0).granted  # 4 s left of a's renewal
    clock.advance(4.0)
    assert table.acquire("placement", "b", 10.0).granted  # a expired
    table.release("placement", "a")  # not a's any more: nothing happens
    assert not table.acquire("placement", "a", 10.0).granted
    table.release("placement", "b")
    assert table.acquire("placement", "a", 10.0).granted
    # Other names are independent; the ttl is capped.
    assert table.acquire("other", "b", 100.0).remaining_s == 30.0


def test_a_restarted_table_grants_nothing_during_its_grace():
    clock = ManualClock()
    table = LeaseTable(clock, grace_s=20.0, max_ttl_s=20.0)
    refused = table.acquire("placement", "a", 10.0)
    assert (refused.granted, refused.holder, refused.remaining_s) == (False, "", 20.0)
    clock.advance(20.0)
    assert table.acquire("placement", "a", 10.0).granted


def test_bad_requests_are_refused_with_a_reason():
    table = LeaseTable(ManualClock(), grace_s=0.0, max_ttl_s=30.0)
    with pytest.raises(ValueError, match="name and a holder"):
        table.acquire("", "a", 1.0)
    with pytest.raises(ValueError, match="positive"):
        table.acquire("placement", "a", 0.0)
    with pytest.raises(ValueError):
        LeaseTable(ManualClock(), grace_s=-1.0, max_ttl_s=1.0)
