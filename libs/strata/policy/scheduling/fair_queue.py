"""A node's queue of requests waiting for a worker slot: strict priority across SLA classes,
token-weighted fair queueing among tenants within a class; and the pooled first-come-first-served
baseline behind the same interface. Pure and synchronous: the node manager and the simulator
drive the same objects.

Within one priority level the queue is start-time fair queueing (Goyal, Vin and Cheng, 1996) over
flows keyed by (tenant, model), with a request's size in tokens as its packet length:

    cost c   = prompt tokens + max_tokens (the work the request reserves)
    start  S = max(v, F_flow)       v: the level's virtual time, the start tag last served
    finish F = S + c / weight       F_flow := F

and the level serves the smallest start tag first (arrival order among equal tags). A flow that
was idle starts at v, not at its old finish tag: it banks no credit for the time it sent nothing.
With two backlogged tenants of weights 1 and 3 the second's tags advance a third as fast, so it
gets 3 of every 4 tokens of service. When a level empties, its busy period ends: v moves to the
largest finish tag and the flows are forgotten, so the next burst starts every tenant even.

    priority 2  [heap of (S, seq)]   served first, whenever it holds an acceptable request
    priority 1  [heap of (S, seq)]
    priority 0  [heap of (S, seq)]

pop_next and push cost O(log n); pop_next(accept) also pops and restores the requests it skips
(those whose replica has no slot), O((k + 1) log n) for k skipped. Removal is lazy.
"""

from __future__ import annotations

import enum
import heapq
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

from strata.policy.clock import Clock

# A waiting request is urgent once its wait plus its estimated service reaches this fraction of
# its class's TTFT target: the rest of the target is left for the worker's own queueing and the
# steps that produce the first token after a preemption.
URGENT_FRACTION = 0.5


@dataclass(slots=True)
class QueueItem:
    request_id: str
    tenant: str
    model: str
    priority: int = 1
    prompt_tokens: int = 0
    max_tokens: int = 0
    weight: float = 1.0
    ttft_ms: float | None = None  # the class's TTFT target; None = never urgent
    replica_id: str = ""  # the route's replica; "" = any replica of the model
    tpot_ms: float | None = None  # the class's TPOT target; None = not judged (slo.fits)
    enqueued_s: float = 0.0  # set by push
    start_tag: float = 0.0  # set by push (virtual tokens)
    finish_tag: float = 0.0

    def __post_init__(self) -> None:
        if not self.weight > 0:
            raise ValueError(
                f"request {self.request_id!r}: weight must be positive, got {self.weight}"
            )

    @property
    def cost_tokens(self) -> int:
        return self.prompt_tokens + self.max_tokens

    @property
    def flow(self) -> tuple[str, str]:
        return (self.tenant, self.model)


@dataclass(slots=True)
class TenantQueued:
    """One tenant's requests in the queue."""

    tenant: str
    priority: int
    queued: int = 0
    tokens: int = 0  # their cost tokens


class NodeQueue(Protocol):
    """Requests waiting for a worker slot on one node.

    Invariants: an item is in the queue from push until pop_next returns it or remove takes it
    out, and never twice (request ids are unique while queued); pop_next never returns an item
    `accept` refused.
    """

    classes: bool  # whether the order knows SLA classes (a baseline that does not sends
    # every request to the engine at one priority)

    def __len__(self) -> int: ...

    def push(self, item: QueueItem) -> None: ...

    def pop_next(self, accept: Callable[[QueueItem], bool] | None = None) -> QueueItem | None: ...

    def remove(self, request_id: str) -> QueueItem | None: ...

    def urgent(
        self,
        service_s: Callable[[QueueItem], float] | None = None,
        fraction: float = URGENT_FRACTION,
    ) -> list[QueueItem]: ...

    def loads(self) -> dict[str, TenantQueued]: ...

    def __iter__(self) -> Iterator[QueueItem]: ...  # queued requests, in no particular order


def displacers(
    queue: NodeQueue,
    service_s: Callable[[QueueItem], float] | None = None,
    fraction: float = URGENT_FRACTION,
) -> list[tuple[QueueItem, bool]]:
    """The queued requests that may displace a lower class from an engine now, each with
    whether it is urgent (queue.urgent: it may displace any lower class) or not (it may
    displace best effort only: strata.policy.scheduling.slots): the urgent ones in service
    order, then the other requests of a class with a TTFT target in service order. Empty for a
    queue without classes."""
    if not queue.classes or not len(queue):
        return []
    urgent = queue.urgent(service_s, fraction)
    seen = {i.request_id for i in urgent}
    rest = [i for i in queue.urgent(None, 0.0) if i.request_id not in seen]
    return [(i, True) for i in urgent] + [(i, False) for i in rest]


class _Level:
    __slots__ = ("heap", "v", "finish", "size", "dead")

    def __init__(self) -> None:
        self.heap: list[tuple[float, int, QueueItem]] = []
        self.v = 0.0
        self.finish: dict[tuple[str, str], float] = {}
        self.size = 0
        self.dead = 0  # removed entries still in the heap


class FairQueue:
    """Strict priority across classes, start-time fair queueing among (tenant, model) flows."""

    classes = True

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._levels: dict[int, _Level] = {}
        self._order: list[int] = []  # priorities, highest first
        self._items: dict[str, QueueItem] = {}
        self._tenants: dict[str, TenantQueued] = {}
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, request_id: str) -> bool:
        return request_id in self._items

    # -- what subclasses change ----------------------------------------------------------------
    def _priority_of(self, item: QueueItem) -> int:
        return item.priority

    def _tag(self, level: _Level, item: QueueItem, seq: int) -> None:
        item.start_tag = max(level.v, level.finish.get(item.flow, 0.0))
        item.finish_tag = item.start_tag + item.cost_tokens / item.weight
        level.finish[item.flow] = item.finish_tag

    # -- operations ----------------------------------------------------------------------------
    def push(self, item: QueueItem) -> None:
        if item.request_id in self._items:
            raise ValueError(f"request {item.request_id!r} is already queued")
        prio = self._priority_of(item)
        level = self._levels.get(prio)
        if level is None:
            level = self._levels[prio] = _Level()
            self._order = sorted(self._levels, reverse=True)
        seq = next(self._seq)
        item.enqueued_s = self.clock.now()
        self._tag(level, item, seq)
        heapq.heappush(level.heap, (item.start_tag, seq, item))
        level.size += 1
        self._items[item.request_id] = item
        load = self._tenants.get(item.tenant)
        if load is None:
            load = self._tenants[item.tenant] = TenantQueued(item.tenant, item.priority)
        load.priority = max(load.priority, item.priority)
        load.queued += 1
        load.tokens += item.cost_tokens

    def pop_next(self, accept: Callable[[QueueItem], bool] | None = None) -> QueueItem | None:
        """The next request in service order that `accept` takes (any, without it), removed."""
        for prio in self._order:
            level = self._levels[prio]
            skipped: list[tuple[float, int, QueueItem]] = []
            found = None
            while level.heap:
                entry = heapq.heappop(level.heap)
                item = entry[2]
                if self._items.get(item.request_id) is not item:
                    level.dead -= 1
                    continue
                if accept is None or accept(item):
                    found = item
                    break
                skipped.append(entry)
            for entry in skipped:
                heapq.heappush(level.heap, entry)
            if found is not None:
                level.v = max(level.v, found.start_tag)
                self._forget(level, found)
                return found
        return None

    def remove(self, request_id: str) -> QueueItem | None:
        """Take a request out (its caller went away); None if it is not queued. A flow's last
        request gives its reservation back: the flow's finish tag returns to that start."""
        item = self._items.get(request_id)
        if item is None:
            return None
        level = self._levels[self._priority_of(item)]
        if level.finish.get(item.flow) == item.finish_tag:
            level.finish[item.flow] = item.start_tag
        level.dead += 1
        self._forget(level, item)
        if level.dead > 32 and level.dead > len(level.heap) // 2:
            level.heap = [e for e in level.heap if self._items.get(e[2].request_id) is e[2]]
            heapq.heapify(level.heap)
            level.dead = 0
        return item

    def _forget(self, level: _Level, item: QueueItem) -> None:
        del self._items[item.request_id]
        level.size -= 1
        if level.size == 0:  # the busy period ends: nobody carries credit or debt past it
            level.v = max([level.v, *level.finish.values()])
            level.finish.clear()
            level.heap.clear()
            level.dead = 0
        load = self._tenants[item.tenant]
        load.queued -= 1
        load.tokens -= item.cost_tokens
        if load.queued == 0:
            del self._tenants[item.tenant]

    def urgent(
        self,
        service_s: Callable[[QueueItem], float] | None = None,
        fraction: float = URGENT_FRACTION,
    ) -> list[QueueItem]:
        """Queued requests whose class would miss its TTFT target if they waited longer: wait
        so far plus estimated service (seconds) at least `fraction` of the target. In service
        order; they stay queued. O(n)."""
        now = self.clock.now()
        out = []
        for item in self._items.values():
            if item.ttft_ms is None:
                continue
            est = service_s(item) if service_s is not None else 0.0
            if (now - item.enqueued_s + est) * 1000.0 >= item.ttft_ms * fraction:
                out.append(item)
        out.sort(key=lambda i: (-self._priority_of(i), i.start_tag, i.enqueued_s))
        return out

    def loads(self) -> dict[str, TenantQueued]:
        """Per tenant: queued requests and their tokens (copies)."""
        return {
            t: TenantQueued(q.tenant, q.priority, q.queued, q.tokens)
            for t, q in self._tenants.items()
        }

    def __iter__(self) -> Iterator[QueueItem]:
        """Queued requests in no particular order."""
        return iter(list(self._items.values()))


class FcfsQueue(FairQueue):
    """The pooled baseline: one line in arrival order, no classes, no tenants; nothing is ever
    urgent. The start tag is the arrival number."""

    classes = False

    def _priority_of(self, item: QueueItem) -> int:
        return 0

    def _tag(self, level: _Level, item: QueueItem, seq: int) -> None:
        item.start_tag = item.finish_tag = float(seq)

    def urgent(
        self,
        service_s: Callable[[QueueItem], float] | None = None,
        fraction: float = URGENT_FRACTION,
    ) -> list[QueueItem]:
        return []


class QueueName(enum.StrEnum):
    WFQ = "wfq"  # strict priority across classes, token-weighted fair within a class
    FCFS = "fcfs"  # first come, first served (the pooled baseline)


QUEUES: dict[str, Callable[[Clock], FairQueue]] = {
    QueueName.WFQ: FairQueue,
    QueueName.FCFS: FcfsQueue,
}
