"""How big each configuration's KV tiers are, from the scaled trace's cache figures. Pure.

device-only   working set + batch room     nothing is ever evicted: every block the run
                                           commits stays, and max_seqs requests of the largest
                                           size still find room for their unshared blocks
                                           (two requests computing one block at once hold two
                                           copies until the first commits)
tiered        device_share * working set   (at least one largest request, so a request always
                                           fits); the KV tier store below it holds the rest
                                           of the working set: host_share of it in host DRAM
                                           (rounded up to whole slabs of slab_blocks blocks,
                                           the store's allocation unit), the remainder plus
                                           `slack` of the rest on disk (the store demotes
                                           host blocks to disk before host memory is full)
recompute     batch room only              max_seqs requests of the largest size; no prefix
                                           is ever shared (each request is its own tenant)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from benchmarks.kv.trace_scale import CacheFigures


@dataclass(slots=True, frozen=True)
class Sizing:
    block_bytes: int
    working_set_blocks: int
    device_only_blocks: int
    tiered_blocks: int
    recompute_blocks: int
    slab_bytes: int
    host_bytes: int
    disk_bytes: int

    @property
    def tier_rest_blocks(self) -> int:
        """Working-set blocks that do not fit in the tiered configuration's device pool."""
        return max(0, self.working_set_blocks - self.tiered_blocks)


def size_configs(
    figures: CacheFigures,
    max_seqs: int,
    block_bytes: int,
    device_share: float = 0.35,
    host_share: float = 0.5,
    slack: float = 0.10,
    slab_blocks: int = 16,
) -> Sizing:
    if max_seqs < 1 or block_bytes < 1:
        raise ValueError(
            f"max_seqs and block_bytes must be at least 1, got {max_seqs}, {block_bytes}"
        )
    for name, value in (("device_share", device_share), ("host_share", host_share)):
        if not 0 < value <= 1:
            raise ValueError(f"{name} must be in (0, 1], got {value}")
    if slack < 0 or slab_blocks < 1:
        raise ValueError(
            f"slack must be non-negative and slab_blocks at least 1, got {slack}, {slab_blocks}"
        )
    batch = max_seqs * figures.max_request_blocks
    ws = figures.working_set_blocks
    tiered = max(math.floor(device_share * ws), figures.max_request_blocks, 1)
    rest = max(0, ws - tiered)
    host_blocks = max(1, math.ceil(host_share * rest / slab_blocks)) * slab_blocks
    disk_blocks = max(1, rest - host_blocks + math.ceil(slack * rest))
    return Sizing(
        block_bytes=block_bytes,
        working_set_blocks=ws,
        device_only_blocks=ws + batch,
        tiered_blocks=tiered,
        recompute_blocks=max(batch, 1),
        slab_bytes=slab_blocks * block_bytes,
        host_bytes=host_blocks * block_bytes,
        disk_bytes=disk_blocks * block_bytes,
    )
