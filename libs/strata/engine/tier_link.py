"""Connects the engine's device pool (the top tier) to the node's KV tier store.

    evict (pool full)   device block -> reserved host slot in shared memory (one copy, no RPC)
    admit a request     prefetch: the store promotes the prompt's disk blocks while others run
    first step          acquire the stored prefix -> copy into fresh device blocks -> hand over
                        (the store frees its copy: one copy per block per node)

A stored prefix is loaded only when the engine's measured costs say loading beats recomputing
those tokens. Every loaded block is checked against its checksum before it is used.
"""

from __future__ import annotations

import logging
import time

import grpc
import torch

from strata.engine.block_pool import BlockPool
from strata.engine.costs import CostModel
from strata.engine.sequence import Sequence
from strata.kvtier import codec, hashing
from strata.kvtier.client import FetchedBlock, TierClient

log = logging.getLogger(__name__)


class TierLink:
    def __init__(self, client: TierClient):
        self.client = client
        self.kv: torch.Tensor | None = None
        self.pool: BlockPool | None = None
        self.costs = CostModel()
        self.layout = ""
        self.block_bytes = 0
        self._shape: tuple[int, ...] = ()
        self.loaded_blocks = 0
        self.bad_blocks = 0

    def attach(self, kv: torch.Tensor) -> None:
        self.kv = kv
        layers, two, heads, _, block_size, dim = kv.shape
        self._shape = (layers, two, heads, block_size, dim)
        self.layout = codec.layout_of(self._shape, kv.dtype)
        self.block_bytes = layers * two * heads * block_size * dim * kv.element_size()
        self.client.prepare(self.block_bytes)

    # -- device pool hooks (engine thread) --------------------------------------------------------
    def offload(self, block_id: int, block_hash: int) -> None:
        """Eviction: runs while the block still holds its data."""
        assert self.kv is not None
        src = self.kv[:, :, :, block_id]
        self.client.note_device([], [block_hash])
        if self.client.shared_memory:
            slot = self.client.take_slot(self.block_bytes)
            if slot is None:
                return  # the host tier is under pressure: this cached block is dropped
            reserved, view = slot
            self._as_block(view).copy_(src)
            self.client.commit_slot(reserved, block_hash, self.layout, self.block_bytes)
        else:
            data, layout = codec.encode(src)
            self.client.put_async(block_hash, data, layout)

    def committed(self, block_id: int, block_hash: int) -> None:
        self.client.note_device([block_hash], [])

    def prefetch(self, hashes: list[int], peer: str = "") -> None:
        """A request was admitted: have the store bring its stored prefix up (and pull from a
        peer node what this node lacks) while the requests ahead of it run."""
        self.client.prefetch(hashes, peer)

    # -- loads (scheduler, at a request's first step) ---------------------------------------------
    def load(self, seq: Sequence, hashes: list[int]) -> int:
        assert self.kv is not None and self.pool is not None
        try:
            started = time.perf_counter()
            fetched, lease = self.client.acquire(hashes)
        except grpc.RpcError as err:
            # The tier is a cache: when it is unreachable the prefix is recomputed.
            log.warning(
                "kv tier acquire failed (%s): recomputing %d blocks", err.code(), len(hashes)
            )
            return 0
        n = len(fetched)
        if n == 0 or not self.costs.prefer_load(n * self.pool.block_size, n * self.block_bytes):
            self.client.release(lease, moved=False)
            return 0
        ids = self.pool.allocate(n)
        if ids is None:
            self.client.release(lease, moved=False)
            return 0
        loaded = 0
        for block_id, blk in zip(ids, fetched):
            if not self._copy_in(block_id, blk):
                break
            self.pool.commit(block_id, blk.block_hash)
            loaded += 1
        if loaded < n:
            self.pool.free(ids[loaded:])
        # Handed over only when every block arrived; otherwise the store keeps its copies.
        self.client.release(lease, moved=loaded == n and self.client.shared_memory)
        seq.block_ids.extend(ids[:loaded])
        self.loaded_blocks += loaded
        self.costs.observe_load(loaded * self.block_bytes, time.perf_counter() - started)
        return loaded

    def _copy_in(self, block_id: int, blk: FetchedBlock) -> bool:
        assert self.kv is not None
        if blk.layout != self.layout or hashing.checksum(blk.data) != blk.checksum:
            self.bad_blocks += 1
            log.warning(
                "KV block %x from the tier store failed its layout or checksum check; "
                "recomputing from there",
                blk.block_hash,
            )
            return False
        if isinstance(blk.data, memoryview):
            self.kv[:, :, :, block_id].copy_(self._as_block(blk.data))
        else:
            self.kv[:, :, :, block_id].copy_(codec.decode(blk.data, blk.layout, self.layout))
        return True

    def _as_block(self, view: memoryview) -> torch.Tensor:
        assert self.kv is not None
        raw = torch.frombuffer(view, dtype=torch.uint8)
        return raw.view(self.kv.dtype).view(self._shape)
