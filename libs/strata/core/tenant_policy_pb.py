"""The one pair of converters between TenantPolicy and strata.v1.TenantPolicy, used by the
gateway (to send) and by the scheduler and node managers (to read). A request that names no
class (a caller other than the gateway) gets the default class, with that class's targets and
priority."""

from __future__ import annotations

from strata.core.tenant_policy import DEFAULT_SLA, TenantPolicy
from strata.v1 import common_pb2


def policy_to_pb(p: TenantPolicy) -> common_pb2.TenantPolicy:
    return common_pb2.TenantPolicy(
        tenant=p.tenant,
        sla_class=p.sla_class,
        priority=p.priority,
        ttft_ms=p.ttft_ms or 0.0,
        tpot_ms=p.tpot_ms or 0.0,
        weight=p.weight,
        guaranteed_share=p.guaranteed_share,
        burst_share=p.burst_share,
    )


def policy_from_pb(p: common_pb2.TenantPolicy, tenant: str = "", priority: int = 0) -> TenantPolicy:
    """The request's policy. `tenant` (the request's own tenant field) wins over the policy's.
    Unset fields read as their defaults (weight 1, no guarantee, burst share 1); a policy that
    names no class is the default class's, its targets included, at `priority` when the
    request carries one. Raises ValueError naming a field out of range."""
    who = tenant or p.tenant
    if not p.sla_class:
        return (
            TenantPolicy.for_class(who, DEFAULT_SLA)
            if not priority
            else TenantPolicy(
                who, DEFAULT_SLA.name, priority, DEFAULT_SLA.ttft_ms, DEFAULT_SLA.tpot_ms
            )
        )
    return TenantPolicy(
        tenant=who,
        sla_class=p.sla_class,
        priority=p.priority,
        ttft_ms=p.ttft_ms or None,
        tpot_ms=p.tpot_ms or None,
        weight=p.weight or 1.0,
        guaranteed_share=p.guaranteed_share,
        burst_share=p.burst_share or 1.0,
    )
