"""Block identity: the hash chain every node agrees on (the one definition).

    block 0            block 1            block 2
    [t0 .. t15]  ->    [t16 .. t31]  ->   [t32 .. t47]
    h0 = H(ROOT, t0..15, extra)
                       h1 = H(h0, t16..31, extra)
                                          h2 = H(h1, t32..47, extra)

H is xxh64 with a fixed seed over (parent hash, token ids as little-endian int32, extra keys).
Extra keys are the model id, the tenant salt (tenants do not share prefixes unless a prefix is
marked public: a shared cache is a timing side channel) and the adapter id. Only full blocks are
hashed; a block's hash is final once its last token is written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import xxhash

HASH_SEED = 0x5354524154  # "STRAT": fixed so that every process and node computes the same chain
ROOT_HASH = 0
PUBLIC_SALT = "public"


@dataclass(frozen=True, slots=True)
class HashKeys:
    """What besides tokens makes two blocks different."""

    model: str
    tenant_salt: str
    adapter: str = ""

    @staticmethod
    def for_request(model: str, tenant: str, prefix_public: bool, adapter: str = "") -> HashKeys:
        return HashKeys(
            model=model,
            tenant_salt=PUBLIC_SALT if prefix_public else f"t:{tenant}",
            adapter=adapter,
        )

    def encode(self) -> bytes:
        return f"{self.model}\x00{self.tenant_salt}\x00{self.adapter}".encode()


def block_hash(parent: int, tokens: Sequence[int], keys: HashKeys) -> int:
    h = xxhash.xxh64(seed=HASH_SEED)
    h.update(parent.to_bytes(8, "little"))
    h.update(np.asarray(tokens, dtype="<i4").tobytes())
    h.update(keys.encode())
    return h.intdigest()


def chain_hashes(
    tokens: Sequence[int], block_size: int, keys: HashKeys, parent: int = ROOT_HASH
) -> list[int]:
    """Hashes of every full block of `tokens`, chained from `parent`."""
    out = []
    for start in range(0, len(tokens) - block_size + 1, block_size):
        parent = block_hash(parent, tokens[start : start + block_size], keys)
        out.append(parent)
    return out


def to_bytes(h: int) -> bytes:
    return h.to_bytes(8, "big")


def from_bytes(b: bytes) -> int:
    if len(b) != 8:
        raise ValueError(f"a block hash is 8 bytes, got {len(b)}")
    return int.from_bytes(b, "big")


def checksum(data: bytes | memoryview) -> int:
    """The xxh64 of a block's bytes, given as bytes or as a view (of shared memory, say)."""
    return xxhash.xxh64_intdigest(data, seed=HASH_SEED)
