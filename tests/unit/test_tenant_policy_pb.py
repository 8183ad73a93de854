"""The one pair of TenantPolicy converters: a round trip keeps every field, and a request that
names no class reads as the default class (its targets and priority) on the scheduler and on
the node alike; before the converters were shared, the scheduler read priority 1 and no
targets, the node the default class's targets."""

import pytest

from strata.core.sla import DEFAULT_CLASS, SlaTable
from strata.core.tenant_policy import TenantPolicy
from strata.core.tenant_policy_pb import policy_from_pb, policy_to_pb
from strata.v1 import common_pb2

STANDARD = SlaTable().lookup(DEFAULT_CLASS)


def test_a_round_trip_keeps_every_field():
    policy = TenantPolicy("acme", "interactive", 2, 500.0, 100.0, 3.0, 0.25, 0.5)
    assert policy_from_pb(policy_to_pb(policy)) == policy
    best_effort = TenantPolicy("acme", "batch", 0, None, None)
    assert policy_from_pb(policy_to_pb(best_effort)) == best_effort


def test_no_class_reads_as_the_default_class_everywhere():
    empty = common_pb2.TenantPolicy()
    expected = TenantPolicy.for_class("acme", STANDARD)
    # How the scheduler's Route reads it, and how the node's Submit reads it.
    assert policy_from_pb(empty, "acme") == expected
    assert policy_from_pb(empty, "acme", 0) == expected
    assert (expected.ttft_ms, expected.tpot_ms, expected.priority) == (
        STANDARD.ttft_ms,
        STANDARD.tpot_ms,
        STANDARD.priority,
    )
    # A priority the request carries wins; the targets stay the default class's.
    raised = policy_from_pb(empty, "acme", 5)
    assert (raised.priority, raised.ttft_ms, raised.tpot_ms) == (
        5,
        STANDARD.ttft_ms,
        STANDARD.tpot_ms,
    )


def test_the_request_tenant_wins_and_bad_shares_are_refused():
    assert (
        policy_from_pb(common_pb2.TenantPolicy(tenant="x", sla_class="batch"), "acme").tenant
        == "acme"
    )
    with pytest.raises(ValueError, match="burst_share must be between"):
        policy_from_pb(
            common_pb2.TenantPolicy(sla_class="batch", guaranteed_share=0.5, burst_share=0.25),
            "acme",
        )
