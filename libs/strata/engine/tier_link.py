"""Connects the engine's device pool to the KV tier store: offload on eviction, load on a hit.

A hit is loaded only when the cost model says loading beats recomputing those tokens.
"""

from __future__ import annotations

import logging
import time

import grpc
import torch

from strata.engine.block_pool import BlockPool
from strata.engine.costs import CostModel
from strata.engine.sequence import Sequence
from strata.kvtier import codec
from strata.kvtier.client import TierClient

log = logging.getLogger(__name__)


class TierLink:
    def __init__(self, client: TierClient):
        self.client = client
        self.kv: torch.Tensor | None = None
        self.pool: BlockPool | None = None
        self.costs = CostModel()
        self.layout = ""
        self.block_bytes = 0

    def attach(self, kv: torch.Tensor) -> None:
        self.kv = kv
        layers, two, heads, _, block_size, dim = kv.shape
        self.layout = codec.layout_of((layers, two, heads, block_size, dim), kv.dtype)
        self.block_bytes = layers * two * heads * block_size * dim * kv.element_size()

    def offload(self, block_id: int, block_hash: int) -> None:
        """BlockPool eviction hook: runs while the block still holds its data."""
        assert self.kv is not None
        data, layout = codec.encode(self.kv[:, :, :, block_id])
        self.client.put_async(block_hash, data, layout)

    def load(self, seq: Sequence, hashes: list[int]) -> int:
        assert self.kv is not None and self.pool is not None
        try:
            available = self.client.lookup(hashes)
            if available == 0 or not self.costs.prefer_load(
                    available * self.pool.block_size, available * self.block_bytes):
                return 0
            started = time.perf_counter()
            fetched = self.client.get(hashes[:available])
        except grpc.RpcError as err:
            # The tier is a cache: when it is unreachable the prefix is recomputed.
            log.warning("kv tier lookup failed (%s): recomputing %d blocks", err.code(),
                        len(hashes))
            return 0
        if not fetched:
            return 0
        ids = self.pool.allocate(len(fetched))
        if ids is None:
            return 0
        for block_id, blk in zip(ids, fetched):
            self.kv[:, :, :, block_id].copy_(codec.decode(blk.data, blk.layout, self.layout))
            self.pool.commit(block_id, blk.block_hash)
        seq.block_ids.extend(ids)
        self.costs.observe_load(len(ids) * self.block_bytes, time.perf_counter() - started)
        return len(ids)
