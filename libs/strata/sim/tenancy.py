"""Multi-tenant scheduling in the simulator: the same policy objects as the services.

    arrival --GlobalScheduler.route (admission, margin- and interference-aware routing, SLA
            check)-->
            refusal: the client retries after the hint (until give_up_s), as a tenant SDK would
            decision: the node's front
    node front (the node manager's dispatcher): a NodeQueue (fair_queue.FairQueue or the fcfs
            baseline) in front of each replica's slots; a request enters its replica's engine
            when the replica holds fewer than max_seqs of the node's requests and it fits the
            running requests' TPOT targets (strata.policy.scheduling.slots), or past the cap
            when it became urgent (its class's TTFT target at risk), or at once when its class
            has a TTFT target and the lower request is best effort, and its replica runs a
            lower class with fewer of its own class or above than slots (the dispatcher's rule,
            strata.node.dispatcher), with its class priority: the engine's scheduler then
            preempts a lower class for it

What the simulator does not model: interference between co-located work beyond the engine's own
batching (the profiles are solo measurements), so node safety margins stay at their floor (0).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from strata.core.step_model import StepLine
from strata.core.tenant_policy import TenantPolicy
from strata.policy.clock import Clock
from strata.policy.registry import TenantLoad
from strata.policy.scheduling.arrivals import RouteArrivals
from strata.policy.scheduling.delays import ClassDelays, FirstTokens
from strata.policy.scheduling.fair_queue import QUEUES, NodeQueue, QueueItem, displacers
from strata.policy.scheduling.global_scheduler import SchedulerSettings
from strata.policy.scheduling.slots import EngineSlots

GIVE_UP_S = 120.0  # a refused client's default patience


@dataclass(slots=True, frozen=True)
class Tenancy:
    settings: SchedulerSettings = SchedulerSettings()
    policies: Mapping[str, TenantPolicy] = field(default_factory=dict)
    queue: str = "wfq"  # the nodes' queues: wfq | fcfs
    retry: bool = True  # a refused client retries after the hint
    give_up_s: float = GIVE_UP_S  # ... until this long after its first attempt
    sample_size: int = 64
    tie_tolerance: float = 0.1
    interference_weight: float = 1.0

    def __post_init__(self) -> None:
        if self.queue not in QUEUES:
            raise ValueError(f"queue must be one of {', '.join(QUEUES)}, got {self.queue!r}")
        if self.give_up_s < 0:
            raise ValueError(f"give_up_s must be >= 0, got {self.give_up_s}")

    def policy(self, tenant: str) -> TenantPolicy:
        known = self.policies.get(tenant)
        return known if known is not None else TenantPolicy(tenant)


P = TypeVar("P")  # what the caller keeps with a queued request (NodeFront's payload)
Limits = tuple[int | None, StepLine | None]  # a replica's max_seqs and step line


@dataclass(slots=True)
class _Running:
    priority: int
    running: int = 0
    tokens: int = 0
    best_effort: int = 0  # of running, requests with no TTFT target


class NodeFront(Generic[P]):
    """One node's queue for its replicas' slots, and what each tenant has there. The slots are
    the dispatcher's own rule (strata.policy.scheduling.slots): the cap and the TPOT check."""

    def __init__(self, queue: NodeQueue, clock: Clock) -> None:
        self.queue = queue
        self.clock = clock
        self.slots = EngineSlots()
        self.first_tokens = FirstTokens()
        self.arrivals = RouteArrivals()  # route ids received lately, for the heartbeats
        self.payloads: dict[str, P] = {}  # request id -> the caller's payload
        self._running: dict[str, _Running] = {}

    @classmethod
    def build(cls, kind: str, clock: Clock) -> NodeFront[P]:
        return cls(QUEUES[kind](clock), clock)

    def push(self, item: QueueItem, payload: P) -> None:
        priority = self._class(item)
        ahead = self._queued_for(item.replica_id, priority) + self.first_tokens.waiting(
            item.replica_id, priority
        )
        self.first_tokens.arrived(item.request_id, ahead, priority)
        self.queue.push(item)
        self.payloads[item.request_id] = payload

    def ready(self, limits: Callable[[str], Limits | None]) -> list[tuple[QueueItem, P]]:
        """Requests to hand to their engines now, in order: those whose replica has room,
        then the urgent ones (beyond the cap). `limits(replica_id)` is the replica's max_seqs
        and step line, None for a replica that is gone: its requests come back too (the caller
        fails them)."""
        out = []

        def accept(item: QueueItem) -> bool:
            known = limits(item.replica_id)
            return known is None or self.slots.has_room(item.replica_id, *known, item)

        while (item := self.queue.pop_next(accept)) is not None:
            self._enter(item)
            out.append((item, self.payloads.pop(item.request_id)))
        for item, urgent in displacers(self.queue):
            known = limits(item.replica_id)
            cap = known[0] if known is not None else None
            if cap is not None and not self.slots.displaceable(
                item.replica_id, item, cap, best_effort_only=not urgent
            ):
                continue
            self.queue.remove(item.request_id)
            self._enter(item)
            out.append((item, self.payloads.pop(item.request_id)))
        return out

    def _enter(self, item: QueueItem) -> None:
        self.slots.enter(item.replica_id, item, self.clock.now())
        self.first_tokens.dispatched(item.replica_id, item.request_id)
        run = self._running.get(item.tenant)
        if run is None:
            run = self._running[item.tenant] = _Running(item.priority)
        run.priority = max(run.priority, item.priority)
        run.running += 1
        run.tokens += item.cost_tokens
        run.best_effort += item.ttft_ms is None

    def left_engine(self, replica_id: str, request_id: str) -> None:
        """A request the front handed over finished (or failed) in its engine."""
        item = self.slots.leave(replica_id, request_id, self.clock.now())
        self.first_tokens.released(replica_id, request_id)
        if item is None:
            return
        run = self._running[item.tenant]
        run.running -= 1
        run.tokens -= item.cost_tokens
        run.best_effort -= item.ttft_ms is None
        if run.running == 0:
            del self._running[item.tenant]

    def first_token(self, replica_id: str, request_id: str, own_s: float, at: float) -> None:
        """A request the front handed over got its first token at `at`; `own_s` is its own
        prefill's price (strata.policy.scheduling.delays)."""
        item = next(
            (i for i in self.slots.running_on(replica_id) if i.request_id == request_id), None
        )
        if item is not None:
            self.first_tokens.first_token(replica_id, request_id, at - item.enqueued_s, own_s, at)

    def class_delays(self, replica_id: str) -> ClassDelays:
        """The first-token delay a request of each class arriving now would see on the
        replica, as the node manager's dispatcher reports it."""
        return self.first_tokens.class_delays(
            replica_id, self.clock.now(), lambda p: self._queued_for(replica_id, p)
        )

    def _class(self, item: QueueItem) -> int:
        return item.priority if self.queue.classes else 0

    def _queued_for(self, replica_id: str, priority: int = 0) -> int:
        """Queued for the replica, of class `priority` or above (what such a request waits
        behind)."""
        return sum(
            1
            for item in self.queue
            if item.replica_id == replica_id and self._class(item) >= priority
        )

    def drain(self) -> list[P]:
        """Everything still queued (the run's horizon): their payloads."""
        out = []
        for item in list(self.queue):
            self.queue.remove(item.request_id)
            self.first_tokens.left(item.request_id)
            out.append(self.payloads.pop(item.request_id))
        return out

    def loads(self) -> tuple[TenantLoad, ...]:
        queued = self.queue.loads()
        out = []
        for tenant in sorted(set(queued) | set(self._running)):
            q, r = queued.get(tenant), self._running.get(tenant)
            out.append(
                TenantLoad(
                    tenant,
                    max(q.priority if q else 0, r.priority if r else 0),
                    r.running if r else 0,
                    q.queued if q else 0,
                    (q.tokens if q else 0) + (r.tokens if r else 0),
                    r.best_effort if r else 0,
                )
            )
        return tuple(out)
