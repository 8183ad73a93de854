"""Which blocks a node holds anywhere (any worker's device pool, host memory, disk), as events.

The global scheduler routes by prefix overlap, so it needs each node's block set, not each tier's:
a block that moves from a worker's device pool into host memory is still on the node and produces
no event. Each place that holds a block counts once; a block is announced when its count goes from
zero to one and withdrawn when it goes back to zero. Events that cancel out before the next report
(stored then removed) are never sent.
"""

from __future__ import annotations


class NodePresence:
    def __init__(self) -> None:
        self._count: dict[int, int] = {}
        self._device: dict[str, set[int]] = {}
        self._stored: set[int] = set()
        self._removed: set[int] = set()

    def __len__(self) -> int:
        return len(self._count)

    def __contains__(self, block_hash: int) -> bool:
        return block_hash in self._count

    @property
    def device_blocks(self) -> int:
        """Distinct blocks held in some worker's device pool."""
        return len(set().union(*self._device.values())) if self._device else 0

    def add(self, block_hash: int) -> None:
        n = self._count.get(block_hash, 0)
        self._count[block_hash] = n + 1
        if n == 0:
            if block_hash in self._removed:
                self._removed.discard(block_hash)
            else:
                self._stored.add(block_hash)

    def remove(self, block_hash: int) -> None:
        n = self._count.get(block_hash, 0)
        if n <= 0:
            return
        if n > 1:
            self._count[block_hash] = n - 1
            return
        del self._count[block_hash]
        if block_hash in self._stored:
            self._stored.discard(block_hash)
        else:
            self._removed.add(block_hash)

    def device_update(
        self, worker_id: str, stored: list[int], removed: list[int], reset: bool
    ) -> None:
        held = self._device.setdefault(worker_id, set())
        if reset:
            for h in held:
                self.remove(h)
            held.clear()
        for h in removed:
            if h in held:
                held.discard(h)
                self.remove(h)
        for h in stored:
            if h not in held:
                held.add(h)
                self.add(h)

    def drain(self) -> tuple[list[int], list[int]]:
        """Events since the last drain: (stored, removed)."""
        stored, removed = sorted(self._stored), sorted(self._removed)
        self._stored.clear()
        self._removed.clear()
        return stored, removed

    def snapshot(self) -> list[int]:
        """Every block on the node (for a reset report); pending events are folded in."""
        self._stored.clear()
        self._removed.clear()
        return sorted(self._count)
