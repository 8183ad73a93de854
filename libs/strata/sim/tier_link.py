"""A simulated worker's link to its node's KV blocks: strata.engine.tier_link.TierLink, priced
instead of copied.

    pool evicts a block     -> NodeKV.evicted (the node notes it, the host tier takes it)
    pool commits a block    -> NodeKV.committed (node presence)
    request added           -> prefetch: live references on its stored prefix
    scheduler admits it     -> load(): the longest stored prefix of what the device pool lacks,
                               when the engine's CostModel says loading beats recomputing; the
                               blocks go into fresh device blocks and the tiers free their copies

The scheduler calls load() through its TierLoader hook (strata.engine.scheduler), as it calls the
real link. A load costs each block's bytes over its tier's bandwidth; the engine makes it inside
schedule(), before the step's forward pass, so the step that admits the request is that much
longer (`take_load_s`). The CostModel is the engine's own object, fed the same observations: each
step's tokens and forward time, each load's bytes and time.
"""

from __future__ import annotations

from strata.engine.block_pool import BlockPool
from strata.engine.costs import CostModel
from strata.engine.sequence import Sequence
from strata.kvtier.tiered_store import Tier
from strata.sim.kv_tiers import NodeKV


class SimTierLink:
    def __init__(self, node: NodeKV, worker: str, pool: BlockPool, block_bytes: int) -> None:
        self.node = node
        self.worker = worker
        self.pool = pool
        self.block_bytes = block_bytes
        self.costs = CostModel()
        self.now = 0.0  # the virtual time of what the engine does next
        self._load_s = 0.0  # loads made since the last planned step
        node.connect(worker)

    # -- device pool hooks -----------------------------------------------------------------------
    def offload(self, block_id: int, block_hash: int) -> None:
        self.node.evicted(self.now, self.worker, block_hash)

    def committed(self, block_id: int, block_hash: int) -> None:
        self.node.committed(self.now, self.worker, block_hash)

    # -- the engine's calls ----------------------------------------------------------------------
    def prefetch(self, hashes: list[int]) -> None:
        self.node.prefetch(hashes, self.now)

    def load(self, seq: Sequence, hashes: list[int]) -> int:
        node = self.node
        tiers = node.acquire(hashes, self.now)
        n = len(tiers)
        if n == 0:
            return 0
        held = hashes[:n]
        if not self.costs.prefer_load(n * self.pool.block_size, n * self.block_bytes):
            node.counters.declined += 1
            node.release(held, self.now, moved=False)
            return 0
        ids = self.pool.allocate(n)
        if ids is None:
            node.release(held, self.now, moved=False)
            return 0
        seconds = 0.0
        spec = node.spec
        assert spec is not None  # the node's tiers held the blocks
        for block_id, h, tier in zip(ids, held, tiers):
            self.pool.commit(block_id, h)
            seconds += self.block_bytes / spec.bytes_per_s(tier)
        node.release(held, self.now, moved=True)
        disk = tiers.count(Tier.DISK)
        node.counters.loaded_disk += disk
        node.counters.loaded_host += n - disk
        seq.block_ids.extend(ids)
        self._load_s += seconds
        self.costs.observe_load(n * self.block_bytes, seconds)
        return n

    def take_load_s(self) -> float:
        """Load time the step being planned pays, and forget it."""
        seconds, self._load_s = self._load_s, 0.0
        return seconds
