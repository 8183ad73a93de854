"""The device KV block pool: ids, refcounts, the prefix-cache map and the LRU free queue.

A block is in exactly one of three states:

    in use     ref_count > 0                  (not in the free queue)
    cached     ref_count == 0, hash != None   (in the free queue AND in the hash map: reusable)
    free       ref_count == 0, hash == None   (in the free queue only)

Allocation pops the head of the free queue (least recently freed). Popping a cached block evicts
it: its hash leaves the map and `on_evict(block_id, hash)` runs first, while the block still holds
its data, so the engine can copy it to the KV tier store. Sequences free their blocks in reverse
order, so a sequence's tail blocks are evicted before its head (the head is the shared prefix).

Given a clock, the pool also measures block lifetimes for the node layer: the seconds from a
block's commit (its content became reusable) to its eviction (the content was lost to the
device). Cumulative count and sum give the mean over any window; the last LIFETIME_WINDOW
lifetimes give recent percentiles. The clock is injected so tests can set exact times.
This module holds no tensors and imports no torch.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass


@dataclass(slots=True)
class Block:
    block_id: int
    ref_count: int = 0
    block_hash: int | None = None  # set once the block is full; final from then on
    committed_at: float = 0.0  # clock() at commit; meaningful only while block_hash is set


EvictHook = Callable[[int, int], None]

LIFETIME_WINDOW = 1024  # recent lifetimes kept for percentiles


class BlockPool:
    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        on_evict: EvictHook | None = None,
        clock: Callable[[], float] | None = None,
        on_commit: EvictHook | None = None,
    ):
        if num_blocks <= 0 or block_size <= 0:
            raise ValueError(
                f"num_blocks and block_size must be positive, got {num_blocks}, {block_size}"
            )
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.blocks = [Block(i) for i in range(num_blocks)]
        self._free: OrderedDict[int, None] = OrderedDict((i, None) for i in range(num_blocks))
        self._cached: dict[int, int] = {}  # hash -> block id
        self.on_evict = on_evict
        self.on_commit = on_commit  # a block's content became reusable (device-tier event)
        self.evictions = 0
        self._num_cached_free = 0  # blocks in the free queue that still hold a hash
        self.clock = clock  # None: lifetimes are not measured
        self.evicted_lifetimes_count = 0
        self.evicted_lifetime_sum_s = 0.0
        self.recent_lifetimes_s: deque[float] = deque(maxlen=LIFETIME_WINDOW)

    # -- queries -------------------------------------------------------------------------------
    @property
    def num_free(self) -> int:
        """Blocks that an allocation may take (free or cached-but-unreferenced)."""
        return len(self._free)

    @property
    def num_used(self) -> int:
        """Blocks holding data: referenced, or unreferenced but still cached (device KV memory)."""
        return self.num_blocks - len(self._free) + self._num_cached_free

    @property
    def num_cached(self) -> int:
        """Unreferenced blocks that still hold a reusable prefix (O(1))."""
        return self._num_cached_free

    def lookup(self, block_hash: int) -> int | None:
        return self._cached.get(block_hash)

    def missing_suffix(self, hashes: list[int]) -> list[int]:
        """The hashes of a prefix chain after its leading blocks this pool holds: what a tier
        would have to supply (the engine's prefetch at admission, and the simulator's)."""
        held = 0
        for h in hashes:
            if self.lookup(h) is None:
                break
            held += 1
        return hashes[held:]

    # -- transitions ---------------------------------------------------------------------------
    def allocate(self, n: int) -> list[int] | None:
        """Take n blocks (ref_count 1 each) or None when fewer than n are available."""
        if n > len(self._free):
            return None
        out = []
        for _ in range(n):
            block_id, _ = self._free.popitem(last=False)
            block = self.blocks[block_id]
            if block.block_hash is not None:
                self._num_cached_free -= 1
                self._evict(block)
            block.ref_count = 1
            out.append(block_id)
        return out

    def acquire_cached(self, block_id: int) -> None:
        """Take one more reference to a cached or in-use block (a prefix-cache hit)."""
        block = self.blocks[block_id]
        if block.ref_count == 0:
            del self._free[block_id]
            self._num_cached_free -= 1  # only cached blocks can be hit while unreferenced
        block.ref_count += 1

    def commit(self, block_id: int, block_hash: int) -> int:
        """Record that a full block holds the content named by block_hash.

        Returns the block id that now stands for that hash: an existing cached block wins, so the
        map never holds two copies of one block (the caller may then switch to it).
        """
        existing = self._cached.get(block_hash)
        if existing is not None and existing != block_id:
            return existing
        block = self.blocks[block_id]
        if block.block_hash is None and self.clock is not None:
            block.committed_at = self.clock()
        new = block.block_hash is None
        block.block_hash = block_hash
        self._cached[block_hash] = block_id
        if new and self.on_commit is not None:
            self.on_commit(block_id, block_hash)
        return block_id

    def free(self, block_ids: Iterable[int]) -> None:
        """Drop one reference from each block; give them back in reverse (tail evicted first)."""
        for block_id in reversed(list(block_ids)):
            block = self.blocks[block_id]
            if block.ref_count <= 0:
                raise RuntimeError(f"block {block_id} freed more often than it was taken")
            block.ref_count -= 1
            if block.ref_count == 0:
                self._free[block_id] = None
                if block.block_hash is not None:
                    self._num_cached_free += 1

    def _evict(self, block: Block) -> None:
        assert block.block_hash is not None
        if self.on_evict is not None:
            self.on_evict(block.block_id, block.block_hash)
        del self._cached[block.block_hash]
        block.block_hash = None
        self.evictions += 1
        if self.clock is not None:
            lifetime = self.clock() - block.committed_at
            self.evicted_lifetimes_count += 1
            self.evicted_lifetime_sum_s += lifetime
            self.recent_lifetimes_s.append(lifetime)
