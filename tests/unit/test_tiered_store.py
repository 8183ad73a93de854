"""The tiered store's directory, migrations and pressure, with tiny tiers and a fake clock."""

from __future__ import annotations

import threading

import pytest

from strata.kvtier.blocks import StoredBlock
from strata.kvtier.disk_tier import DiskTier
from strata.kvtier.hashing import checksum
from strata.kvtier.shm_segment import ShmSegment
from strata.kvtier.tiered_store import Tier, TieredStore
from strata.policy.kv_tiering import HeatPolicy, LRUPolicy

BLOCK = 1024


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def block(i: int) -> StoredBlock:
    data = bytes([1 + i % 250]) * BLOCK
    return StoredBlock(1000 + i, "float32:1x2x1x16x8", data, checksum(data))


@pytest.fixture
def make(tmp_path):
    made = []

    def _make(
        host_blocks: int = 4,
        disk_blocks: int = 0,
        policy=None,
        clock=None,
        high: float = 0.9,
        low: float = 0.5,
    ) -> TieredStore:
        seg = ShmSegment(tmp_path / f"seg{len(made)}", host_blocks * BLOCK, create=True)
        disk = DiskTier(tmp_path / "disk", disk_blocks * BLOCK) if disk_blocks else None
        store = TieredStore(
            seg,
            BLOCK,
            disk,
            policy or LRUPolicy(),
            clock or Clock(),
            high_watermark=high,
            low_watermark=low,
        )
        made.append((seg, disk))
        return store

    yield _make
    for seg, disk in made:
        seg.close()
        if disk is not None:
            disk.close()


def write(store: TieredStore, blk: StoredBlock) -> int:
    [slot] = store.reserve(len(blk.data), 1)
    store.segment.write(slot.offset, blk.data)
    assert store.commit([(slot, blk.block_hash, blk.layout, blk.checksum)], []) == (1, 0, 0)
    return slot.offset


def test_commit_verifies_checksum_and_keeps_one_copy(make):
    store = make()
    b = block(1)
    [slot] = store.reserve(BLOCK, 1)
    store.segment.write(slot.offset, b.data)
    assert store.commit([(slot, b.block_hash, b.layout, b.checksum ^ 1)], []) == (0, 0, 1)
    assert len(store) == 0 and store.alloc.bytes_used == 0
    write(store, b)
    [slot2] = store.reserve(BLOCK, 1)
    store.segment.write(slot2.offset, b.data)
    assert store.commit([(slot2, b.block_hash, b.layout, b.checksum)], []) == (0, 1, 0)
    assert len(store) == 1 and store.host_bytes() == BLOCK
    assert store.presence.drain() == ([b.block_hash], [])


def test_acquire_pins_the_prefix_and_release_moved_hands_over(make):
    store = make()
    blocks = [block(i) for i in range(3)]
    for b in blocks:
        write(store, b)
    pinned, lease, on_disk = store.acquire([b.block_hash for b in blocks] + [7], promote=False)
    assert [p.block_hash for p in pinned] == [b.block_hash for b in blocks]
    assert bytes(store.segment.read(pinned[1].offset, BLOCK)) == blocks[1].data
    assert lease > 0 and on_disk == 0 and store.pinned_blocks() == 3
    store.release([lease], moved=True)
    assert len(store) == 0 and store.counters.handed_over == 3


def test_full_host_demotes_coldest_to_disk_and_promotes_back(make):
    clock = Clock()
    store = make(host_blocks=2, disk_blocks=8, clock=clock)
    for i in range(3):
        clock.t += 1
        write(store, block(i))
    # block 0 was the least recently used: it went to disk to make room for block 2
    assert store.tier_of(block(0).block_hash) is Tier.DISK
    assert store.tier_of(block(2).block_hash) is Tier.HOST
    assert store.lookup([block(0).block_hash, block(1).block_hash]) == (2, 1, 1)
    pinned, lease, _ = store.acquire([block(0).block_hash], promote=True)
    assert len(pinned) == 1 and store.tier_of(block(0).block_hash) is Tier.HOST
    assert bytes(store.segment.read(pinned[0].offset, BLOCK)) == block(0).data
    assert block(0).block_hash not in store.disk  # one copy: the disk copy was freed
    assert store.counters.promotions == 1 and store.counters.demotions == 2
    store.release([lease], moved=False)


def test_pinned_blocks_are_never_demoted_and_reserve_signals_pressure(make):
    store = make(host_blocks=2, disk_blocks=4)
    write(store, block(0))
    write(store, block(1))
    _, lease, _ = store.acquire([block(0).block_hash], promote=False)
    _, lease2, _ = store.acquire([block(1).block_hash], promote=False)
    assert store.reserve(BLOCK, 1) == [] and store.pressure
    assert store.counters.reserve_refused == 1
    store.release([lease, lease2], moved=False)
    assert len(store.reserve(BLOCK, 1)) == 1 and not store.pressure


def test_watermark_demotion_orders_by_policy(make):
    clock = Clock()
    store = make(host_blocks=4, disk_blocks=8, clock=clock, policy=HeatPolicy(), high=0.7, low=0.5)
    for i in range(4):
        clock.t += 1
        write(store, block(i)) if i < 3 else None
    # block 0 read often, block 2 read once long ago: block 2 and 1 are colder
    for _ in range(5):
        store.release([store.acquire([block(0).block_hash], promote=False)[1]], moved=False)
    clock.t += 1
    store.run_once()
    assert store.tier_of(block(0).block_hash) is Tier.HOST
    assert store.alloc.bytes_used <= 2 * BLOCK
    assert store.counters.demotions == 1


def test_prefetch_promotes_in_the_background_round(make):
    store = make(host_blocks=1, disk_blocks=4)
    write(store, block(0))
    write(store, block(1))  # pushes block 0 to disk
    assert store.tier_of(block(0).block_hash) is Tier.DISK
    assert store.prefetch([block(0).block_hash]) == (0, 1)
    assert store.work.is_set()
    store.run_once()
    assert store.tier_of(block(0).block_hash) is Tier.HOST
    assert store.tier_of(block(1).block_hash) is Tier.DISK


def test_no_disk_tier_drops_and_reports_removal(make):
    store = make(host_blocks=1)
    write(store, block(0))
    store.presence.drain()
    write(store, block(1))
    assert store.tier_of(block(0).block_hash) is None
    assert store.presence.drain() == ([block(1).block_hash], [block(0).block_hash])
    assert store.counters.host_evictions == 1


def test_corrupt_disk_block_is_dropped_and_never_served(make, tmp_path):
    store = make(host_blocks=1, disk_blocks=4)
    write(store, block(0))
    write(store, block(1))
    path = next((tmp_path / "disk" / "blocks").glob("*.blk"))
    path.write_bytes(b"\x00" * BLOCK)
    pinned, _, _ = store.acquire([block(0).block_hash], promote=True)
    assert pinned == [] and store.tier_of(block(0).block_hash) is None
    assert store.counters.dropped_corrupt == 1
    assert store.read_prefix([block(0).block_hash]) == []


def test_expired_leases_and_reservations_are_reclaimed(make):
    clock = Clock()
    store = make(host_blocks=2, clock=clock)
    write(store, block(0))
    store.acquire([block(0).block_hash], promote=False)
    store.reserve(BLOCK, 1)
    clock.t += store.lease_ttl_s + 1
    store.run_once()
    assert store.pinned_blocks() == 0 and store.reserved_bytes() == 0


def test_concurrent_readers_and_migrations_never_see_a_half_moved_block(make):
    store = make(host_blocks=3, disk_blocks=16, high=0.5, low=0.34)
    blocks = [block(i) for i in range(8)]
    for b in blocks:
        store.put_bytes(b)
    errors = []

    def reader():
        for _ in range(200):
            for b in blocks:
                pinned, lease, _ = store.acquire([b.block_hash], promote=True)
                for p in pinned:
                    if checksum(store.segment.read(p.offset, p.nbytes)) != p.checksum:
                        errors.append(p.block_hash)
                store.release([lease], moved=False)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for _ in range(200):
        store.run_once()
    for t in threads:
        t.join()
    assert errors == []
    assert len(store) == 8 and store.pinned_blocks() == 0
    assert [b.data for b in store.read_prefix([b.block_hash for b in blocks])] == [
        b.data for b in blocks
    ]


def test_an_expired_reservation_can_neither_commit_nor_free_the_next_holders_slot(make):
    clock = Clock()
    store = make(host_blocks=1, clock=clock)
    [old] = store.reserve(BLOCK, 1)
    clock.t += store.lease_ttl_s + 1
    store.run_once()  # the writer looked dead: reclaimed
    [new] = store.reserve(BLOCK, 1)
    assert new.offset == old.offset and new.ticket != old.ticket
    b = block(3)
    store.segment.write(old.offset, b.data)
    assert store.commit([(old, b.block_hash, b.layout, b.checksum)], [old]) == (0, 0, 1)
    assert store.reserved_bytes() == BLOCK  # the new holder still has its slot
    assert store.commit([(new, b.block_hash, b.layout, b.checksum)], []) == (1, 0, 0)


def test_reserved_slots_do_not_push_committed_blocks_to_disk(make):
    store = make(host_blocks=8, disk_blocks=8, high=0.9, low=0.5)
    for i in range(3):
        write(store, block(i))
    store.reserve(BLOCK, 5)  # the host is full, 3 of 8 committed
    store.run_once()
    assert store.counters.demotions == 0
    assert [store.tier_of(block(i).block_hash) for i in range(3)] == [Tier.HOST] * 3
