"""One node's lower KV tiers: host memory (a shared-memory segment) over disk, and the directory.

    directory: block hash -> Entry(tier=HOST at a slot offset | tier=DISK, pins, moving)

Every block lives in exactly one tier of the store (one copy per node: a block a worker loads
into its device pool is handed over with Release(moved=True) and written back on eviction).
Writers (workers on the node) Reserve slots, copy blocks into shared memory themselves and
Commit them; the store verifies each checksum before the block becomes visible. Readers Acquire
a prefix: its host blocks are pinned (a pinned block is never moved or freed) until Release or
the lease expires (a killed worker's pins do not leak).

Migrations move one block at a time in the order copy -> switch the directory entry -> free the
source, without holding the directory lock during I/O; an entry being moved is marked `moving`
and stays readable in its old tier, and a demotion whose block was pinned meanwhile is undone.
The host tier demotes its lowest-priority blocks (the TierPolicy) to disk when it runs above the
high watermark (migrator.py) or when a writer needs room; disk, the last tier, drops its LRU
blocks. Nothing here waits on a full tier: Reserve returns fewer slots (the writer drops the
evicted block, a cache loss) and `pressure` tells the node manager.

Lock order: `_disk_lock` may be held while taking `_lock`, never the reverse.
"""

from __future__ import annotations

import enum
import itertools
import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from strata.kvtier.blocks import StoredBlock
from strata.kvtier.disk_tier import DiskTier
from strata.kvtier.hashing import checksum
from strata.kvtier.heat import HeatTable
from strata.kvtier.presence import NodePresence
from strata.kvtier.shm_segment import ShmSegment
from strata.kvtier.slab_allocator import SlabAllocator
from strata.policy.kv_tiering import BlockHeat, TierPolicy

log = logging.getLogger(__name__)


# Pins and reservations a reader or writer did not give back expire (a killed worker's must not
# leak); clients hand back reservations at half this age, so a live one never loses a slot.
RESERVATION_TTL_S = 30.0


class Tier(enum.Enum):
    HOST = "host"
    DISK = "disk"


@dataclass(slots=True)
class Entry:
    block_hash: int
    layout: str
    nbytes: int
    checksum: int
    tier: Tier
    offset: int = -1  # host slot while tier is HOST
    pins: int = 0
    moving: bool = False  # a migration is copying this block
    free_on_unpin: bool = False


@dataclass(slots=True, frozen=True)
class Slot:
    """A reserved host slot. The ticket tells this reservation from a later one of the same
    offset: a writer whose reservation expired can never commit into (or free) the next
    holder's slot."""

    offset: int
    ticket: int


@dataclass(slots=True)
class Pinned:
    block_hash: int
    offset: int
    nbytes: int
    layout: str
    checksum: int


@dataclass(slots=True)
class StoreCounters:
    """The tier store's cumulative counters (KVStore.GetStats)."""

    host_hits: int = 0
    disk_hits: int = 0
    misses: int = 0
    host_evictions: int = 0  # dropped from the node out of host memory (no disk tier)
    disk_evictions: int = 0  # dropped from the node by the disk tier's LRU
    demotions: int = 0  # host -> disk
    promotions: int = 0  # disk -> host
    checksum_failures: int = 0
    dropped_corrupt: int = 0
    recovered: int = 0
    reserve_refused: int = 0
    duplicates: int = 0
    handed_over: int = 0  # released into a worker's device pool
    peer_pulled: int = 0


@dataclass(slots=True)
class _Lease:
    hashes: list[int]
    expires: float


class TieredStore:
    def __init__(
        self,
        segment: ShmSegment,
        slab_bytes: int,
        disk: DiskTier | None,
        policy: TierPolicy,
        clock: Callable[[], float],
        high_watermark: float = 0.90,
        low_watermark: float = 0.75,
        lease_ttl_s: float = RESERVATION_TTL_S,
        half_life_s: float = 60.0,
    ):
        if not 0 < low_watermark < high_watermark <= 1:
            raise ValueError(
                f"need 0 < low_watermark < high_watermark <= 1, got "
                f"{low_watermark}, {high_watermark}"
            )
        self.segment = segment
        self.alloc = SlabAllocator(segment.size, slab_bytes)
        self.disk = disk
        self.policy = policy
        self.clock = clock
        self.high_watermark = high_watermark
        self.low_watermark = low_watermark
        self.lease_ttl_s = lease_ttl_s
        self.heat = HeatTable(half_life_s)
        self.presence = NodePresence()
        self.counters = StoreCounters()
        self.pressure = False
        self._dir: dict[int, Entry] = {}
        # offset -> (nbytes, expires, ticket)
        self._reserved: dict[int, tuple[int, float, int]] = {}
        self._tickets = itertools.count(1)
        self._reserved_bytes = 0
        self._leases: dict[int, _Lease] = {}
        self._lease_ids = itertools.count(1)
        self._promote_queue: deque[int] = deque()
        self._queued: set[int] = set()
        self._lock = threading.Lock()
        self._moved = threading.Condition(self._lock)  # an entry stopped moving
        self._disk_lock = threading.Lock()
        self.work = threading.Event()  # wakes the migrator
        if disk is not None:
            disk.on_evict = self._on_disk_evict
            for h, layout, size, crc in disk.entries():
                self._dir[h] = Entry(h, layout, size, crc, Tier.DISK)
                self.presence.add(h)
            self.counters.recovered = len(disk)
            self.counters.dropped_corrupt = disk.stats.dropped

    # -- queries -------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._dir)

    def tier_of(self, block_hash: int) -> Tier | None:
        with self._lock:
            e = self._dir.get(block_hash)
            return None if e is None else e.tier

    def lookup(self, hashes: list[int]) -> tuple[int, int, int]:
        """(leading blocks held, of them in host, of them on disk)."""
        host = disk = 0
        with self._lock:
            for h in hashes:
                e = self._dir.get(h)
                if e is None:
                    break
                if e.tier is Tier.HOST:
                    host += 1
                else:
                    disk += 1
        return host + disk, host, disk

    def host_bytes(self) -> int:
        """Bytes of committed host blocks (reserved slots not included)."""
        with self._lock:
            return self._committed_bytes()

    def reserved_bytes(self) -> int:
        with self._lock:
            return self._reserved_bytes

    def tier_counts(self) -> dict[Tier, tuple[int, int]]:
        """Per tier: (blocks, bytes)."""
        out = {Tier.HOST: [0, 0], Tier.DISK: [0, 0]}
        with self._lock:
            for e in self._dir.values():
                out[e.tier][0] += 1
                out[e.tier][1] += e.nbytes
        return {t: (b, n) for t, (b, n) in out.items()}

    def pinned_blocks(self) -> int:
        with self._lock:
            return sum(1 for e in self._dir.values() if e.pins)

    def note_device(
        self, worker_id: str, stored: list[int], removed: list[int], reset: bool
    ) -> None:
        with self._lock:
            self.presence.device_update(worker_id, stored, removed, reset)

    def drain_events(self, reset: bool) -> tuple[list[int], list[int]]:
        """Node-level block events since the last call, or the whole set when `reset`."""
        with self._lock:
            return (self.presence.snapshot(), []) if reset else self.presence.drain()

    def node_blocks(self) -> tuple[int, int]:
        """(distinct blocks on the node over every tier, of them in some device pool)."""
        with self._lock:
            return len(self.presence), self.presence.device_blocks

    # -- writers -------------------------------------------------------------------------------
    def reserve(self, nbytes: int, count: int) -> list[Slot]:
        """Up to `count` slots of nbytes for a writer; fewer (even none) under pressure."""
        if not self.alloc.fits(nbytes):
            raise ValueError(
                f"a {nbytes}-byte block does not fit the host tier's "
                f"{self.alloc.slab_bytes}-byte slabs"
            )
        out: list[Slot] = []
        while len(out) < count:
            with self._lock:
                off = self.alloc.alloc(nbytes)
                if off is not None:
                    ticket = next(self._tickets)
                    self._reserved[off] = (nbytes, self.clock() + self.lease_ttl_s, ticket)
                    self._reserved_bytes += nbytes
                    out.append(Slot(off, ticket))
                    continue
            if not self._make_room(nbytes):
                break
        refused = count - len(out)
        with self._lock:
            self.counters.reserve_refused += refused
            self.pressure = refused > 0
        if self._over_high():
            self.work.set()
        return out

    def commit(
        self, blocks: list[tuple[Slot, int, str, int]], unused: list[Slot]
    ) -> tuple[int, int, int]:
        """Blocks written into reserved slots: (slot, hash, layout, checksum) each.
        Returns (stored, duplicates, rejected)."""
        stored = dups = rejected = 0
        now = self.clock()
        for slot, h, layout, crc in blocks:
            with self._lock:
                nbytes = self._unreserve(slot)
            if nbytes is None:
                rejected += 1
                continue
            offset = slot.offset
            ok = checksum(self.segment.read(offset, nbytes)) == crc
            with self._lock:
                if not ok:
                    self.counters.checksum_failures += 1
                    self.alloc.free(offset)
                    rejected += 1
                elif h in self._dir:
                    self.alloc.free(offset)
                    self.heat.touch(h, now)
                    dups += 1
                else:
                    self._dir[h] = Entry(h, layout, nbytes, crc, Tier.HOST, offset)
                    self.heat.touch(h, now)
                    self.presence.add(h)
                    stored += 1
        with self._lock:
            for slot in unused:
                if self._unreserve(slot) is not None:
                    self.alloc.free(slot.offset)
            self.counters.duplicates += dups
        if self._over_high():
            self.work.set()
        return stored, dups, rejected

    def put_bytes(self, block: StoredBlock) -> bool:
        """The byte path (peers, workers without shared memory): copy in, verify, commit."""
        if checksum(block.data) != block.checksum:
            with self._lock:
                self.counters.checksum_failures += 1
            return False
        with self._lock:
            if block.block_hash in self._dir:
                self.heat.touch(block.block_hash, self.clock())
                self.counters.duplicates += 1
                return True
        slots = self.reserve(len(block.data), 1)
        if not slots:
            return False
        self.segment.write(slots[0].offset, block.data)
        stored, dups, _ = self.commit(
            [(slots[0], block.block_hash, block.layout, block.checksum)], []
        )
        return stored + dups == 1

    # -- readers -------------------------------------------------------------------------------
    def acquire(self, hashes: list[int], promote: bool) -> tuple[list[Pinned], int, int]:
        """Pin the longest host-resident prefix (promoting disk blocks first when asked).
        Returns (pinned, lease id or 0, further prefix blocks left on disk)."""
        pinned: list[Pinned] = []
        on_disk = 0
        now = self.clock()
        i = 0
        while i < len(hashes):
            h = hashes[i]
            with self._lock:
                e = self._wait_still(h)
                if e is None:
                    self.counters.misses += 1
                    break
                if e.tier is Tier.HOST:
                    e.pins += 1
                    self.heat.touch(h, now)
                    self.heat.drop_ref(h)
                    self.counters.host_hits += 1
                    pinned.append(Pinned(h, e.offset, e.nbytes, e.layout, e.checksum))
                    i += 1
                    continue
                if not promote:
                    on_disk = sum(
                        1
                        for _ in itertools.takewhile(
                            lambda x: x in self._dir and self._dir[x].tier is Tier.DISK, hashes[i:]
                        )
                    )
                    break
            if not self._promote(h):
                break
            with self._lock:
                self.counters.disk_hits += 1
        lease = 0
        if pinned:
            lease = next(self._lease_ids)
            with self._lock:
                self._leases[lease] = _Lease([p.block_hash for p in pinned], now + self.lease_ttl_s)
        return pinned, lease, on_disk

    def release(self, lease_ids: list[int], moved: bool) -> None:
        """Unpin; `moved`: the reader holds the blocks in device memory now, free host copies."""
        with self._lock:
            for lease_id in lease_ids:
                lease = self._leases.pop(lease_id, None)
                if lease is not None:
                    self._unpin(lease.hashes, moved)

    def read_prefix(self, hashes: list[int]) -> list[StoredBlock]:
        """Copies of the longest stored prefix (host or disk, nothing promoted): the byte path."""
        out: list[StoredBlock] = []
        for h in hashes:
            with self._lock:
                e = self._dir.get(h)
                if e is None:
                    self.counters.misses += 1
                    break
                if e.tier is Tier.HOST:
                    data = bytes(self.segment.read(e.offset, e.nbytes))
                    self.heat.touch(h, self.clock())
                    self.counters.host_hits += 1
                    out.append(StoredBlock(h, e.layout, data, e.checksum))
                    continue
            blk = self._read_disk(h)
            if blk is None:
                break
            with self._lock:
                self.counters.disk_hits += 1
            out.append(blk)
        return out

    def prefetch(self, hashes: list[int]) -> tuple[int, int]:
        """An admitted request will read this prefix: reference it, queue disk blocks for
        promotion. Returns (blocks already in host, promotions queued)."""
        host = queued = 0
        now = self.clock()
        with self._lock:
            for h in hashes:
                e = self._dir.get(h)
                if e is None:
                    break
                self.heat.add_ref(h, now)
                if e.tier is Tier.HOST:
                    host += 1
                elif h not in self._queued:
                    self._queued.add(h)
                    self._promote_queue.append(h)
                    queued += 1
        if queued:
            self.work.set()
        return host, queued

    # -- migration (the migrator thread calls run_once) -----------------------------------------
    def run_once(self) -> None:
        self._expire()
        while True:
            with self._lock:
                if not self._promote_queue:
                    break
                h = self._promote_queue.popleft()
                self._queued.discard(h)
            self._promote(h)
        if self._over_high():
            self._demote_to(self.low_watermark)

    def _over_high(self) -> bool:
        # Committed blocks only: reserved slots are writers' headroom already, and counting
        # them would push real blocks to disk to make room for room.
        return self._committed_bytes() > self.high_watermark * self.alloc.capacity_bytes

    def _demote_to(self, watermark: float) -> None:
        target = watermark * self.alloc.capacity_bytes
        now = self.clock()
        with self._lock:
            # A block a live request is about to read stays, however cold it looks.
            victims = sorted(
                (
                    e
                    for e in self._dir.values()
                    if self._movable(e) and not self._heat_of(e, now).live_refs
                ),
                key=lambda e: self.policy.priority(self._heat_of(e, now), now),
            )
        for e in victims:
            if self._committed_bytes() <= target:
                break
            self._demote(e.block_hash)

    def _make_room(self, nbytes: int) -> bool:
        """Free one slot's worth for a writer now: demote the coldest movable host block
        (the same size first, so that its slot is the one freed)."""
        now = self.clock()
        with self._lock:
            movable = [e for e in self._dir.values() if self._movable(e)]
            same = [e for e in movable if e.nbytes == nbytes]
            pool = same or movable
            if not pool:
                return False
            victim = min(pool, key=lambda e: self.policy.priority(self._heat_of(e, now), now))
        return self._demote(victim.block_hash)

    def _demote(self, h: int) -> bool:
        """Host -> disk (or dropped without a disk tier): copy, switch, free."""
        with self._lock:
            e = self._dir.get(h)
            if e is None or not self._movable(e):
                return False
            if self.disk is None:
                self._remove_locked(e)
                self.counters.host_evictions += 1
                return True
            e.moving = True
            data = bytes(self.segment.read(e.offset, e.nbytes))
        if e.nbytes > self.disk.capacity_bytes:
            ok = False
        else:
            with self._disk_lock:
                ok, _ = self.disk.put(StoredBlock(h, e.layout, data, e.checksum))
        with self._lock:
            e.moving = False
            self._moved.notify_all()
            if self._dir.get(h) is not e:  # handed over or dropped while we copied
                undo = ok
            elif e.free_on_unpin and not e.pins:  # handed over while we copied
                self._remove_locked(e)
                self.counters.handed_over += 1
                undo = ok
            elif not ok and e.nbytes > self.disk.capacity_bytes:  # no tier below can hold it
                self._remove_locked(e)
                self.counters.host_evictions += 1
                return True
            elif not ok:  # the host copy no longer matches its checksum
                self.counters.checksum_failures += 1
                self.counters.dropped_corrupt += 1
                self._remove_locked(e)
                return True
            elif e.pins:  # a reader pinned it meanwhile: keep it in host
                undo = True
            else:
                self.alloc.free(e.offset)
                e.tier, e.offset = Tier.DISK, -1
                self.counters.demotions += 1
                return True
        if undo:
            with self._disk_lock:
                self.disk.remove(h)
        return False

    def _promote(self, h: int) -> bool:
        """Disk -> host: copy, switch, free. True when the block is in host afterwards."""
        with self._lock:
            e = self._wait_still(h)
            if e is None:
                return False
            if e.tier is Tier.HOST:
                return True
            e.moving = True
        blk = self._read_disk(h)
        off = None
        if blk is not None:
            off = self._alloc_slot(e.nbytes)
            if off is not None:
                self.segment.write(off, blk.data)
        with self._lock:
            if blk is None or off is None or self._dir.get(h) is not e:
                if off is not None:
                    self.alloc.free(off)
                e.moving = False
                self._moved.notify_all()
                return False
            e.tier, e.offset = Tier.HOST, off
            self.counters.promotions += 1
        # Still `moving` until the disk copy is gone, so that no demotion re-puts it meanwhile.
        assert self.disk is not None, "_read_disk read the block from the disk tier"
        with self._disk_lock:
            self.disk.remove(h)
        with self._lock:
            e.moving = False
            self._moved.notify_all()
        return True

    def _alloc_slot(self, nbytes: int) -> int | None:
        while True:
            with self._lock:
                off = self.alloc.alloc(nbytes)
            if off is not None or not self._make_room(nbytes):
                return off

    def _read_disk(self, h: int) -> StoredBlock | None:
        assert self.disk is not None
        with self._disk_lock:
            blk = self.disk.read(h)
        if blk is None:
            with self._lock:
                e = self._dir.get(h)
                if e is not None and e.tier is Tier.DISK:
                    # The file failed its checksum (or vanished): dropped, never served.
                    self.counters.checksum_failures += 1
                    self.counters.dropped_corrupt += 1
                    self._remove_locked(e)
        return blk

    def _on_disk_evict(self, h: int) -> None:
        with self._lock:
            e = self._dir.get(h)
            if e is not None and e.tier is Tier.DISK and not e.moving:
                self._remove_locked(e)
                self.counters.disk_evictions += 1

    def _expire(self) -> None:
        now = self.clock()
        with self._lock:
            for lease_id in [k for k, v in self._leases.items() if v.expires <= now]:
                log.warning(
                    "lease %d expired with %d blocks pinned (a reader died?)",
                    lease_id,
                    len(self._leases[lease_id].hashes),
                )
                self._unpin(self._leases.pop(lease_id).hashes, moved=False)
            for off in [k for k, (_, exp, _) in self._reserved.items() if exp <= now]:
                nbytes, _, _ = self._reserved.pop(off)
                self._reserved_bytes -= nbytes
                self.alloc.free(off)

    # -- helpers (lock held) ---------------------------------------------------------------------
    def _committed_bytes(self) -> int:
        return self.alloc.bytes_used - self._reserved_bytes

    def _unreserve(self, slot: Slot) -> int | None:
        """End a reservation; its nbytes, or None when it is not (or no longer) this ticket's."""
        held = self._reserved.get(slot.offset)
        if held is None or held[2] != slot.ticket:
            return None
        del self._reserved[slot.offset]
        self._reserved_bytes -= held[0]
        return held[0]

    @staticmethod
    def _movable(e: Entry) -> bool:
        return e.tier is Tier.HOST and e.pins == 0 and not e.moving

    def _heat_of(self, e: Entry, now: float) -> BlockHeat:
        heat = self.heat.get(e.block_hash)
        return heat if heat is not None else self.heat.touch(e.block_hash, now)

    def _wait_still(self, h: int, timeout_s: float = 2.0) -> Entry | None:
        e = self._dir.get(h)
        if e is not None and e.moving:
            moving = e
            self._moved.wait_for(
                lambda: not moving.moving or self._dir.get(h) is not moving, timeout_s
            )
            e = self._dir.get(h)
        return e

    def _unpin(self, hashes: list[int], moved: bool) -> None:
        for h in hashes:
            e = self._dir.get(h)
            if e is None or e.pins == 0:
                continue
            e.pins -= 1
            if moved:
                e.free_on_unpin = True
            if e.pins == 0 and e.free_on_unpin and not e.moving:
                self._remove_locked(e)
                self.counters.handed_over += 1

    def _remove_locked(self, e: Entry) -> None:
        del self._dir[e.block_hash]
        if e.tier is Tier.HOST:
            self.alloc.free(e.offset)
        self.heat.forget(e.block_hash)
        self.presence.remove(e.block_hash)
