"""The disk tier: blocks as files plus an append-only manifest, LRU within a byte budget.

    <root>/blocks/<hash as 16 hex>.blk    one file per block, written atomically
    <root>/manifest.jsonl                 {"seq", "op": "put"|"evict", "hash", "layout", "size",
                                          "checksum"} one record a line, seq strictly increasing

The manifest is the source of truth, so that a restart after kill -9 rebuilds the directory
without trusting whatever happens to lie in `blocks/`. The write order makes every crash point
recoverable: a put writes the block file (temp + fsync + rename) before its manifest record, so a
crash in between leaves an orphan file, which open deletes; an eviction logs its record before
unlinking, so a crash in between also leaves an orphan. A manifest entry whose file is missing,
has the wrong size or fails its checksum is dropped and never served, and a torn last line (a
crash mid-append) is skipped.

Durability is a choice (`durable`). With it, every put fsyncs the file, the folder and the log
(survives power loss; puts are many times slower, docs/design/kv-tiers.md). Without it (the
store's default), the page cache carries writes to disk in the background: a process crash
(kill -9) loses nothing, and after a power loss a block whose file did not reach the disk fails
its size or checksum check at open and is dropped — the tier is a cache, so a crash can cost hits
but never serve wrong data.

Reads are not logged (a write per read would cost more than the recency is worth), so after a
restart the LRU order is the order in which blocks were put. One process owns a root directory.
"""

from __future__ import annotations

import json
import os
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from strata.kvtier.blocks import StoredBlock, TierStats, leading_present
from strata.kvtier.hashing import checksum

MANIFEST = "manifest.jsonl"
BLOCKS_DIR = "blocks"
BLOCK_SUFFIX = ".blk"
_TMP_SUFFIX = ".tmp"
# Compact on open once the log holds more than this many records per live block (plus slack, so
# that a nearly empty tier is not rewritten on every open).
COMPACT_RATIO = 2
COMPACT_SLACK = 32


@dataclass(slots=True)
class DiskTierStats(TierStats):
    recovered: int = 0  # manifest entries restored on open
    dropped: int = 0  # entries dropped because the file was missing, mis-sized or corrupt
    orphans_removed: int = 0  # files in blocks/ with no manifest entry, deleted on open
    torn_records: int = 0  # manifest lines that did not parse (a crash mid-append)
    compactions: int = 0


@dataclass(slots=True)
class _Entry:
    layout: str
    size: int
    checksum: int


def block_filename(block_hash: int) -> str:
    return f"{block_hash:016x}{BLOCK_SUFFIX}"


class DiskTier:
    def __init__(
        self,
        root_dir: str | os.PathLike[str],
        capacity_bytes: int,
        verify_on_open: bool = True,
        on_evict: Callable[[int], None] | None = None,
        durable: bool = True,
    ):
        if capacity_bytes <= 0:
            raise ValueError(f"capacity_bytes must be positive, got {capacity_bytes}")
        self.root = Path(root_dir)
        self.capacity_bytes = capacity_bytes
        self.bytes_used = 0
        self.stats = DiskTierStats()
        self._blocks_dir = self.root / BLOCKS_DIR
        self._manifest_path = self.root / MANIFEST
        self._entries: OrderedDict[int, _Entry] = OrderedDict()
        self._next_seq = 0
        self._manifest: IO[str] | None = None
        self.durable = durable
        self._blocks_dir.mkdir(parents=True, exist_ok=True)
        # Not called for evictions during recovery: nobody has seen those blocks yet.
        self.on_evict: Callable[[int], None] | None = None
        self._recover(verify_on_open)
        self.on_evict = on_evict  # called with each hash the LRU drops to make room

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, block_hash: int) -> bool:
        return block_hash in self._entries

    def __enter__(self) -> DiskTier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def hashes(self) -> list[int]:
        """Live block hashes, least recently used first."""
        return list(self._entries)

    def entries(self) -> list[tuple[int, str, int, int]]:
        """(hash, layout, size, checksum) of every live block, least recently used first."""
        return [(h, e.layout, e.size, e.checksum) for h, e in self._entries.items()]

    def close(self) -> None:
        if self._manifest is not None:
            self._manifest.close()
            self._manifest = None

    def put(self, block: StoredBlock) -> tuple[bool, int]:
        """Store a block; returns (stored, evicted). A block failing its checksum is rejected."""
        _check_hash(block.block_hash)
        if checksum(block.data) != block.checksum or len(block.data) > self.capacity_bytes:
            self.stats.rejected += 1
            return False, 0
        if block.block_hash in self._entries:
            self._entries.move_to_end(block.block_hash)
            return True, 0
        evicted = 0
        while self.bytes_used + len(block.data) > self.capacity_bytes:
            self._evict_lru()
            evicted += 1
        self._write_file(block.block_hash, block.data)
        entry = _Entry(layout=block.layout, size=len(block.data), checksum=block.checksum)
        self._append(_put_record(block.block_hash, entry))
        self._entries[block.block_hash] = entry
        self.bytes_used += entry.size
        self.stats.evictions += evicted
        return True, evicted

    def prefix_len(self, hashes: list[int]) -> int:
        return leading_present(hashes, self._entries)

    def get_prefix(self, hashes: list[int]) -> list[StoredBlock]:
        out = []
        for h in hashes:
            entry = self._entries.get(h)
            if entry is None:
                self.stats.misses += 1
                break
            data = self._load(h, entry, verify=True)
            if data is None:
                self._drop(h)
                break
            self._entries.move_to_end(h)
            self.stats.hits += 1
            out.append(
                StoredBlock(block_hash=h, layout=entry.layout, data=data, checksum=entry.checksum)
            )
        return out

    def read(self, block_hash: int) -> StoredBlock | None:
        """One block, verified; a block whose file fails its checksum is dropped and None."""
        entry = self._entries.get(block_hash)
        if entry is None:
            return None
        data = self._load(block_hash, entry, verify=True)
        if data is None:
            self._drop(block_hash)
            return None
        self._entries.move_to_end(block_hash)
        self.stats.hits += 1
        return StoredBlock(
            block_hash=block_hash, layout=entry.layout, data=data, checksum=entry.checksum
        )

    def remove(self, block_hash: int) -> bool:
        """Drop a block that moved to another tier (logged, then unlinked)."""
        if block_hash not in self._entries:
            return False
        self._drop(block_hash)
        return True

    def compact(self) -> None:
        """Rewrite the manifest as one put record per live block, in LRU order, atomically."""
        self.close()
        tmp = self._manifest_path.with_name(MANIFEST + _TMP_SUFFIX)
        with open(tmp, "w", encoding="utf-8") as f:
            for h, entry in self._entries.items():
                f.write(json.dumps(_put_record(h, entry) | {"seq": self._next_seq}) + "\n")
                self._next_seq += 1
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._manifest_path)
        _fsync_dir(self.root)
        self.stats.compactions += 1
        self._manifest = open(self._manifest_path, "a", encoding="utf-8")

    # -- recovery ---------------------------------------------------------------------------

    def _recover(self, verify: bool) -> None:
        records, torn = self._read_manifest()
        for rec in records:
            if rec["op"] == "put":
                self._entries[rec["hash"]] = _Entry(rec["layout"], rec["size"], rec["checksum"])
                self._entries.move_to_end(rec["hash"])
            else:
                self._entries.pop(rec["hash"], None)
        for h in list(self._entries):
            if self._load(h, self._entries[h], verify) is None:
                del self._entries[h]
        self._remove_orphans()
        self.bytes_used = sum(e.size for e in self._entries.values())
        self.stats.recovered = len(self._entries)
        self.stats.torn_records = torn
        dirty = torn > 0 or self.stats.dropped > 0
        if dirty or len(records) > COMPACT_RATIO * len(self._entries) + COMPACT_SLACK:
            # A torn line would swallow the next append, and dropped entries would be replayed
            # and re-verified on every open: rewrite the log now.
            self.compact()
        else:
            self._manifest = open(self._manifest_path, "a", encoding="utf-8")
        # The budget may have shrunk since the last run.
        while self.bytes_used > self.capacity_bytes:
            self._evict_lru()
            self.stats.evictions += 1

    def _read_manifest(self) -> tuple[list[dict], int]:
        if not self._manifest_path.exists():
            return [], 0
        records, torn = [], 0
        with open(self._manifest_path, encoding="utf-8", errors="replace") as f:
            for line in f:
                rec = _parse_record(line)
                if rec is None:
                    torn += 1
                    continue
                if rec["seq"] < self._next_seq:
                    continue  # not after the previous record: a stale duplicate, not history
                self._next_seq = rec["seq"] + 1
                records.append(rec)
        return records, torn

    def _load(self, h: int, entry: _Entry, verify: bool) -> bytes | None:
        """The block's bytes (empty when not verified), or None after dropping a bad file.

        Every failure counts in stats.dropped; a checksum mismatch also in checksum_failures.
        """
        path = self._blocks_dir / block_filename(h)
        try:
            if not verify:
                ok = path.stat().st_size == entry.size
                data = b""
            else:
                data = path.read_bytes()
                ok = len(data) == entry.size
                if ok and checksum(data) != entry.checksum:
                    self.stats.checksum_failures += 1
                    ok = False
        except FileNotFoundError:
            self.stats.dropped += 1
            return None
        if not ok:
            self.stats.dropped += 1
            path.unlink()
            return None
        return data

    def _remove_orphans(self) -> None:
        # Also removes temp files left by a crash mid-write (their names do not parse).
        for path in self._blocks_dir.iterdir():
            h = _hash_from_filename(path.name)
            if h is not None and h in self._entries:
                continue
            path.unlink()
            self.stats.orphans_removed += 1

    # -- files and log ----------------------------------------------------------------------

    def _write_file(self, h: int, data: bytes) -> None:
        final = self._blocks_dir / block_filename(h)
        tmp = final.with_name(final.name + _TMP_SUFFIX)
        with open(tmp, "wb") as f:
            f.write(data)
            if self.durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, final)
        if self.durable:
            _fsync_dir(self._blocks_dir)

    def _append(self, record: dict) -> None:
        assert self._manifest is not None, "DiskTier used after close()"
        self._manifest.write(json.dumps(record | {"seq": self._next_seq}) + "\n")
        self._next_seq += 1
        self._manifest.flush()
        if self.durable:
            os.fsync(self._manifest.fileno())

    def _evict_lru(self) -> None:
        h = next(iter(self._entries))
        self._drop(h)
        if self.on_evict is not None:
            self.on_evict(h)

    def _drop(self, h: int) -> None:
        entry = self._entries.pop(h)
        self.bytes_used -= entry.size
        self._append({"op": "evict", "hash": f"{h:016x}"})
        (self._blocks_dir / block_filename(h)).unlink(missing_ok=True)


def _put_record(h: int, entry: _Entry) -> dict:
    return {
        "op": "put",
        "hash": f"{h:016x}",
        "layout": entry.layout,
        "size": entry.size,
        "checksum": entry.checksum,
    }


def _parse_record(line: str) -> dict | None:
    """A well-formed record with the hash as an int, or None for a torn or garbled line."""
    try:
        rec = json.loads(line)
        if not isinstance(rec, dict) or not isinstance(rec.get("seq"), int):
            return None
        rec["hash"] = int(rec["hash"], 16)
        if not 0 <= rec["hash"] < 1 << 64:
            return None
        if rec["op"] == "put":
            if not (
                isinstance(rec["layout"], str)
                and isinstance(rec["size"], int)
                and isinstance(rec["checksum"], int)
            ):
                return None
        elif rec["op"] != "evict":
            return None
    except (ValueError, KeyError, TypeError):
        return None
    return rec


def _hash_from_filename(name: str) -> int | None:
    if not name.endswith(BLOCK_SUFFIX) or len(name) != 16 + len(BLOCK_SUFFIX):
        return None
    try:
        return int(name[:16], 16)
    except ValueError:
        return None


def _check_hash(h: int) -> None:
    if not 0 <= h < 1 << 64:
        raise ValueError(f"a block hash is an unsigned 64-bit integer, got {h}")


def _fsync_dir(path: Path) -> None:
    # The rename is durable only once the directory entry is on disk.
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
