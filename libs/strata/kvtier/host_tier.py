"""The host-memory tier: blocks by hash, LRU within a byte budget, checksummed.

A block is stored once however many requests share it. `get_prefix` serves the longest run of
leading hashes it holds and verifies each checksum on the way out: a corrupted block ends the
prefix and is dropped, never served.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Container
from dataclasses import dataclass

from strata.kvtier.hashing import checksum


@dataclass(slots=True)
class StoredBlock:
    block_hash: int
    layout: str
    data: bytes
    checksum: int


@dataclass(slots=True)
class TierStats:
    hits: int = 0
    misses: int = 0
    evictions: int = 0
    checksum_failures: int = 0
    rejected: int = 0


def leading_present(hashes: list[int], present: Container[int]) -> int:
    """How many leading hashes a tier holds: the prefix it can serve (every tier answers so)."""
    n = 0
    for h in hashes:
        if h not in present:
            break
        n += 1
    return n


class HostTier:
    def __init__(self, capacity_bytes: int):
        if capacity_bytes <= 0:
            raise ValueError(f"capacity_bytes must be positive, got {capacity_bytes}")
        self.capacity_bytes = capacity_bytes
        self.bytes_used = 0
        self._blocks: OrderedDict[int, StoredBlock] = OrderedDict()
        self.stats = TierStats()

    def __len__(self) -> int:
        return len(self._blocks)

    def put(self, block: StoredBlock) -> tuple[bool, int]:
        """Store a block; returns (stored, evicted). A block failing its checksum is rejected."""
        if checksum(block.data) != block.checksum:
            self.stats.rejected += 1
            return False, 0
        if len(block.data) > self.capacity_bytes:
            self.stats.rejected += 1
            return False, 0
        if block.block_hash in self._blocks:
            self._blocks.move_to_end(block.block_hash)
            return True, 0
        evicted = 0
        while self.bytes_used + len(block.data) > self.capacity_bytes:
            _, old = self._blocks.popitem(last=False)
            self.bytes_used -= len(old.data)
            evicted += 1
        self._blocks[block.block_hash] = block
        self.bytes_used += len(block.data)
        self.stats.evictions += evicted
        return True, evicted

    def prefix_len(self, hashes: list[int]) -> int:
        return leading_present(hashes, self._blocks)

    def get_prefix(self, hashes: list[int]) -> list[StoredBlock]:
        out = []
        for h in hashes:
            block = self._blocks.get(h)
            if block is None:
                self.stats.misses += 1
                break
            if checksum(block.data) != block.checksum:
                self.stats.checksum_failures += 1
                self._drop(h)
                break
            self._blocks.move_to_end(h)
            self.stats.hits += 1
            out.append(block)
        return out

    def _drop(self, h: int) -> None:
        block = self._blocks.pop(h)
        self.bytes_used -= len(block.data)
