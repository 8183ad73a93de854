"""Pulls of a prefix from another node's KV tier store into this one (cross-node reuse).

One channel per peer address, reused across pulls and closed by `close`, which also cancels
the pulls still running in the background. A pull stops at the first block the peer does not
send or this store does not take, so what it stored is always a prefix of what was asked.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import grpc

from strata.kvtier.blocks import StoredBlock
from strata.kvtier.hashing import from_bytes, to_bytes
from strata.kvtier.tiered_store import TieredStore
from strata.v1 import kvstore_pb2, kvstore_pb2_grpc

log = logging.getLogger(__name__)

PULL_TIMEOUT_S = 30.0


class PeerPuller:
    def __init__(self, store: TieredStore, open_channel: Callable[[str], grpc.aio.Channel]) -> None:
        self._store = store
        self._open = open_channel
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._tasks: set[asyncio.Task] = set()

    async def pull(self, peer: str, hashes: list[int]) -> int:
        """Stream the part of the prefix `hashes` this store lacks from `peer`; the blocks
        stored. Raises grpc.aio.AioRpcError when the peer fails before sending any block."""
        held, _, _ = self._store.lookup(hashes)
        want = hashes[held:]
        if not want:
            return 0
        stub = kvstore_pb2_grpc.KVStoreStub(self._channel(peer))
        pulled = 0
        request = kvstore_pb2.GetBlocksRequest(block_hashes=[to_bytes(h) for h in want])
        try:
            async for blk in stub.StreamBlocks(request, timeout=PULL_TIMEOUT_S):
                b = StoredBlock(from_bytes(blk.block_hash), blk.layout, blk.data, blk.checksum)
                if b.block_hash != want[pulled] or not await asyncio.to_thread(
                    self._store.put_bytes, b
                ):
                    break
                pulled += 1
        except grpc.aio.AioRpcError as err:
            log.warning(
                "pulling %d blocks from %s stopped after %d: %s",
                len(want),
                peer,
                pulled,
                err.code().name,
            )
            if pulled == 0:
                raise
        self._store.counters.peer_pulled += pulled
        return pulled

    def pull_in_background(self, peer: str, hashes: list[int]) -> None:
        """Start a pull whose outcome nobody waits for (a prefetch); a failure is logged."""
        task = asyncio.create_task(self._quiet_pull(peer, hashes))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for ch in self._channels.values():
            await ch.close()
        self._channels.clear()

    async def _quiet_pull(self, peer: str, hashes: list[int]) -> None:
        try:
            await self.pull(peer, hashes)
        except grpc.aio.AioRpcError as err:
            log.warning("prefetch from %s failed: %s %s", peer, err.code().name, err.details())

    def _channel(self, peer: str) -> grpc.aio.Channel:
        ch = self._channels.get(peer)
        if ch is None:
            ch = self._channels[peer] = self._open(peer)
        return ch
