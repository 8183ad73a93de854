"""The KV block size: a contract between services, carried by the workers' reports.

A worker's engine hashes a prompt in blocks of its own block size; the gateway hashes the same
prompt to route it by prefix, and the scheduler turns cached blocks into tokens. Both must use
the size the model's workers use, so workers report it (WorkerStats.kv_block_size, then
ReplicaInfo.kv_block_size in heartbeats) and gateway and scheduler use what is reported per
model. Replicas of one model that report different sizes are a misconfiguration: the scheduler
logs it and `agreed_block_size` names the majority, so prefix routing keeps matching on most
replicas instead of silently on none. DEFAULT_BLOCK_SIZE is what an engine uses unless told
otherwise, and what a reader assumes for a replica that reports nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

DEFAULT_BLOCK_SIZE = 16


def block_tokens(reported: int) -> int:
    """The block size to assume for a replica that reported `reported` (0: not reported)."""
    return reported if reported > 0 else DEFAULT_BLOCK_SIZE


def agreed_block_size(reported: Iterable[int]) -> tuple[int, bool]:
    """(the size most replicas of a model report, whether they all agree); the default when
    none reported one."""
    counts = Counter(block_tokens(r) for r in reported)
    if not counts:
        return DEFAULT_BLOCK_SIZE, True
    size, _ = max(counts.items(), key=lambda kv: (kv[1], -kv[0]))
    return size, len(counts) == 1
