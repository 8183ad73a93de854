"""Which KV blocks deserve the faster tier: a pluggable priority with one method.

The KV tier store keeps a heat record per block (recency, decayed access frequency, live
references) and asks a policy for one number, `priority(heat, now)`: the migrator demotes the
lowest-priority host blocks first when host memory runs high, and the store keeps the highest in
the faster tier. The shape follows SGLang's eviction strategies (one priority function, the
caller orders by it), so an operator can swap LRU for a frequency-aware policy by name.
Pure: no I/O, the caller passes `now` from its injected clock.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Protocol


@dataclass(slots=True)
class BlockHeat:
    last_access: float
    frequency: float = 0.0  # accesses, decayed to `last_access`
    live_refs: int = 0  # live requests that will read the block (prefetched, not yet read)

    def decayed(self, now: float, half_life_s: float) -> float:
        return self.frequency * math.exp2(-max(0.0, now - self.last_access) / half_life_s)


class TierPolicy(Protocol):
    name: str

    def priority(self, heat: BlockHeat, now: float) -> float:
        """Higher keeps the block in the faster tier; the lowest is demoted first."""
        ...


# A block a live request is about to read outranks any amount of past popularity.
LIVE_REF_WEIGHT = 1e9


@dataclass(slots=True)
class LRUPolicy:
    name: str = "lru"

    def priority(self, heat: BlockHeat, now: float) -> float:
        return heat.live_refs * LIVE_REF_WEIGHT + heat.last_access


@dataclass(slots=True)
class HeatPolicy:
    """Decayed frequency, with recency as the tie-break: a shared system prompt read by every
    request outranks a long document read once, even if the document was read a moment later."""

    half_life_s: float = 60.0
    name: str = "heat"

    def priority(self, heat: BlockHeat, now: float) -> float:
        recency = 1.0 / (1.0 + max(0.0, now - heat.last_access))  # in (0, 1]
        return heat.live_refs * LIVE_REF_WEIGHT + heat.decayed(now, self.half_life_s) + recency


class TierPolicyName(enum.StrEnum):
    HEAT = "heat"  # decayed access frequency, recency as the tie-break
    LRU = "lru"


# By name: a TierPolicyName is the str it names, so a plain str finds its policy too.
POLICIES: dict[str, type[TierPolicy]] = {
    TierPolicyName.LRU: LRUPolicy,
    TierPolicyName.HEAT: HeatPolicy,
}


def make_policy(name: str) -> TierPolicy:
    try:
        return POLICIES[name]()
    except KeyError:
        raise ValueError(
            f"unknown KV tier policy {name!r}; known: {', '.join(sorted(POLICIES))}"
        ) from None
