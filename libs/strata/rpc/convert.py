"""Protobuf <-> library types shared by several services (the node manager reports what the
scheduler reads): one pair of converters per type."""

from __future__ import annotations

from strata.policy.registry import TenantLoad
from strata.v1 import common_pb2


def tenant_load_to_pb(t: TenantLoad) -> common_pb2.TenantLoad:
    return common_pb2.TenantLoad(
        tenant=t.tenant, priority=t.priority, running=t.running, queued=t.queued, tokens=t.tokens
    )


def tenant_load_from_pb(t: common_pb2.TenantLoad) -> TenantLoad:
    return TenantLoad(
        tenant=t.tenant,
        priority=t.priority,
        running=t.running,
        queued=t.queued,
        tokens=max(0, t.tokens),
    )
