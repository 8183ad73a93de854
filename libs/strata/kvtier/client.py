"""Client of a node's KV tier store, used from the engine thread.

Offloads are fire-and-forget through a bounded queue drained by one background thread, so an
eviction never waits on the network; when the queue is full the block is dropped and counted
(it was an evicted cache entry: losing it costs a recompute, never a wrong answer). Loads are
synchronous: the engine asked because it is about to use the blocks.
"""

from __future__ import annotations

import logging
import queue
import threading
from dataclasses import dataclass

import grpc

from strata.kvtier import hashing
from strata.rpc.server import CHANNEL_OPTIONS
from strata.rpc.v1 import kvstore_pb2, kvstore_pb2_grpc

log = logging.getLogger(__name__)


@dataclass(slots=True)
class FetchedBlock:
    block_hash: int
    data: bytes
    layout: str


class TierClient:
    def __init__(self, address: str, timeout_s: float = 5.0, queue_size: int = 256):
        self.address = address
        self.timeout_s = timeout_s
        self._channel = grpc.insecure_channel(address, options=CHANNEL_OPTIONS)
        self._stub = kvstore_pb2_grpc.KVStoreStub(self._channel)
        self._queue: queue.Queue[kvstore_pb2.KVBlock | threading.Event] = queue.Queue(maxsize=queue_size)
        self.offloaded = 0
        self.dropped = 0
        self.failed = 0
        self._thread = threading.Thread(target=self._drain, name="kv-offload", daemon=True)
        self._thread.start()

    def put_async(self, block_hash: int, data: bytes, layout: str) -> None:
        msg = kvstore_pb2.KVBlock(block_hash=hashing.to_bytes(block_hash), layout=layout,
                                  data=data, checksum=hashing.checksum(data))
        try:
            self._queue.put_nowait(msg)
        except queue.Full:
            self.dropped += 1

    def lookup(self, hashes: list[int]) -> int:
        req = kvstore_pb2.LookupRequest(block_hashes=[hashing.to_bytes(h) for h in hashes])
        return self._stub.Lookup(req, timeout=self.timeout_s).prefix_blocks

    def get(self, hashes: list[int]) -> list[FetchedBlock]:
        """The longest stored prefix of `hashes`; blocks whose checksum fails end the prefix."""
        req = kvstore_pb2.GetBlocksRequest(block_hashes=[hashing.to_bytes(h) for h in hashes])
        resp = self._stub.GetBlocks(req, timeout=self.timeout_s)
        out = []
        for want, blk in zip(hashes, resp.blocks):
            got = hashing.from_bytes(blk.block_hash)
            if got != want or hashing.checksum(blk.data) != blk.checksum:
                log.warning("kv store returned a bad block (hash %x, wanted %x): ignoring the rest",
                            got, want)
                break
            out.append(FetchedBlock(got, blk.data, blk.layout))
        return out

    def flush(self, timeout_s: float = 5.0) -> None:
        """Wait until queued offloads were sent (tests and graceful shutdown)."""
        done = threading.Event()
        self._queue.put(done)
        done.wait(timeout_s)

    def close(self) -> None:
        self._channel.close()

    def _drain(self) -> None:
        while True:
            batch = [self._queue.get()]
            while len(batch) < 16:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            markers = [b for b in batch if isinstance(b, threading.Event)]
            blocks = [b for b in batch if not isinstance(b, threading.Event)]
            if blocks:
                try:
                    self._stub.PutBlocks(kvstore_pb2.PutBlocksRequest(blocks=blocks),
                                         timeout=self.timeout_s)
                    self.offloaded += len(blocks)
                except grpc.RpcError as err:
                    self.failed += len(blocks)
                    log.warning("offloading %d KV blocks to %s failed: %s", len(blocks),
                                self.address, err.code())
            for marker in markers:
                marker.set()
