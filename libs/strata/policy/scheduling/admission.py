"""Level-1 admission: whether the pool takes a tenant's request now, or answers "retry later".

Two quota rules, read from the pool ledger. Work is reserved tokens (prompt + max_tokens of every
request admitted and not finished); the pool admits up to W = C x oversubscription of it, C
being the pool's capacity (what its KV pools hold or its engines compute in the ledger's
horizon, whichever is less; strata.policy.scheduling.ledger), and shares are shares of W:

    burst       the tenant would hold more than burst_share x W: refused, unless it holds
                nothing (a single request larger than the share must still be servable);
                a burst share of 1 is no limit (what one tenant alone queues, queues)
    pool full   the pool's reserved work would pass its class's limit, the tenant is above
                its guaranteed_share x W, and another tenant holding work is within its own
                guarantee: refused. A tenant within its guarantee is always admitted;
                borrowers make room for it when the pool is full. With nobody to protect (one
                tenant alone, or only borrowers), work queues on the nodes instead. The
                limit is W x (1 - margin) for the top class and
                `class_step` of that less for each class below it (0.2: interactive 100%,
                standard 80%, batch 60%; how the step was chosen: docs/design/scheduling.md),
                so as the pool fills, the lowest class is turned
                away first and a burst of a higher class takes the room best-effort work
                leaves, instead of the room the other tenants' guarantees need.

`margin` is the mean of the nodes' interference safety margins: while nodes run slower than
their solo profiles, the pool admits that much less. `oversubscription` lets work queue on the
nodes up to that multiple of what their KV pools hold at once (2 = one pool running, one
waiting), so admission refuses before queues grow without bound, not before the first queue.

The third rule, SLA feasibility (no replica can meet the class's TTFT target now), needs the
routing estimate and is applied by the global scheduler after it routes.

A refusal carries a retry-after hint: the time the pool needs to drain the excess at the
tenant's share of the pool's measured throughput, clamped to [0.5 s, 30 s].
"""

from __future__ import annotations

from dataclasses import dataclass

from strata.core.tenant_policy import TenantPolicy
from strata.policy.scheduling.ledger import PoolLedger

# A refused client comes back no sooner than this: with shorter hints, refused clients retry many
# times a second each and saturate the gateway, slowing every tenant (docs/design/scheduling.md).
MIN_RETRY_S = 0.5
MAX_RETRY_S = 30.0
UNKNOWN_RATE_RETRY_S = 1.0


@dataclass(slots=True, frozen=True)
class TtftEstimate:
    """Why an SLA refusal judged as it did, in ms, on the replica the router chose:
    estimate = max(slot_wait + ahead + own_prefill, observed), refused when over
    max(allowed, solo)."""

    node_id: str
    slot_wait_ms: float  # until the engine takes it (strata.policy.scheduling.slo.slot_wait_s)
    ahead_ms: float  # the prompts queued ahead, at the replica's measured token rate
    own_prefill_ms: float  # its own prefill beside the decodes its engine runs
    observed_ms: float  # the replica's latest requests' delay plus its own prefill (0: none)
    solo_ms: float  # its own prefill alone on the replica
    allowed_ms: float  # what admission allows: the class's target times the slack
    held_seqs: int  # requests the replica holds, its slots and those routed there since
    queued_ahead: int  # requests its node queues of this class or above
    # what the replica's decodes lend own_prefill's first chunk beyond one gap (0: none)
    lent_ms: float = 0.0

    @property
    def estimate_ms(self) -> float:
        return max(self.slot_wait_ms + self.ahead_ms + self.own_prefill_ms, self.observed_ms)


@dataclass(slots=True, frozen=True)
class Refusal:
    reason: str  # burst | pool_full | sla
    message: str  # a sentence the caller can act on
    retry_after_s: float
    estimate: TtftEstimate | None = None  # an SLA refusal's terms (None: other reasons)


@dataclass(slots=True, frozen=True)
class AdmissionSettings:
    oversubscription: float = 1.0
    horizon_s: float = 5.0  # the pool's capacity: what it computes in this long
    use_margin: bool = True
    class_step: float = 0.2  # each class below the top is refused this much earlier
    top_priority: int = 2

    def __post_init__(self) -> None:
        if not self.oversubscription >= 1.0:
            raise ValueError(f"oversubscription must be at least 1, got {self.oversubscription}")
        if not self.horizon_s > 0:
            raise ValueError(f"horizon_s must be positive, got {self.horizon_s}")
        if not 0.0 <= self.class_step < 0.5:
            raise ValueError(f"class_step must be in [0, 0.5), got {self.class_step}")


def retry_after(excess_tokens: float, drain_tokens_per_s: float) -> float:
    if drain_tokens_per_s <= 0:
        return UNKNOWN_RATE_RETRY_S
    return min(MAX_RETRY_S, max(MIN_RETRY_S, excess_tokens / drain_tokens_per_s))


def admit(
    policy: TenantPolicy,
    work_tokens: int,
    ledger: PoolLedger,
    settings: AdmissionSettings = AdmissionSettings(),
) -> Refusal | None:
    """None to admit, or why not. `work_tokens` = the request's prompt + max_tokens."""
    capacity = ledger.capacity_tokens
    if capacity <= 0:
        return None  # no replica has reported its pool yet: nothing to divide
    held = max(0, ledger.tenant_tokens.get(policy.tenant, 0))
    after = held + work_tokens
    admitted = capacity * settings.oversubscription
    share_rate = ledger.tokens_per_s * max(policy.burst_share, 1e-3)
    burst_cap = policy.burst_share * admitted
    if policy.burst_share < 1.0 and held > 0 and after > burst_cap:
        return Refusal(
            "burst",
            f"tenant {policy.tenant!r} holds {held} tokens of work, and this request's "
            f"{work_tokens} would pass its burst share ({policy.burst_share:.0%} of the "
            f"{admitted:.0f} the pool admits); retry when some of its requests have finished",
            retry_after(after - burst_cap, share_rate),
        )
    margin = ledger.mean_margin() if settings.use_margin else 0.0
    below_top = max(0, settings.top_priority - policy.priority)
    limit = admitted * (1.0 - min(0.9, margin)) * max(0.1, 1.0 - settings.class_step * below_top)
    used = ledger.used_tokens()
    guaranteed = policy.guaranteed_share * admitted
    ledger.guarantees[policy.tenant] = policy.guaranteed_share
    if (
        used > 0
        and used + work_tokens > limit
        and after > guaranteed
        and ledger.protected_other(policy.tenant, admitted)
    ):
        return Refusal(
            "pool_full",
            f"the pool is full ({used} of {limit:.0f} work tokens reserved, "
            f"{margin:.0%} held back for interference) and tenant {policy.tenant!r} is above "
            f"its guaranteed share ({policy.guaranteed_share:.0%}); retry shortly",
            retry_after(used + work_tokens - limit, ledger.tokens_per_s),
        )
    return None
