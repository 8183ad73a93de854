"""The node manager's time slots: which waiting request goes to which decode worker, and when.

A worker takes at most its engine's max_seqs requests at once (from its stats), and only as
many as keep the running requests within their TPOT targets, priced with the worker's step line
learned online (strata.policy.scheduling.slots and slo); more would only wait inside the engine,
where the node's tenant policy cannot reach them, and slow every step. A request beyond that
waits in the node's queue (strata.policy.scheduling.fair_queue: strict priority across SLA
classes, token-weighted fairness among tenants) until its replica has a slot, or, when the route
named none (or the named one stopped taking requests), until any ready replica of the model has
one. A waiting request whose class would miss its TTFT target if it waited longer (the queue's
urgent()) goes to the worker beyond the cap, with its priority, when that worker runs a request
of a lower class: the engine then preempts the lower one (its blocks stay in the prefix cache)
to admit it. A request of a class with a TTFT target does so at once where the lower request
is best effort: best effort may queue, and never slows a class.

    Submit -> acquire(item) --slot free--> Lease (replica, priority) -> Generate ... -> release
                    |                                                                   |
                    +--waits in the queue <--pump: on push, on release, every tick_s <--+

A caller that goes away while waiting leaves the queue at once. Pumps run on the event loop
thread, between awaits, so the bookkeeping needs no lock.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from strata.core.blocks import DEFAULT_BLOCK_SIZE
from strata.node.replicas import Replica, ReplicaSet, State
from strata.policy.clock import Clock
from strata.policy.registry import TenantLoad
from strata.policy.scheduling.arrivals import RouteArrivals
from strata.policy.scheduling.delays import ClassDelays, FirstTokens
from strata.policy.scheduling.fair_queue import (
    URGENT_FRACTION,
    NodeQueue,
    QueueItem,
    displacers,
)
from strata.policy.scheduling.slo import line_prefill_rate, solo_prefill_s
from strata.policy.scheduling.slots import EngineSlots

TICK_S = 0.05  # how often a non-empty queue is looked at again (urgency, new replicas)
MIN_RATE_BUSY_S = 0.05  # busy seconds a tokens-per-second window needs before it counts


class NoReplica(Exception):
    """The model has no replica on this node that takes requests any more."""


@dataclass(slots=True)
class Lease:
    """A dispatched request: the replica it went to and the priority the worker is told."""

    item: QueueItem
    replica: Replica
    priority: int
    queued_s: float  # time spent in the node's queue
    beyond_cap: bool  # sent past the worker's slots so its engine preempts a lower class


@dataclass(slots=True)
class _Rate:
    tokens: int
    busy_s: float
    rate: float = 0.0


class Dispatcher:
    def __init__(
        self,
        replicas: ReplicaSet,
        queue: NodeQueue,
        clock: Clock,
        tick_s: float = TICK_S,
        urgent_fraction: float = URGENT_FRACTION,
    ) -> None:
        self.replicas = replicas
        self.queue = queue
        self.clock = clock
        self.tick_s = tick_s
        self.urgent_fraction = urgent_fraction
        self.beyond_cap = 0  # requests sent past a worker's slots, ever
        self._waiters: dict[str, asyncio.Future[Lease]] = {}
        # Requests dispatched and not released yet.
        self.slots = EngineSlots()
        self.first_tokens = FirstTokens()  # waits for a first token beyond the own prefill
        self.arrivals = RouteArrivals()  # route ids received lately, for the heartbeats
        self._rates: dict[str, _Rate] = {}  # by replica id
        self._timer: asyncio.TimerHandle | None = None

    # -- the caller's side ---------------------------------------------------------------------
    async def acquire(self, item: QueueItem) -> Lease:
        """Wait in the queue for a slot. Raises ValueError when the request id is already
        waiting or running here, NoReplica when the model's replicas go away meanwhile."""
        rid = item.request_id
        if rid in self._waiters or self.slots.holds(rid):
            raise ValueError(f"request id {rid!r} is already on this node; ids must be unique")
        fut: asyncio.Future[Lease] = asyncio.get_running_loop().create_future()
        self.first_tokens.arrived(rid, self._ahead(item), self._class(item))
        self.queue.push(item)
        self._waiters[rid] = fut
        self.pump()
        try:
            return await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                self.release(fut.result())  # dispatched as the caller went away
            else:
                self._waiters.pop(item.request_id, None)
                self.queue.remove(item.request_id)
                self.first_tokens.left(item.request_id)
            raise

    def release(self, lease: Lease) -> None:
        left = self.slots.leave(lease.replica.replica_id, lease.item.request_id, self.clock.now())
        self.first_tokens.released(lease.replica.replica_id, lease.item.request_id)
        if left is None:
            return
        lease.replica.in_flight -= 1
        self.pump()

    # -- dispatching ---------------------------------------------------------------------------
    def pump(self) -> None:
        """Dispatch what can go now: every request whose replica has a slot, in the queue's
        order; then urgent requests beyond the cap where that lets them displace a lower
        class."""
        while (item := self.queue.pop_next(self._acceptable)) is not None:
            replica = self._free_slot(item)
            if replica is None:  # accepted because no replica takes the model any more
                self._fail(
                    item,
                    NoReplica(f"no replica of {item.model!r} on this node takes requests any more"),
                )
            else:
                self._dispatch(item, replica, beyond_cap=False)
        for item, urgent in displacers(self.queue, self._service_s, self.urgent_fraction):
            replica = self._displaceable(item, best_effort_only=not urgent)
            if replica is not None:
                self.queue.remove(item.request_id)
                self._dispatch(item, replica, beyond_cap=True)
        self._arm_timer()

    def _acceptable(self, item: QueueItem) -> bool:
        candidates = self._candidates(item)
        return not candidates or any(self._has_room(r, item) for r in candidates)

    def _candidates(self, item: QueueItem) -> list[Replica]:
        if item.replica_id:
            named = self.replicas.pick(item.model, item.replica_id)
            if named is not None and named.replica_id == item.replica_id:
                return [named]
        return [
            r
            for r in self.replicas.replicas.values()
            if r.model == item.model and r.state is State.READY and r.stub is not None
        ]

    def cap(self, replica: Replica) -> int | None:
        """Requests the replica's worker takes at once; None until its stats say."""
        return replica.stats.max_seqs or None

    def running_on(self, replica: Replica) -> list[QueueItem]:
        return self.slots.running_on(replica.replica_id)

    def _count(self, replica: Replica) -> int:
        return self.slots.count(replica.replica_id)

    def _has_room(self, replica: Replica, item: QueueItem) -> bool:
        return self.slots.has_room(
            replica.replica_id, self.cap(replica), replica.stats.step_line, item
        )

    def _free_slot(self, item: QueueItem) -> Replica | None:
        free = [r for r in self._candidates(item) if self._has_room(r, item)]
        return min(free, key=lambda r: (self._count(r), r.stats.queued_tokens), default=None)

    def _displaceable(self, item: QueueItem, best_effort_only: bool) -> Replica | None:
        """A candidate whose engine would admit `item` by preempting a lower class
        (EngineSlots.displaceable): the one with the fewest of its class or above running."""
        best, best_key = None, None
        for r in self._candidates(item):
            cap = self.cap(r)
            if cap is None or not self.slots.displaceable(
                r.replica_id, item, cap, best_effort_only
            ):
                continue
            running = self.running_on(r)
            key = (sum(1 for x in running if x.priority >= item.priority), len(running))
            if best_key is None or key < best_key:
                best, best_key = r, key
        return best

    def _service_s(self, item: QueueItem) -> float:
        """Estimated seconds to the first token once dispatched: the prompt at the fastest
        candidate's measured rate (0 while none is measured)."""
        rate = max((self.tokens_per_s(r) for r in self._candidates(item)), default=0.0)
        return item.prompt_tokens / rate if rate > 0 else 0.0

    def _dispatch(self, item: QueueItem, replica: Replica, beyond_cap: bool) -> None:
        fut = self._waiters.pop(item.request_id, None)
        if fut is None or fut.done():
            self.first_tokens.left(item.request_id)
            return  # its caller went away in the same loop turn: nothing to send
        self.slots.enter(replica.replica_id, item, self.clock.now())
        self.first_tokens.dispatched(replica.replica_id, item.request_id)
        replica.in_flight += 1
        if beyond_cap:
            self.beyond_cap += 1
        priority = item.priority if self.queue.classes else 0
        fut.set_result(
            Lease(item, replica, priority, self.clock.now() - item.enqueued_s, beyond_cap)
        )

    def first_token(self, lease: Lease) -> None:
        """The leased request's first token arrived: record how long it waited for it at this
        node beyond its own prefill (strata.policy.scheduling.delays)."""
        now, item, stats = self.clock.now(), lease.item, lease.replica.stats
        own_s = solo_prefill_s(
            stats.step_line,
            item.prompt_tokens,
            stats.block_size or DEFAULT_BLOCK_SIZE,
            stats.max_batched_tokens,
        )
        self.first_tokens.first_token(
            lease.replica.replica_id, item.request_id, now - item.enqueued_s, own_s, now
        )

    def class_delays(self, replica: Replica) -> ClassDelays:
        """The first-token delay a request of each class arriving now would see on the
        replica (strata.policy.scheduling.delays.FirstTokens; a class is left out when none of
        it came lately or nothing it cannot pass waits for one there)."""
        return self.first_tokens.class_delays(
            replica.replica_id,
            self.clock.now(),
            lambda p: self._queued_for(replica.model, replica.replica_id, p),
        )

    def _class(self, item: QueueItem) -> int:
        """The class `item` is served as here: its priority, or 0 for all under a queue
        without classes."""
        return item.priority if self.queue.classes else 0

    def _queued_for(self, model: str, replica_id: str, priority: int = 0) -> int:
        """Requests the node's queue holds that the replica may take and that a request of
        class `priority` does not go before."""
        return sum(
            1
            for i in self.queue
            if i.model == model and i.replica_id in ("", replica_id) and self._class(i) >= priority
        )

    def _ahead(self, item: QueueItem) -> int:
        """Requests without a first token ahead of `item` on its replica (on the least loaded
        candidate when the route named none) that it does not go before."""
        priority = self._class(item)
        if item.replica_id:
            return self._queued_for(
                item.model, item.replica_id, priority
            ) + self.first_tokens.waiting(item.replica_id, priority)
        queued = sum(1 for i in self.queue if i.model == item.model and self._class(i) >= priority)
        engines = [
            self.first_tokens.waiting(r.replica_id, priority) for r in self._candidates(item)
        ]
        return queued + min(engines, default=0)

    def _fail(self, item: QueueItem, err: Exception) -> None:
        self.first_tokens.left(item.request_id)
        fut = self._waiters.pop(item.request_id, None)
        if fut is not None and not fut.done():
            fut.set_exception(err)

    def _arm_timer(self) -> None:
        if self._timer is not None or not len(self.queue):
            return
        self._timer = asyncio.get_running_loop().call_later(self.tick_s, self._on_tick)

    def _on_tick(self) -> None:
        self._timer = None
        self.pump()

    # -- figures -------------------------------------------------------------------------------
    def tenant_loads(self) -> list[TenantLoad]:
        """Per tenant, running and queued requests and their reserved tokens, by tenant name."""
        # tenant -> [priority, running, queued, tokens, running best effort]
        out: dict[str, list[int]] = {}
        for item in self.slots.all_running():
            f = out.setdefault(item.tenant, [item.priority, 0, 0, 0, 0])
            f[0] = max(f[0], item.priority)
            f[1] += 1
            f[3] += item.cost_tokens
            f[4] += item.ttft_ms is None
        for tenant, q in self.queue.loads().items():
            f = out.setdefault(tenant, [q.priority, 0, 0, 0, 0])
            f[0] = max(f[0], q.priority)
            f[2] += q.queued
            f[3] += q.tokens
        return [TenantLoad(t, *out[t]) for t in sorted(out)]

    def tokens_per_s(self, replica: Replica) -> float:
        """The replica's prefill throughput as its engine measured it; before it has, the
        tokens its engine computed per busy second, over the window since the last read that
        saw at least MIN_RATE_BUSY_S more busy time (the first read: since start); before its
        engine ran a step, the rate its worker's step line prices (slo.line_prefill_rate)."""
        measured = self._measured_rate(replica)
        if measured > 0:
            return measured
        s = replica.stats
        return line_prefill_rate(
            s.step_line, s.block_size or DEFAULT_BLOCK_SIZE, s.max_batched_tokens
        )

    def _measured_rate(self, replica: Replica) -> float:
        if replica.stats.prefill_tokens_per_s > 0:
            return replica.stats.prefill_tokens_per_s
        s = replica.stats.counters
        m = self._rates.get(replica.replica_id)
        if m is None or s.busy_seconds < m.busy_s or s.step_tokens < m.tokens:  # new worker
            rate = s.step_tokens / s.busy_seconds if s.busy_seconds > 0 else 0.0
            self._rates[replica.replica_id] = _Rate(s.step_tokens, s.busy_seconds, rate)
            return rate
        if s.busy_seconds - m.busy_s >= MIN_RATE_BUSY_S:
            m.rate = (s.step_tokens - m.tokens) / (s.busy_seconds - m.busy_s)
            m.tokens, m.busy_s = s.step_tokens, s.busy_seconds
        return m.rate

    def forget_gone(self) -> None:
        """Drop rate windows of replicas that left the node."""
        for rid in [rid for rid in self._rates if rid not in self.replicas.replicas]:
            del self._rates[rid]
        self.slots.forget(set(self.replicas.replicas))
        self.first_tokens.forget(set(self.replicas.replicas))
