"""A tenant's scheduling policy: its SLA class (targets, priority) and its shares of the pool.

    weight            token-weighted fair share on a node: with two backlogged tenants of weights
                      1 and 3, the second gets 3 of every 4 tokens of service
    guaranteed_share  fraction of the pool's KV-token capacity the tenant is always admitted to
    burst_share       the most of the pool it may hold when others leave room; above it its
                      requests are refused (RESOURCE_EXHAUSTED with a retry-after hint)

The gateway reads the policy from the tenant table and sends it with each request (Route and
Submit carry strata.v1.TenantPolicy), so the scheduler and node managers need no database and a
change made through the admin API holds at the next request. The one pair of protobuf
converters every service uses is in strata.core.tenant_policy_pb (kept apart so that pure
policies import this module without protobuf).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from strata.core.sla import DEFAULT_CLASS, SlaClass, SlaTable

DEFAULT_SLA = SlaTable().lookup(DEFAULT_CLASS)


@dataclass(slots=True, frozen=True)
class TenantPolicy:
    tenant: str
    sla_class: str = DEFAULT_CLASS
    priority: int = 1
    ttft_ms: float | None = None  # the class's P99 targets; None = not judged
    tpot_ms: float | None = None
    weight: float = 1.0
    guaranteed_share: float = 0.0
    burst_share: float = 1.0

    def __post_init__(self) -> None:
        problem = policy_problem(self.weight, self.guaranteed_share, self.burst_share)
        if problem is not None:
            raise ValueError(f"tenant {self.tenant!r}: {problem}")

    @classmethod
    def for_class(
        cls,
        tenant: str,
        sla: SlaClass,
        weight: float = 1.0,
        guaranteed_share: float = 0.0,
        burst_share: float = 1.0,
    ) -> TenantPolicy:
        return cls(
            tenant,
            sla.name,
            sla.priority,
            sla.ttft_ms,
            sla.tpot_ms,
            weight,
            guaranteed_share,
            burst_share,
        )

    @property
    def best_effort(self) -> bool:
        return self.ttft_ms is None and self.tpot_ms is None


def policy_problem(weight: float, guaranteed_share: float, burst_share: float) -> str | None:
    """Why these shares are not a valid policy (a sentence naming the field), or None."""
    if not (math.isfinite(weight) and weight > 0):
        return f"weight must be a positive number, got {weight}"
    if not 0.0 <= guaranteed_share <= 1.0:
        return f"guaranteed_share must be between 0 and 1, got {guaranteed_share}"
    if not guaranteed_share <= burst_share <= 1.0:
        return (
            f"burst_share must be between guaranteed_share ({guaranteed_share}) and 1, "
            f"got {burst_share}"
        )
    return None
