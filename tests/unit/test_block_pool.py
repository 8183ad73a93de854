"""Block pool: exact ids, exact eviction order, refcounts (a tiny pool, as vLLM's tests do)."""

import pytest

from strata.engine.block_pool import BlockPool
from strata.kvtier.hashing import HashKeys, block_hash, chain_hashes


def test_allocate_free_and_evict_in_lru_order_tail_first():
    evicted = []
    pool = BlockPool(num_blocks=6, block_size=4, on_evict=lambda b, h: evicted.append((b, h)))
    a = pool.allocate(3)
    assert a == [0, 1, 2]
    for i, b in enumerate(a):
        pool.commit(b, 100 + i)
    pool.free(a)  # reversed: 2 then 1 then 0 join the queue's tail
    assert pool.num_free == 6 and pool.num_cached == 3
    b = pool.allocate(4)  # never-used blocks 3,4,5 first, then the oldest cached: 2
    assert b == [3, 4, 5, 2]
    assert evicted == [(2, 102)]
    assert pool.lookup(102) is None and pool.lookup(100) == 0
    assert pool.allocate(3) is None  # only 0 and 1 remain


def test_cache_hit_takes_a_reference_and_leaves_the_free_queue():
    pool = BlockPool(num_blocks=2, block_size=4)
    [blk] = pool.allocate(1)
    pool.commit(blk, 7)
    pool.free([blk])
    assert pool.num_free == 2
    pool.acquire_cached(pool.lookup(7))
    assert pool.num_free == 1
    pool.acquire_cached(blk)  # a second sequence shares it
    pool.free([blk])
    assert pool.num_free == 1  # still held once
    pool.free([blk])
    assert pool.num_free == 2
    with pytest.raises(RuntimeError):
        pool.free([blk])


def test_commit_keeps_one_copy_per_hash():
    pool = BlockPool(num_blocks=4, block_size=4)
    x, y = pool.allocate(2)
    assert pool.commit(x, 5) == x
    assert pool.commit(y, 5) == x  # the existing block stands for the hash
    assert pool.blocks[y].block_hash is None


def test_hash_chain_depends_on_parent_tokens_and_keys():
    keys = HashKeys.for_request("m", "tenant-a", prefix_public=False)
    toks = list(range(12))
    hs = chain_hashes(toks, 4, keys)
    assert len(hs) == 3
    assert hs[1] == block_hash(hs[0], toks[4:8], keys)
    assert chain_hashes(toks[:11], 4, keys) == hs[:2]  # partial block not hashed
    other_tenant = HashKeys.for_request("m", "tenant-b", prefix_public=False)
    assert chain_hashes(toks, 4, other_tenant)[0] != hs[0]
    public_a = HashKeys.for_request("m", "tenant-a", prefix_public=True)
    public_b = HashKeys.for_request("m", "tenant-b", prefix_public=True)
    assert chain_hashes(toks, 4, public_a) == chain_hashes(toks, 4, public_b)
    # fixed seed: the value is the same in every process and on every node
    assert block_hash(0, [1, 2, 3, 4], HashKeys("m", "public")) == block_hash(
        0, [1, 2, 3, 4], HashKeys("m", "public")
    )


def test_evicted_block_lifetimes_run_from_commit_to_eviction():
    now = [10.0]
    pool = BlockPool(num_blocks=3, block_size=4, clock=lambda: now[0])
    a = pool.allocate(2)
    pool.commit(a[0], 100)  # committed at 10.0
    now[0] = 12.5
    pool.commit(a[1], 101)  # committed at 12.5
    pool.commit(a[1], 101)  # committing again keeps the first commit time
    pool.free(a)  # queue: 2 (never used), then 1, then 0
    now[0] = 20.0
    assert pool.allocate(2) == [2, 1]  # evicts block 1 only
    assert pool.evicted_lifetimes_count == 1
    assert pool.evicted_lifetime_sum_s == 7.5
    now[0] = 30.25
    assert pool.allocate(1) == [0]
    assert pool.evicted_lifetimes_count == 2
    assert pool.evicted_lifetime_sum_s == 7.5 + 20.25
    assert list(pool.recent_lifetimes_s) == [7.5, 20.25]


def test_recent_lifetimes_keep_the_last_window_and_no_clock_measures_nothing():
    now = [0.0]
    pool = BlockPool(num_blocks=1, block_size=4, clock=lambda: now[0])
    for i in range(1030):
        [blk] = pool.allocate(1)
        pool.commit(blk, i)
        pool.free([blk])
        now[0] += 1.0
    # Each block lives 1 s before the next allocation evicts it: 1029 evictions.
    assert pool.evicted_lifetimes_count == 1029
    assert pool.evicted_lifetime_sum_s == 1029.0
    assert len(pool.recent_lifetimes_s) == 1024
    untimed = BlockPool(num_blocks=1, block_size=4)
    [blk] = untimed.allocate(1)
    untimed.commit(blk, 1)
    untimed.free([blk])
    untimed.allocate(1)
    assert untimed.evictions == 1 and untimed.evicted_lifetimes_count == 0
    assert untimed.evicted_lifetime_sum_s == 0.0 and not untimed.recent_lifetimes_s


def test_missing_suffix_is_the_chain_after_its_leading_held_blocks():
    pool = BlockPool(num_blocks=4, block_size=2)
    a, b = pool.allocate(2)
    pool.commit(a, 11)
    pool.commit(b, 33)  # held, but after a gap: the chain breaks at 22
    assert pool.missing_suffix([11, 22, 33]) == [22, 33]
    assert pool.missing_suffix([11]) == []
    assert pool.missing_suffix([44, 11]) == [44, 11]
    assert pool.missing_suffix([]) == []
