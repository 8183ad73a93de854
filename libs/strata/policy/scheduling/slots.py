"""A node's engine slots: what it has handed to each replica's engine, and whether a replica
takes one more request now. The node manager's dispatcher and the simulator's node front keep
one each.

A replica takes a request when it runs fewer than its worker's max_seqs of the node's requests
(None: not reported yet, no cap) and the request fits its decode load's TPOT targets
(strata.policy.scheduling.slo, priced with the worker's step line). A request past the cap may
still go when its engine would admit it by preempting a lower class (`displaceable`).

Invariant: `load(r)` is the DecodeLoad of exactly the items `running_on(r)` returns.
"""

from __future__ import annotations

from strata.core.step_model import StepLine
from strata.policy.scheduling.fair_queue import QueueItem
from strata.policy.scheduling.slo import HEADROOM, DecodeLoad, fits


class EngineSlots:
    def __init__(self, headroom: float = HEADROOM) -> None:
        self.headroom = headroom
        self._running: dict[str, dict[str, QueueItem]] = {}  # replica id -> request id -> item
        self._loads: dict[str, DecodeLoad] = {}

    def enter(self, replica_id: str, item: QueueItem) -> None:
        self._running.setdefault(replica_id, {})[item.request_id] = item
        self._loads.pop(replica_id, None)

    def leave(self, replica_id: str, request_id: str) -> QueueItem | None:
        """The item that left, or None when it was not there."""
        running = self._running.get(replica_id)
        item = running.pop(request_id, None) if running is not None else None
        if running is not None and not running:
            del self._running[replica_id]
        self._loads.pop(replica_id, None)
        return item

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

    def displaceable(self, replica_id: str, item: QueueItem, cap: int) -> bool:
        """Whether the replica's engine would admit `item` by preempting a lower class: fewer
        requests of its class or above than slots there, and at least one below it."""
        running = self._running.get(replica_id, {})
        at_or_above = sum(1 for x in running.values() if x.priority >= item.priority)
        return at_or_above < cap and at_or_above < len(running)
