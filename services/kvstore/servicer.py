"""KVStore gRPC servicer: protobuf <-> the host tier."""

from __future__ import annotations

import grpc

from strata.kvtier.hashing import from_bytes, to_bytes
from strata.kvtier.host_tier import HostTier, StoredBlock
from strata.rpc.v1 import kvstore_pb2, kvstore_pb2_grpc

MAX_HASHES = 4096


class KVStoreServicer(kvstore_pb2_grpc.KVStoreServicer):
    def __init__(self, tier: HostTier):
        self.tier = tier

    async def PutBlocks(self, request: kvstore_pb2.PutBlocksRequest,
                        context: grpc.aio.ServicerContext) -> kvstore_pb2.PutBlocksResponse:
        stored = evicted = 0
        for blk in request.blocks:
            h = await _hash(blk.block_hash, context)
            ok, ev = self.tier.put(StoredBlock(h, blk.layout, blk.data, blk.checksum))
            stored += ok
            evicted += ev
        return kvstore_pb2.PutBlocksResponse(stored=stored, evicted=evicted)

    async def GetBlocks(self, request: kvstore_pb2.GetBlocksRequest,
                        context: grpc.aio.ServicerContext) -> kvstore_pb2.GetBlocksResponse:
        hashes = await _hashes(request.block_hashes, context)
        blocks = self.tier.get_prefix(hashes)
        return kvstore_pb2.GetBlocksResponse(blocks=[
            kvstore_pb2.KVBlock(block_hash=to_bytes(b.block_hash), layout=b.layout, data=b.data,
                                checksum=b.checksum) for b in blocks])

    async def Lookup(self, request: kvstore_pb2.LookupRequest,
                     context: grpc.aio.ServicerContext) -> kvstore_pb2.LookupResponse:
        hashes = await _hashes(request.block_hashes, context)
        return kvstore_pb2.LookupResponse(prefix_blocks=self.tier.prefix_len(hashes))

    async def GetStats(self, request: kvstore_pb2.KVStatsRequest,
                       context: grpc.aio.ServicerContext) -> kvstore_pb2.KVStats:
        s = self.tier.stats
        return kvstore_pb2.KVStats(
            blocks=len(self.tier), bytes_used=self.tier.bytes_used,
            bytes_capacity=self.tier.capacity_bytes, hits=s.hits, misses=s.misses,
            evictions=s.evictions, checksum_failures=s.checksum_failures)


async def _hash(raw: bytes, context: grpc.aio.ServicerContext) -> int:
    try:
        return from_bytes(raw)
    except ValueError as err:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"bad block hash: {err}")
        raise  # abort raises; this line only satisfies type checkers


async def _hashes(raw: list[bytes], context: grpc.aio.ServicerContext) -> list[int]:
    if len(raw) > MAX_HASHES:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                            f"at most {MAX_HASHES} block hashes per call, got {len(raw)}")
    return [await _hash(r, context) for r in raw]
