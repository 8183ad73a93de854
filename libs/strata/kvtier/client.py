"""A worker's client of its node's KV tier store.

Shared-memory path (the store's segment is mappable from here): the client keeps a few host slots
reserved per block size, so an evicted device block is copied straight into host memory on the
engine thread (one memcpy, no RPC, no waiting) and committed in the background; loads Acquire a
pinned prefix and copy it out of the segment. Byte path (no shared memory, e.g. the store runs
in another container without a shared IPC namespace): blocks travel inside PutBlocks/GetBlocks.

Everything that does not have to be synchronous — commits, releases, prefetches, device-block
notes, slot top-ups — goes through one bounded queue drained by one background thread, so an
eviction never waits on the network. A top-up also maps the new slots' pages into this process
(ShmSegment.prefault), so an eviction's copy does not fault them in on the engine thread.
When no slot is reserved (the store is under pressure) or the queue is full, the evicted block
is dropped and counted: it was a cache entry, so losing it costs a recompute, never a wrong
answer.

A store that restarts (a crash, kill -9, an upgrade) makes a new segment at the same path. The
background thread notices the file is no longer the one it mapped, maps the new one, and drops
the slots it held in the old store (their tickets mean nothing to the new one); until then a
load reads the old mapping and fails its checksum, so it is recomputed, never served wrong.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass

import grpc

from strata.kvtier import hashing
from strata.kvtier.shm_segment import ShmSegment
from strata.kvtier.tiered_store import RESERVATION_TTL_S, Slot
from strata.rpc.channels import sync_channel
from strata.security.identity import ClusterIdentity
from strata.v1 import kvstore_pb2, kvstore_pb2_grpc

log = logging.getLogger(__name__)

# Reserved slots kept per block size, at most 1/8 of the segment: one long prompt's allocation
# evicts up to its own size in cached blocks at once, and a burst that empties the reserve costs
# the engine thread a synchronous Reserve.
SLOT_TARGET = 64
SLOT_SHARE = 8
COMMIT_BATCH = 64
REFUSAL_BACKOFF_S = 0.1  # after the store refused slots, drop evictions this long before asking


@dataclass(slots=True)
class FetchedBlock:
    block_hash: int
    data: bytes | memoryview  # a view into shared memory on the shm path (pinned)
    layout: str
    checksum: int


@dataclass(slots=True)
class _Commit:
    slot: Slot
    nbytes: int
    block_hash: int
    layout: str


@dataclass(slots=True)
class _Release:
    lease_id: int
    moved: bool


@dataclass(slots=True)
class _Prefetch:
    hashes: list[int]
    peer: str


@dataclass(slots=True)
class _Device:
    stored: list[int]
    removed: list[int]


class TierClient:
    def __init__(
        self,
        address: str,
        timeout_s: float = 5.0,
        queue_size: int = 4096,
        worker_id: str = "",
        use_shm: bool = True,
        identity: ClusterIdentity | None = None,
    ):
        """`identity`: the cluster credential to call the store with (default: the one this
        process installed)."""
        self.address = address
        self.timeout_s = timeout_s
        self.worker_id = worker_id or uuid.uuid4().hex[:12]
        self._channel = sync_channel(address, identity)
        self._stub = kvstore_pb2_grpc.KVStoreStub(self._channel)
        self._queue: queue.Queue = queue.Queue(maxsize=queue_size)
        self._segment_inode: int | None = None
        self.reattached = 0  # times the store restarted and its new segment was mapped
        self.segment: ShmSegment | None = self._attach() if use_shm else None
        self._slots: dict[int, deque[tuple[Slot, float]]] = {}  # (slot, reserved at)
        self._stale: deque[Slot] = deque()
        self._slot_target: dict[int, int] = {}
        self._refill = threading.Event()
        self._refused_until = 0.0
        self._closed = False
        self.offloaded = 0  # blocks handed to the store
        self.dropped = 0  # evicted blocks lost: no slot, queue full
        self.failed = 0  # blocks an RPC failed to deliver
        self.prefetched = 0  # prefix blocks the store promoted or pulled ahead of time
        self.notes_dropped = 0  # device notes, prefetches and releases lost to a full queue
        self._thread = threading.Thread(target=self._drain, name="kv-tier-client", daemon=True)
        self._thread.start()
        self._note(_Device([], []), reset=True)

    @property
    def shared_memory(self) -> bool:
        return self.segment is not None

    def _attach(self) -> ShmSegment | None:
        try:
            resp = self._stub.Attach(kvstore_pb2.AttachRequest(), timeout=self.timeout_s)
            if not resp.shm_path:
                return None
            inode = os.stat(resp.shm_path).st_ino
            segment = ShmSegment(resp.shm_path, resp.shm_bytes, create=False)
            self._segment_inode = inode
            return segment
        except (grpc.RpcError, OSError, ValueError) as err:
            log.warning(
                "KV tier store %s: shared memory unavailable (%s); using the byte path",
                self.address,
                err,
            )
            return None

    def _segment_replaced(self) -> bool:
        """Whether the store's segment file is gone or no longer the one mapped here."""
        if self.segment is None:
            return False
        try:
            return os.stat(self.segment.path).st_ino != self._segment_inode
        except FileNotFoundError:
            return True

    def _reattach(self) -> None:
        """Map the restarted store's segment and forget the old store's slots; a store still
        down is tried again on the next round."""
        try:
            resp = self._stub.Attach(kvstore_pb2.AttachRequest(), timeout=self.timeout_s)
            inode = os.stat(resp.shm_path).st_ino
            segment = ShmSegment(resp.shm_path, resp.shm_bytes, create=False)
        except (grpc.RpcError, OSError, ValueError):
            return
        # The old mapping stays open: the engine thread may be copying through it right now,
        # and what it writes there is rejected by the new store's tickets.
        self.segment, self._segment_inode = segment, inode
        for slots in self._slots.values():
            slots.clear()
        self._stale.clear()
        self._refused_until = 0.0
        self._refill.set()
        self.reattached += 1
        log.info(
            "KV tier store %s restarted: mapped its new segment %s", self.address, resp.shm_path
        )

    # -- writes (engine thread) -----------------------------------------------------------------
    def prepare(self, nbytes: int) -> None:
        """Start keeping slots of this size reserved (the engine's block size)."""
        if self.segment is None or nbytes in self._slot_target:
            return
        target = max(1, min(SLOT_TARGET, self.segment.size // nbytes // SLOT_SHARE))
        self._slot_target[nbytes] = target
        self._slots[nbytes] = deque()
        self._refill.set()
        self._wake()

    def take_slot(self, nbytes: int) -> tuple[Slot, memoryview] | None:
        """A reserved host slot and a view of it to copy one block into; None: no slot free."""
        slots = self._slots.get(nbytes)
        if slots is None:
            return None
        self._drop_stale(slots)
        if not slots and not self._reserve_now(nbytes):
            self.dropped += 1
            return None
        slot, _ = slots.popleft()
        if len(slots) < self._slot_target[nbytes] // 2:
            self._refill.set()
            self._wake()
        assert self.segment is not None
        return slot, self.segment.read(slot.offset, nbytes)

    def _reserve_now(self, nbytes: int) -> bool:
        """A burst of evictions emptied the reserve: ask once, synchronously, rather than drop
        the burst (a long prompt can evict hundreds of cached blocks in one allocation). After
        a refusal (the store is under pressure) evictions drop without asking for a while."""
        now = time.monotonic()
        if now < self._refused_until:
            return False
        try:
            resp = self._stub.Reserve(
                kvstore_pb2.ReserveRequest(block_bytes=nbytes, count=self._slot_target[nbytes]),
                timeout=self.timeout_s,
            )
        except grpc.RpcError as err:
            log.warning("reserving host slots on %s failed: %s", self.address, err.code())
            resp = kvstore_pb2.ReserveResponse()
        if not resp.offsets:
            self._refused_until = now + REFUSAL_BACKOFF_S
            return False
        self._slots[nbytes].extend((Slot(o, t), now) for o, t in zip(resp.offsets, resp.tickets))
        return True

    def _drop_stale(self, slots: deque[tuple[Slot, float]]) -> None:
        """Give back slots held so long that the store could reclaim them (its reservations
        expire so that a killed worker's slots do not leak): never write into such a slot."""
        limit = time.monotonic() - RESERVATION_TTL_S / 2
        while slots and slots[0][1] < limit:
            self._stale.append(slots.popleft()[0])

    def commit_slot(self, slot: Slot, block_hash: int, layout: str, nbytes: int) -> None:
        """The slot from take_slot now holds block_hash."""
        self._enqueue(_Commit(slot, nbytes, block_hash, layout))

    def put_async(self, block_hash: int, data: bytes, layout: str) -> None:
        """Byte path write."""
        self._enqueue(
            kvstore_pb2.KVBlock(
                block_hash=hashing.to_bytes(block_hash),
                layout=layout,
                data=data,
                checksum=hashing.checksum(data),
            )
        )

    def note_device(self, stored: list[int], removed: list[int]) -> None:
        """Blocks that entered or left this worker's device pool (node-level routing events)."""
        self._note(_Device(stored, removed), reset=False)

    def prefetch(self, hashes: list[int], peer: str = "") -> None:
        if hashes:
            self._enqueue(_Prefetch(hashes, peer))

    # -- reads (engine thread, synchronous: the engine is about to use the blocks) -----------------
    def lookup(self, hashes: list[int]) -> int:
        req = kvstore_pb2.LookupRequest(block_hashes=[hashing.to_bytes(h) for h in hashes])
        return self._stub.Lookup(req, timeout=self.timeout_s).prefix_blocks

    def acquire(self, hashes: list[int]) -> tuple[list[FetchedBlock], int]:
        """The longest stored prefix (disk blocks promoted) and a lease to release, or 0."""
        if self.segment is None:
            return self._get_bytes(hashes), 0
        resp = self._stub.Acquire(
            kvstore_pb2.AcquireRequest(block_hashes=hashes, promote=True), timeout=self.timeout_s
        )
        out = []
        for want, p in zip(hashes, resp.blocks):
            if p.block_hash != want:
                break
            out.append(
                FetchedBlock(want, self.segment.read(p.offset, p.nbytes), p.layout, p.checksum)
            )
        return out, resp.lease_id

    def release(self, lease_id: int, moved: bool) -> None:
        if lease_id:
            self._enqueue(_Release(lease_id, moved), block=True)

    def get(self, hashes: list[int]) -> list[FetchedBlock]:
        return self._get_bytes(hashes)

    def _get_bytes(self, hashes: list[int]) -> list[FetchedBlock]:
        req = kvstore_pb2.GetBlocksRequest(block_hashes=[hashing.to_bytes(h) for h in hashes])
        resp = self._stub.GetBlocks(req, timeout=self.timeout_s)
        out = []
        for want, blk in zip(hashes, resp.blocks):
            got = hashing.from_bytes(blk.block_hash)
            if got != want or hashing.checksum(blk.data) != blk.checksum:
                log.warning(
                    "kv store returned a bad block (hash %x, wanted %x): ignoring the rest",
                    got,
                    want,
                )
                break
            out.append(FetchedBlock(got, blk.data, blk.layout, blk.checksum))
        return out

    # -- lifecycle -------------------------------------------------------------------------------
    def flush(self, timeout_s: float = 5.0) -> None:
        """Wait until everything queued so far was sent (tests and graceful shutdown)."""
        done = threading.Event()
        self._queue.put(done)
        done.wait(timeout_s)

    def close(self) -> None:
        self.flush()
        unused = [slot for slots in self._slots.values() for slot, _ in slots] + list(self._stale)
        if unused:
            try:
                self._stub.Commit(_give_back(unused), timeout=self.timeout_s)
            except grpc.RpcError as err:
                log.warning(
                    "returning %d reserved slots failed (%s); the store reclaims them "
                    "when their reservation expires",
                    len(unused),
                    err.code(),
                )
        self._closed = True
        self._wake()
        self._thread.join(self.timeout_s)
        self._channel.close()

    def _enqueue(self, item: object, block: bool = False) -> None:
        try:
            # Releases must not be lost (they unpin host blocks); everything else may be.
            self._queue.put(item, block=block, timeout=self.timeout_s if block else None)
        except queue.Full:
            # A lost block write is a lost cache entry; a lost note or prefetch only delays
            # routing information or a promotion, so the two are counted apart.
            if isinstance(item, (_Commit, kvstore_pb2.KVBlock)):
                self.dropped += 1
            else:
                self.notes_dropped += 1

    def _note(self, item: _Device, reset: bool) -> None:
        self._enqueue((item, reset))

    def _wake(self) -> None:
        try:
            self._queue.put_nowait(None)
        except queue.Full:
            pass  # the drain thread is busy and will see the refill flag on its next round

    # -- background thread ---------------------------------------------------------------------
    def _drain(self) -> None:
        while True:
            try:
                batch = [self._queue.get(timeout=RESERVATION_TTL_S / 4)]
            except queue.Empty:
                batch = [None]
                self._refill.set()  # idle: still refresh reservations before they age out
            if self._closed:
                return
            if self._segment_replaced():
                self._reattach()
            while len(batch) < 256:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            try:
                self._send(batch)
            except grpc.RpcError as err:
                log.warning(
                    "KV tier store %s: %s; %d queued operations lost",
                    self.address,
                    err.code() if hasattr(err, "code") else err,
                    len(batch),
                )
                self.failed += sum(isinstance(b, (_Commit, kvstore_pb2.KVBlock)) for b in batch)
            if self._refill.is_set():
                self._refill.clear()
                try:
                    self._top_up()
                except grpc.RpcError as err:
                    log.warning(
                        "reserving host slots on %s failed: %s",
                        self.address,
                        err.code() if hasattr(err, "code") else err,
                    )
            for marker in batch:
                if isinstance(marker, threading.Event):
                    marker.set()

    def _send(self, batch: list) -> None:
        commits = [b for b in batch if isinstance(b, _Commit)]
        puts = [b for b in batch if isinstance(b, kvstore_pb2.KVBlock)]
        releases = [b for b in batch if isinstance(b, _Release)]
        notes = [b for b in batch if isinstance(b, tuple)]
        for start in range(0, len(commits), COMMIT_BATCH):
            self._commit(commits[start : start + COMMIT_BATCH])
        for start in range(0, len(puts), 16):
            chunk = puts[start : start + 16]
            self._stub.PutBlocks(kvstore_pb2.PutBlocksRequest(blocks=chunk), timeout=self.timeout_s)
            self.offloaded += len(chunk)
        if notes:
            stored: list[int] = []
            removed: list[int] = []
            reset = any(r for _, r in notes)
            for note, _ in notes:
                stored.extend(note.stored)
                removed.extend(note.removed)
            self._stub.NoteDeviceBlocks(
                kvstore_pb2.DeviceBlocksRequest(
                    worker_id=self.worker_id, stored=stored, removed=removed, reset=reset
                ),
                timeout=self.timeout_s,
            )
        for moved in (True, False):
            ids = [r.lease_id for r in releases if r.moved == moved]
            if ids:
                self._stub.Release(
                    kvstore_pb2.ReleaseRequest(lease_ids=ids, moved=moved), timeout=self.timeout_s
                )
        for p in (b for b in batch if isinstance(b, _Prefetch)):
            resp = self._stub.Prefetch(
                kvstore_pb2.PrefetchRequest(block_hashes=p.hashes, peer_address=p.peer),
                timeout=self.timeout_s,
            )
            self.prefetched += resp.queued_promotions

    def _commit(self, commits: list[_Commit]) -> None:
        assert self.segment is not None
        blocks = [
            kvstore_pb2.CommittedBlock(
                offset=c.slot.offset,
                ticket=c.slot.ticket,
                block_hash=c.block_hash,
                layout=c.layout,
                checksum=hashing.checksum(self.segment.read(c.slot.offset, c.nbytes)),
            )
            for c in commits
        ]
        resp = self._stub.Commit(kvstore_pb2.CommitRequest(blocks=blocks), timeout=self.timeout_s)
        self.offloaded += resp.stored + resp.duplicates
        self.failed += resp.rejected

    def _top_up(self) -> None:
        for nbytes, target in self._slot_target.items():
            slots = self._slots[nbytes]
            self._drop_stale(slots)
            want = target - len(slots)
            if want > 0:
                resp = self._stub.Reserve(
                    kvstore_pb2.ReserveRequest(block_bytes=nbytes, count=want),
                    timeout=self.timeout_s,
                )
                if self.segment is not None:
                    self.segment.prefault((o, nbytes) for o in resp.offsets)
                now = time.monotonic()
                slots.extend((Slot(o, t), now) for o, t in zip(resp.offsets, resp.tickets))
        stale = []
        while self._stale:
            stale.append(self._stale.popleft())
        if stale:
            self._stub.Commit(_give_back(stale), timeout=self.timeout_s)


def _give_back(slots: list[Slot]) -> kvstore_pb2.CommitRequest:
    return kvstore_pb2.CommitRequest(
        unused_offsets=[s.offset for s in slots], unused_tickets=[s.ticket for s in slots]
    )
