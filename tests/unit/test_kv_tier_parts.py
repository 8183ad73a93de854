"""Exact behaviour of the tiered store's parts: slab allocator, node presence events, heat table
and tier policies, shared-memory segment."""

from __future__ import annotations

import sys

import pytest

from strata.kvtier.heat import HeatTable
from strata.kvtier.presence import NodePresence
from strata.kvtier.shm_segment import ShmSegment, _page_runs, segment_path
from strata.kvtier.slab_allocator import SlabAllocator
from strata.policy.kv_tiering import BlockHeat, HeatPolicy, LRUPolicy, make_policy


def test_slabs_take_one_size_each_and_return_when_empty():
    a = SlabAllocator(capacity_bytes=4096 + 100, slab_bytes=1024)  # 4 slabs, tail unused
    assert (a.num_slabs, a.capacity_bytes) == (4, 4096)
    x = [a.alloc(512) for _ in range(3)]  # slab 0 (two slots), then slab 1
    assert x == [0, 512, 1024] and a.bytes_used == 1536
    y = a.alloc(1000)  # another size: its own slab (2)
    assert y == 2048 and a.slot_bytes(y) == 1000
    assert a.free_bytes_for(512) == 512 + 1024  # one slot left in slab 1, slab 3 empty
    a.free(1024)  # slab 1 is empty again: back to the pool
    assert a.free_bytes_for(1000) == 2000  # empty slabs 1 and 3 (1000 fits once each)
    assert a.alloc(1000) in (1024, 3072)
    assert a.alloc(1000) in (1024, 3072)
    assert a.alloc(1000) is None and a.alloc(512) is None
    with pytest.raises(ValueError, match="does not fit a 1024-byte slab"):
        a.alloc(2000)
    with pytest.raises(ValueError, match="not an allocated slot"):
        a.free(3500)


def test_presence_announces_first_holder_and_withdraws_after_last():
    p = NodePresence()
    p.add(1)
    p.device_update("w1", stored=[1, 2], removed=[], reset=False)
    assert p.drain() == ([1, 2], [])
    p.remove(1)  # still on w1's device: no event
    p.device_update("w1", stored=[], removed=[2], reset=False)
    assert p.drain() == ([], [2])
    p.add(3)
    p.remove(3)  # stored and removed between reports: nothing to send
    assert p.drain() == ([], [])
    p.device_update("w2", stored=[5], removed=[], reset=False)
    assert p.device_blocks == 2  # 1 on w1, 5 on w2
    p.device_update("w1", stored=[6], removed=[], reset=True)  # w1 restarted: only 6 now
    assert p.drain() == ([5, 6], [1])
    assert p.snapshot() == [5, 6] and len(p) == 2


def test_heat_decays_with_half_life_and_counts_live_refs():
    t = HeatTable(half_life_s=10)
    t.touch(1, now=0)
    h = t.touch(1, now=10)  # 1 decayed to 0.5, plus this read
    assert h.frequency == pytest.approx(1.5)
    t.add_ref(1, now=10)
    t.add_ref(1, now=10)
    t.drop_ref(1)
    assert t.get(1).live_refs == 1
    t.forget(1)
    assert t.get(1) is None and len(t) == 0


def test_policies_rank_live_refs_then_their_own_measure():
    hot_old = BlockHeat(last_access=0, frequency=8)
    cold_new = BlockHeat(last_access=50, frequency=1)
    wanted = BlockHeat(last_access=0, frequency=0, live_refs=1)
    lru, heat = LRUPolicy(), HeatPolicy(half_life_s=100)
    assert lru.priority(cold_new, 60) > lru.priority(hot_old, 60)
    assert heat.priority(hot_old, 60) > heat.priority(cold_new, 60)
    for policy in (lru, heat):
        assert policy.priority(wanted, 60) > policy.priority(hot_old, 60)
    assert make_policy("lru").name == "lru"
    with pytest.raises(ValueError, match="unknown KV tier policy 'mru'; known: heat, lru"):
        make_policy("mru")


def test_page_runs_align_merge_and_stay_inside_the_segment():
    page = 4096
    assert _page_runs([(100, 10)], page, 1 << 20) == [(0, 4096)]
    # slots of 6,000 bytes back to back: touching pages merge into one run
    assert _page_runs([(6000, 6000), (0, 6000)], page, 1 << 20) == [(0, 12288)]
    assert _page_runs([(0, 4096), (3 * page, 10)], page, 1 << 20) == [(0, 4096), (12288, 16384)]
    assert _page_runs([(8000, 9000), (0, 0)], page, 10_000) == [(4096, 10_000)]  # clipped
    assert _page_runs([], page, 1 << 20) == []


def _rss_bytes(path) -> int:
    """This process's resident bytes of its mappings of `path` (/proc/self/smaps)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split()
            if head and "-" in head[0] and len(head) >= 5:
                inside = line.rstrip().endswith(str(path))
            elif inside and head[0] == "Rss:":
                total += int(head[1]) * 1024
    return total


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise populate is Linux's")
def test_prefault_maps_reserved_pages_without_writing_them(tmp_path):
    path = tmp_path / "seg"
    owner = ShmSegment(path, 1 << 20, create=True)
    client = ShmSegment(path, 1 << 20, create=False)
    owner.write(8192, b"kept")
    before = _rss_bytes(path)
    done = client.prefault([(8192, 100_000), (512 * 1024, 4096)])
    if done == 0:
        pytest.skip("this kernel has no MADV_POPULATE_WRITE (Linux 5.14+)")
    assert done == (110_592 - 8192) + 4096  # page-aligned runs
    assert _rss_bytes(path) - before >= done  # now mapped here
    assert bytes(client.read(8192, 4)) == b"kept"  # and not written
    client.close()
    owner.close()


def test_segment_is_shared_between_owner_and_client(tmp_path):
    path = segment_path(str(tmp_path), "node/1", 50054)
    assert path.name == "strata-kv-node_1-50054"
    owner = ShmSegment(path, 8192, create=True)
    client = ShmSegment(path, 8192, create=False)
    client.write(4096, b"kv")
    assert bytes(owner.read(4096, 2)) == b"kv"
    with pytest.raises(ValueError, match="is 8192 bytes, the store said 4096"):
        ShmSegment(path, 4096, create=False)
    client.close()
    owner.close()
    assert not path.exists()
