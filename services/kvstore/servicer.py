"""KVStore gRPC servicer: protobuf <-> the tiered store. Calls that may touch the disk run in a
worker thread so that the event loop keeps answering the node's other workers."""

from __future__ import annotations

import asyncio
import logging

import grpc

from services.kvstore.peers import PeerPuller
from strata.kvtier.blocks import StoredBlock
from strata.kvtier.hashing import from_bytes, to_bytes
from strata.kvtier.tiered_store import Slot, Tier, TieredStore
from strata.v1 import kvstore_pb2, kvstore_pb2_grpc

log = logging.getLogger(__name__)

MAX_HASHES = 4096
MAX_RESERVE = 1024


class KVStoreServicer(kvstore_pb2_grpc.KVStoreServicer):
    def __init__(self, store: TieredStore, peers: PeerPuller, shm_path: str = ""):
        self.store = store
        self.shm_path = shm_path
        self.peers = peers

    # -- byte path ---------------------------------------------------------------------------
    async def PutBlocks(self, request, context):
        blocks = [
            StoredBlock(await _hash(b.block_hash, context), b.layout, b.data, b.checksum)
            for b in request.blocks
        ]
        stored = await asyncio.to_thread(lambda: sum(self.store.put_bytes(b) for b in blocks))
        return kvstore_pb2.PutBlocksResponse(stored=stored)

    async def GetBlocks(self, request, context):
        hashes = await _hashes(request.block_hashes, context)
        blocks = await asyncio.to_thread(self.store.read_prefix, hashes)
        return kvstore_pb2.GetBlocksResponse(blocks=[_pb_block(b) for b in blocks])

    async def StreamBlocks(self, request, context):
        hashes = await _hashes(request.block_hashes, context)
        for start in range(0, len(hashes), 8):
            chunk = hashes[start : start + 8]
            blocks = await asyncio.to_thread(self.store.read_prefix, chunk)
            for b in blocks:
                yield _pb_block(b)
            if len(blocks) < len(chunk):
                return

    async def Lookup(self, request, context):
        hashes = await _hashes(request.block_hashes, context)
        n, host, disk = self.store.lookup(hashes)
        return kvstore_pb2.LookupResponse(prefix_blocks=n, host_blocks=host, disk_blocks=disk)

    # -- shared-memory path -------------------------------------------------------------------
    async def Attach(self, request, context):
        return kvstore_pb2.AttachResponse(shm_path=self.shm_path, shm_bytes=self.store.segment.size)

    async def Reserve(self, request, context):
        if not 0 < request.count <= MAX_RESERVE:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"count must be between 1 and {MAX_RESERVE}, got {request.count}",
            )
        if not self.store.alloc.fits(request.block_bytes):
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"a {request.block_bytes}-byte block does not fit this store's "
                f"{self.store.alloc.slab_bytes}-byte slabs; raise "
                f"STRATA_KVSTORE_SLAB_BYTES or use the byte path",
            )
        slots = await asyncio.to_thread(self.store.reserve, request.block_bytes, request.count)
        return kvstore_pb2.ReserveResponse(
            offsets=[s.offset for s in slots], tickets=[s.ticket for s in slots]
        )

    async def Commit(self, request, context):
        if len(request.unused_offsets) != len(request.unused_tickets):
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"unused_offsets ({len(request.unused_offsets)}) and "
                f"unused_tickets ({len(request.unused_tickets)}) must pair up",
            )
        blocks = [
            (Slot(b.offset, b.ticket), b.block_hash, b.layout, b.checksum) for b in request.blocks
        ]
        unused = [Slot(o, t) for o, t in zip(request.unused_offsets, request.unused_tickets)]
        stored, dups, rejected = await asyncio.to_thread(self.store.commit, blocks, unused)
        return kvstore_pb2.CommitResponse(stored=stored, duplicates=dups, rejected=rejected)

    async def Acquire(self, request, context):
        hashes = _check_count(list(request.block_hashes))
        if hashes is None:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"at most {MAX_HASHES} block hashes per call"
            )
        pinned, lease, on_disk = await asyncio.to_thread(
            self.store.acquire, hashes, request.promote
        )
        return kvstore_pb2.AcquireResponse(
            blocks=[
                kvstore_pb2.PinnedBlock(
                    block_hash=p.block_hash,
                    offset=p.offset,
                    nbytes=p.nbytes,
                    layout=p.layout,
                    checksum=p.checksum,
                )
                for p in pinned
            ],
            lease_id=lease,
            disk_blocks=on_disk,
        )

    async def Release(self, request, context):
        self.store.release(list(request.lease_ids), request.moved)
        return kvstore_pb2.ReleaseResponse()

    async def Prefetch(self, request, context):
        hashes = _check_count(list(request.block_hashes))
        if hashes is None:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"at most {MAX_HASHES} block hashes per call"
            )
        if request.peer_address:
            held, _, _ = self.store.lookup(hashes)
            if held < len(hashes):
                self.peers.pull_in_background(request.peer_address, hashes)
        host, queued = self.store.prefetch(hashes)
        return kvstore_pb2.PrefetchResponse(host_blocks=host, queued_promotions=queued)

    async def NoteDeviceBlocks(self, request, context):
        if not request.worker_id:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                "worker_id is required: device blocks are tracked per worker",
            )
        self.store.note_device(
            request.worker_id, list(request.stored), list(request.removed), request.reset
        )
        return kvstore_pb2.DeviceBlocksResponse()

    # -- cross-node ---------------------------------------------------------------------------
    async def Pull(self, request, context):
        if not request.peer_address:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                "peer_address is required: the store to pull blocks from",
            )
        hashes = _check_count(list(request.block_hashes))
        if hashes is None:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"at most {MAX_HASHES} block hashes per call"
            )
        try:
            pulled = await self.peers.pull(request.peer_address, hashes)
        except grpc.aio.AioRpcError as err:
            await context.abort(
                grpc.StatusCode.UNAVAILABLE,
                f"peer store {request.peer_address} failed: {err.code().name} {err.details()}",
            )
        return kvstore_pb2.PullResponse(pulled=pulled)

    # -- stats --------------------------------------------------------------------------------
    async def GetStats(self, request, context):
        return store_stats(self.store)


def store_stats(s: TieredStore) -> kvstore_pb2.KVStats:
    """The store's figures, as GetStats answers and /metrics exports them."""
    c = s.counters
    counts = s.tier_counts()
    disk_cap = s.disk.capacity_bytes if s.disk is not None else 0
    node_blocks, device_blocks = s.node_blocks()
    tiers = [
        kvstore_pb2.TierStats(
            tier="host",
            blocks=counts[Tier.HOST][0],
            bytes_used=counts[Tier.HOST][1],
            bytes_capacity=s.alloc.capacity_bytes,
            hits=c.host_hits,
            evictions=c.host_evictions,
            migrations_in=c.promotions,
        ),
        kvstore_pb2.TierStats(
            tier="disk",
            blocks=counts[Tier.DISK][0],
            bytes_used=counts[Tier.DISK][1],
            bytes_capacity=disk_cap,
            hits=c.disk_hits,
            evictions=c.disk_evictions,
            migrations_in=c.demotions,
        ),
    ]
    return kvstore_pb2.KVStats(
        blocks=len(s),
        bytes_used=counts[Tier.HOST][1] + counts[Tier.DISK][1],
        bytes_capacity=s.alloc.capacity_bytes + disk_cap,
        hits=c.host_hits + c.disk_hits,
        misses=c.misses,
        evictions=c.host_evictions + c.disk_evictions,
        checksum_failures=c.checksum_failures,
        tiers=tiers,
        device_blocks=device_blocks,
        pinned_blocks=s.pinned_blocks(),
        reserved_bytes=s.reserved_bytes(),
        pressure=s.pressure,
        recovered_blocks=c.recovered,
        dropped_corrupt=c.dropped_corrupt,
        peer_blocks_pulled=c.peer_pulled,
        reserve_refused=c.reserve_refused,
        node_blocks=node_blocks,
    )


def _pb_block(b: StoredBlock) -> kvstore_pb2.KVBlock:
    return kvstore_pb2.KVBlock(
        block_hash=to_bytes(b.block_hash), layout=b.layout, data=b.data, checksum=b.checksum
    )


def _check_count(hashes: list[int]) -> list[int] | None:
    return hashes if len(hashes) <= MAX_HASHES else None


async def _hash(raw: bytes, context: grpc.aio.ServicerContext) -> int:
    try:
        return from_bytes(raw)
    except ValueError as err:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"bad block hash: {err}")
        raise  # abort raises; this line only satisfies type checkers


async def _hashes(raw: list[bytes], context: grpc.aio.ServicerContext) -> list[int]:
    if len(raw) > MAX_HASHES:
        await context.abort(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"at most {MAX_HASHES} block hashes per call, got {len(raw)}",
        )
    return [await _hash(r, context) for r in raw]
