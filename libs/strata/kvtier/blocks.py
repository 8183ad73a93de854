"""Block records shared by the tiers: a stored block, per-tier counters, the prefix rule."""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass


@dataclass(slots=True)
class StoredBlock:
    block_hash: int
    layout: str
    data: bytes
    checksum: int


@dataclass(slots=True)
class TierStats:
    hits: int = 0
    misses: int = 0
    evictions: int = 0
    checksum_failures: int = 0
    rejected: int = 0


def leading_present(hashes: list[int], present: Container[int]) -> int:
    """How many leading hashes a tier holds: the prefix it can serve (every tier answers so)."""
    n = 0
    for h in hashes:
        if h not in present:
            break
        n += 1
    return n
