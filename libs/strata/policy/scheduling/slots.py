"""A node's engine slots: what it has handed to each replica's engine, and whether a replica
takes one more request now. The node manager's dispatcher and the simulator's node front keep
one each.

A replica takes a request when it runs fewer than its worker's max_seqs of the node's requests
(None: not reported yet, no cap) and the request fits its decode load's TPOT targets
(strata.policy.scheduling.slo, priced with the worker's step line). A request past the cap may
still go when its engine would admit it by preempting a lower class (`displaceable`): a request
of a class with a TTFT target at once when the one it displaces is best effort (best effort
never slows a class), otherwise only once it is urgent (the node's queue says when).

It also measures each replica's slot turnover, by Little's law: a request's hold (dispatch to
release) over the mean number of requests its engine held meanwhile (the time-integral of that
count over the hold). While the engine stays full a slot frees about that often. The scheduler
prices a wait for a slot with it: it includes everything a step line leaves out (streaming each
token through the node and the gateway, the gaps between steps) and changes little with the
batch size on a machine whose throughput is bound.

Requests that run together share one pace, so the releases of one wave of the engine's slots
agree with each other while waves differ (on a shared machine, by up to 2x). The turnover
reported is therefore the upper quartile (TURNOVER_QUANTILE) of the last TURNOVER_WINDOW
releases, spanning several waves: a burst admitted now is served at the pace of the next
waves, and pricing it with the slower of the recent ones keeps what is admitted within its
targets, at the cost of refusing a little more when the pace is steady.

Invariant: `load(r)` is the DecodeLoad of exactly the items `running_on(r)` returns.
"""

from __future__ import annotations

from collections import deque

from strata.core.step_model import StepLine
from strata.policy.scheduling.fair_queue import QueueItem
from strata.policy.scheduling.slo import HEADROOM, DecodeLoad, fits

TURNOVER_WINDOW = 64  # releases a replica's turnover is taken over
TURNOVER_QUANTILE = 0.75  # the quantile of them reported


class EngineSlots:
    def __init__(self, headroom: float = HEADROOM) -> None:
        self.headroom = headroom
        self._running: dict[str, dict[str, QueueItem]] = {}  # replica id -> request id -> item
        self._loads: dict[str, DecodeLoad] = {}
        # replica id -> (time-integral of its request count, when it was last advanced)
        self._area: dict[str, tuple[float, float]] = {}
        self._entered: dict[str, tuple[float, float]] = {}  # request id -> (when, area then)
        # replica id -> the latest releases' seconds between releases (hold / mean count)
        self._turnover_s: dict[str, deque[float]] = {}

    def _advance(self, replica_id: str, now: float) -> float:
        """The replica's count integral up to `now` (before the count changes)."""
        area, since = self._area.get(replica_id, (0.0, now))
        area += self.count(replica_id) * max(0.0, now - since)
        self._area[replica_id] = (area, now)
        return area

    def enter(self, replica_id: str, item: QueueItem, now: float) -> None:
        area = self._advance(replica_id, now)
        self._running.setdefault(replica_id, {})[item.request_id] = item
        self._entered[item.request_id] = (now, area)
        self._loads.pop(replica_id, None)

    def leave(self, replica_id: str, request_id: str, now: float) -> QueueItem | None:
        """The item that left, or None when it was not there."""
        area = self._advance(replica_id, now)
        running = self._running.get(replica_id)
        item = running.pop(request_id, None) if running is not None else None
        if running is not None and not running:
            del self._running[replica_id]
        self._loads.pop(replica_id, None)
        entered = self._entered.pop(request_id, None)
        if item is not None and entered is not None:
            hold, shared = now - entered[0], area - entered[1]
            if hold > 0 and shared > 0:
                samples = self._turnover_s.get(replica_id)
                if samples is None:
                    samples = self._turnover_s[replica_id] = deque(maxlen=TURNOVER_WINDOW)
                samples.append(hold * hold / shared)  # hold / mean count over the hold
        return item

    def turnover_s(self, replica_id: str) -> float:
        """Seconds between slot releases of the replica while its engine is full: the
        TURNOVER_QUANTILE of its latest releases (nearest rank; 0: none left yet)."""
        samples = self._turnover_s.get(replica_id)
        if not samples:
            return 0.0
        ordered = sorted(samples)
        return ordered[min(len(ordered) - 1, int(TURNOVER_QUANTILE * len(ordered)))]

    def forget(self, replica_ids: set[str]) -> None:
        """Drop the averages of replicas not in `replica_ids` (gone from the node)."""
        for rid in [r for r in self._turnover_s if r not in replica_ids]:
            del self._turnover_s[rid]
        for rid in [r for r in self._area if r not in replica_ids and r not in self._running]:
            del self._area[rid]

    def holds(self, request_id: str) -> bool:
        return any(request_id in r for r in self._running.values())

    def count(self, replica_id: str) -> int:
        return len(self._running.get(replica_id, ()))

    def running_on(self, replica_id: str) -> list[QueueItem]:
        return list(self._running.get(replica_id, {}).values())

    def all_running(self) -> list[QueueItem]:
        return [item for running in self._running.values() for item in running.values()]

    def load(self, replica_id: str) -> DecodeLoad:
        load = self._loads.get(replica_id)
        if load is None:
            load = DecodeLoad.of(
                (i.cost_tokens, i.tpot_ms) for i in self._running.get(replica_id, {}).values()
            )
            self._loads[replica_id] = load
        return load

    def has_room(
        self, replica_id: str, cap: int | None, line: StepLine | None, item: QueueItem | None
    ) -> bool:
        """Below the cap and, for `item` (None: any request, priced as best effort), within the
        running requests' TPOT targets."""
        if cap is not None and self.count(replica_id) >= cap:
            return False
        if item is None:
            return True
        return fits(line, self.load(replica_id), item.cost_tokens, item.tpot_ms, self.headroom)

    def displaceable(
        self, replica_id: str, item: QueueItem, cap: int, best_effort_only: bool = False
    ) -> bool:
        """Whether the replica's engine would admit `item` by preempting a lower class: fewer
        requests of its class or above than slots there, and at least one below it (with
        `best_effort_only`, one below it of a class with no TTFT target)."""
        running = self._running.get(replica_id, {})
        at_or_above = sum(1 for x in running.values() if x.priority >= item.priority)
        if at_or_above >= cap or at_or_above >= len(running):
            return False
        return not best_effort_only or any(
            x.priority < item.priority and x.ttft_ms is None for x in running.values()
        )
