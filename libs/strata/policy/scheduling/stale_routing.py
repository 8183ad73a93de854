"""Routing while no scheduler answers: from the gateway's last view of the pool, for a bounded
time, and conservatively (stale-but-safe).

The gateway refreshes a `PoolView` from a scheduler every second or so. When every scheduler is
unreachable it routes new requests itself, from that view, for at most `max_age_s` after the
view was taken:

- only replicas that were READY in the view, of the requested model;
- the least loaded of them, counting the load the view saw plus what this gateway has sent
  there since it began routing alone;
- admission within the tenant's guaranteed share only: at most max(1, floor(share x slots))
  requests of the tenant in flight through stale routing, where slots is the model's READY
  replicas' `max_seqs` summed. No burst share, no SLA estimate: those need the scheduler's
  live picture. The floor of one keeps every tenant served, one request at a time.

Pure: no gRPC; the clock is injected.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from strata.core.blocks import agreed_block_size
from strata.policy.clock import Clock

DEFAULT_SLOTS = 32  # a replica that reports no max_seqs is taken to hold this many
RETRY_AFTER_MS = 1000


@dataclass(frozen=True, slots=True)
class ViewReplica:
    node_id: str
    node_address: str
    replica_id: str
    model: str
    load: int  # running + waiting requests when the view was taken
    slots: int  # sequences one engine step holds (max_seqs)
    block_size: int = 0  # tokens per KV block, as the worker reported (0: not reported)


@dataclass(frozen=True, slots=True)
class StaleRefusal:
    """Why stale routing cannot take a request; `retry_after_ms` when a retry may succeed."""

    reason: str
    retry_after_ms: int | None = None
    unknown_model: bool = False


class StaleRouter:
    def __init__(self, clock: Clock, max_age_s: float = 30.0):
        if not max_age_s >= 0:
            raise ValueError(f"max_age_s must be 0 or more, got {max_age_s}")
        self.clock = clock
        self.max_age_s = max_age_s
        self._replicas: tuple[ViewReplica, ...] = ()
        self._models: tuple[str, ...] = ()
        self._taken_at: float | None = None
        self._tenants: Counter[str] = Counter()
        self._sent: Counter[str] = Counter()  # replica id -> requests in flight from here

    def update(self, replicas: list[ViewReplica], models: list[str]) -> None:
        """A fresh view (READY replicas only) from a scheduler."""
        self._replicas = tuple(replicas)
        self._models = tuple(sorted(set(models)))
        self._taken_at = self.clock.now()

    def age_s(self) -> float | None:
        return None if self._taken_at is None else self.clock.now() - self._taken_at

    def usable(self) -> bool:
        age = self.age_s()
        return age is not None and age <= self.max_age_s

    @property
    def models(self) -> tuple[str, ...]:
        return self._models if self.usable() else ()

    def block_size(self, model: str) -> int:
        """The KV block size the model's replicas report (the majority's, should they
        disagree); the default before any view."""
        return agreed_block_size(r.block_size for r in self._replicas if r.model == model)[0]

    def route(self, model: str, tenant: str, guaranteed_share: float) -> ViewReplica | StaleRefusal:
        """A replica for the request (count it in flight until `done`), or why not."""
        if not self.usable():
            return StaleRefusal(
                "no scheduler answers and the gateway's view of the pool is too old to route from",
                RETRY_AFTER_MS,
            )
        mine = [r for r in self._replicas if r.model == model]
        if not mine:
            if model not in self._models:
                return StaleRefusal(
                    f"model {model!r} is not served by this cluster; known "
                    f"models: {', '.join(self._models) or 'none'}",
                    unknown_model=True,
                )
            return StaleRefusal(f"no ready replica of {model!r}", RETRY_AFTER_MS)
        slots = sum(max(1, r.slots or DEFAULT_SLOTS) for r in mine)
        allowance = max(1, math.floor(max(0.0, guaranteed_share) * slots))
        if self._tenants[tenant] >= allowance:
            return StaleRefusal(
                f"the scheduler is unreachable, and tenant {tenant!r} has its "
                f"guaranteed share ({allowance} requests) in flight",
                RETRY_AFTER_MS,
            )
        best = min(
            mine,
            key=lambda r: (
                (r.load + self._sent[r.replica_id]) / max(1, r.slots or DEFAULT_SLOTS),
                r.replica_id,
            ),
        )
        self._tenants[tenant] += 1
        self._sent[best.replica_id] += 1
        return best

    def done(self, tenant: str, replica: ViewReplica) -> None:
        """A request that `route` placed has ended."""
        self._tenants[tenant] -= 1
        if self._tenants[tenant] <= 0:
            del self._tenants[tenant]
        self._sent[replica.replica_id] -= 1
        if self._sent[replica.replica_id] <= 0:
            del self._sent[replica.replica_id]
