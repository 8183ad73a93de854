"""Disk tier: round trip, LRU eviction, crash recovery from the manifest, corruption handling."""

import json

from strata.kvtier.blocks import StoredBlock
from strata.kvtier.disk_tier import DiskTier, block_filename
from strata.kvtier.hashing import checksum

SIZE = 64


def blk(h: int, fill: int | None = None) -> StoredBlock:
    data = bytes([(fill if fill is not None else h) % 256]) * SIZE
    return StoredBlock(block_hash=h, layout="f16:2x16", data=data, checksum=checksum(data))


def manifest(root) -> list[dict]:
    return [json.loads(line) for line in (root / "manifest.jsonl").read_text().splitlines()]


def block_files(root) -> list[str]:
    return sorted(p.name for p in (root / "blocks").iterdir())


def test_put_get_round_trip_and_files(tmp_path):
    tier = DiskTier(tmp_path, capacity_bytes=10 * SIZE)
    assert tier.put(blk(1)) == (True, 0)
    assert tier.put(blk(2)) == (True, 0)
    assert tier.prefix_len([1, 2, 3]) == 2
    got = tier.get_prefix([1, 2, 3])
    assert [(b.block_hash, b.layout, b.data, b.checksum) for b in got] == [
        (1, "f16:2x16", b"\x01" * SIZE, checksum(b"\x01" * SIZE)),
        (2, "f16:2x16", b"\x02" * SIZE, checksum(b"\x02" * SIZE)),
    ]
    assert (tier.stats.hits, tier.stats.misses) == (2, 1)
    assert tier.bytes_used == 2 * SIZE
    assert block_files(tmp_path) == ["0000000000000001.blk", "0000000000000002.blk"]
    assert [(r["seq"], r["op"], r["hash"], r["size"]) for r in manifest(tmp_path)] == [
        (0, "put", "0000000000000001", SIZE),
        (1, "put", "0000000000000002", SIZE),
    ]


def test_rejects_bad_checksum_and_oversized(tmp_path):
    tier = DiskTier(tmp_path, capacity_bytes=SIZE)
    bad = StoredBlock(block_hash=7, layout="x", data=b"a" * 8, checksum=checksum(b"b" * 8))
    assert tier.put(bad) == (False, 0)
    assert tier.put(StoredBlock(8, "x", b"a" * (SIZE + 1), checksum(b"a" * (SIZE + 1)))) == (
        False,
        0,
    )
    assert tier.stats.rejected == 2
    assert len(tier) == 0 and block_files(tmp_path) == []


def test_capacity_evicts_least_recently_used(tmp_path):
    tier = DiskTier(tmp_path, capacity_bytes=3 * SIZE)
    for h in (1, 2, 3):
        tier.put(blk(h))
    assert [b.block_hash for b in tier.get_prefix([1])] == [1]  # 2 is now least recent
    assert tier.put(blk(4)) == (True, 1)
    assert tier.put(blk(5)) == (True, 1)
    assert tier.hashes() == [1, 4, 5]
    assert tier.stats.evictions == 2
    assert block_files(tmp_path) == [block_filename(h) for h in (1, 4, 5)]
    assert [(r["op"], r["hash"][-1]) for r in manifest(tmp_path)] == [
        ("put", "1"),
        ("put", "2"),
        ("put", "3"),
        ("evict", "2"),
        ("put", "4"),
        ("evict", "3"),
        ("put", "5"),
    ]
    assert [r["seq"] for r in manifest(tmp_path)] == list(range(7))


def test_reopen_finds_every_block_after_close_and_after_crash(tmp_path):
    tier = DiskTier(tmp_path, capacity_bytes=10 * SIZE)
    for h in (11, 12, 13):
        tier.put(blk(h))
    tier.close()
    reopened = DiskTier(tmp_path, capacity_bytes=10 * SIZE)
    assert reopened.stats.recovered == 3
    got = reopened.get_prefix([11, 12, 13])
    assert [b.data for b in got] == [blk(h).data for h in (11, 12, 13)]
    # No close(): what a kill -9 leaves behind must be enough.
    reopened.put(blk(14))
    crashed = DiskTier(tmp_path, capacity_bytes=10 * SIZE)
    assert crashed.hashes() == [11, 12, 13, 14]
    assert (crashed.stats.recovered, crashed.stats.dropped, crashed.stats.orphans_removed) == (
        4,
        0,
        0,
    )
    assert crashed.bytes_used == 4 * SIZE
    crashed.put(blk(15))
    assert [r["seq"] for r in manifest(tmp_path)][-2:] == [3, 4]  # seq keeps rising across opens


def test_corrupt_file_dropped_on_reopen_and_prefix_ends_there(tmp_path):
    tier = DiskTier(tmp_path, capacity_bytes=10 * SIZE)
    for h in (1, 2, 3):
        tier.put(blk(h))
    tier.close()
    path = tmp_path / "blocks" / block_filename(2)
    path.write_bytes(b"\xff" + path.read_bytes()[1:])  # same size, one byte flipped
    reopened = DiskTier(tmp_path, capacity_bytes=10 * SIZE)
    assert (reopened.stats.recovered, reopened.stats.dropped, reopened.stats.checksum_failures) == (
        2,
        1,
        1,
    )
    assert not path.exists()
    assert [b.block_hash for b in reopened.get_prefix([1, 2, 3])] == [1]
    assert reopened.prefix_len([1, 2, 3]) == 1


def test_missing_and_truncated_files_dropped_on_reopen(tmp_path):
    tier = DiskTier(tmp_path, capacity_bytes=10 * SIZE)
    for h in (1, 2, 3):
        tier.put(blk(h))
    tier.close()
    (tmp_path / "blocks" / block_filename(1)).unlink()
    (tmp_path / "blocks" / block_filename(3)).write_bytes(b"\x03" * (SIZE - 1))
    reopened = DiskTier(tmp_path, capacity_bytes=10 * SIZE)
    assert reopened.hashes() == [2]
    assert (reopened.stats.dropped, reopened.stats.checksum_failures) == (2, 0)
    assert block_files(tmp_path) == [block_filename(2)]
    # Dropped entries were compacted out: the next open replays only the survivor.
    assert [r["hash"] for r in manifest(tmp_path)] == ["0000000000000002"]


def test_corrupt_file_dropped_on_live_get(tmp_path):
    tier = DiskTier(tmp_path, capacity_bytes=10 * SIZE)
    for h in (1, 2, 3):
        tier.put(blk(h))
    path = tmp_path / "blocks" / block_filename(2)
    path.write_bytes(b"\x00" * SIZE)
    assert [b.block_hash for b in tier.get_prefix([1, 2, 3])] == [1]
    assert (tier.stats.checksum_failures, tier.stats.dropped) == (1, 1)
    assert tier.hashes() == [3, 1] and not path.exists()
    assert tier.bytes_used == 2 * SIZE
    assert manifest(tmp_path)[-1]["op"] == "evict"
    assert manifest(tmp_path)[-1]["hash"] == "0000000000000002"
    assert DiskTier(tmp_path, capacity_bytes=10 * SIZE).hashes() == [1, 3]


def test_truncated_last_manifest_line_is_tolerated(tmp_path):
    tier = DiskTier(tmp_path, capacity_bytes=10 * SIZE)
    for h in (1, 2):
        tier.put(blk(h))
    tier.close()
    text = (tmp_path / "manifest.jsonl").read_text()
    torn = '{"op": "put", "hash": "00000000000'  # crash mid-append, no newline
    (tmp_path / "manifest.jsonl").write_text(text + torn)
    reopened = DiskTier(tmp_path, capacity_bytes=10 * SIZE)
    assert reopened.hashes() == [1, 2]
    assert reopened.stats.torn_records == 1
    # The next append lands on its own line, so a later open reads it.
    reopened.put(blk(3))
    again = DiskTier(tmp_path, capacity_bytes=10 * SIZE)
    assert again.hashes() == [1, 2, 3] and again.stats.torn_records == 0


def test_orphan_block_files_are_removed_on_open(tmp_path):
    tier = DiskTier(tmp_path, capacity_bytes=10 * SIZE)
    tier.put(blk(1))
    tier.close()
    # A crash between rename and manifest append, and one mid-write of the temp file.
    (tmp_path / "blocks" / block_filename(9)).write_bytes(blk(9).data)
    (tmp_path / "blocks" / (block_filename(10) + ".tmp")).write_bytes(b"\x0a" * 10)
    reopened = DiskTier(tmp_path, capacity_bytes=10 * SIZE)
    assert reopened.stats.orphans_removed == 2
    assert block_files(tmp_path) == [block_filename(1)]
    assert reopened.hashes() == [1] and reopened.get_prefix([9]) == []


def test_compaction_keeps_exactly_the_live_set(tmp_path):
    tier = DiskTier(tmp_path, capacity_bytes=4 * SIZE)
    for h in range(1, 41):
        tier.put(blk(h))
    tier.get_prefix([38])
    tier.close()
    assert len(manifest(tmp_path)) == 40 + 36
    reopened = DiskTier(tmp_path, capacity_bytes=4 * SIZE)
    assert reopened.stats.compactions == 1
    records = manifest(tmp_path)
    assert [(r["op"], int(r["hash"], 16)) for r in records] == [
        ("put", 37),
        ("put", 38),
        ("put", 39),
        ("put", 40),
    ]
    assert [r["seq"] for r in records] == [76, 77, 78, 79]
    assert all(
        r["size"] == SIZE and r["checksum"] == blk(int(r["hash"], 16)).checksum for r in records
    )
    assert DiskTier(tmp_path, capacity_bytes=4 * SIZE).hashes() == [37, 38, 39, 40]


def test_smaller_capacity_on_reopen_evicts_down_to_budget(tmp_path):
    tier = DiskTier(tmp_path, capacity_bytes=4 * SIZE)
    for h in (1, 2, 3, 4):
        tier.put(blk(h))
    tier.close()
    smaller = DiskTier(tmp_path, capacity_bytes=2 * SIZE)
    assert smaller.hashes() == [3, 4]
    assert smaller.bytes_used == 2 * SIZE
    assert block_files(tmp_path) == [block_filename(3), block_filename(4)]


def test_without_durability_blocks_still_come_back_after_reopen(tmp_path):
    data = b"k" * 64
    with DiskTier(tmp_path, 1024, durable=False) as tier:
        assert tier.put(StoredBlock(5, "L", data, checksum(data))) == (True, 0)
    with DiskTier(tmp_path, 1024, durable=False) as tier:
        assert [b.data for b in tier.get_prefix([5])] == [data]
        assert tier.stats.recovered == 1
