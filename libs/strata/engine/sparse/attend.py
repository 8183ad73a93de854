"""Exact attention of (row, KV head) pairs over their own block lists, with the log partition.

The cache of one layer, k_cache [KVH, NB, BS, D], is read as one head's worth of KVH * NB blocks
(`flat_ids`: block b of KV head h is flat block h * NB + b), so every pair can read a different
list of blocks: the sparse selection picks blocks per KV head. On the CPU the fused kernels read
the blocks in place: strata.engine.kernels' decode_attention for full attention (pairs are its
"sequences" of G query heads over that one-head cache), and sparse_kernels.cpp for attention over
a selection with the log sum exp of its scores, which the trust check needs. Elsewhere the torch
path gathers the blocks first.
"""

from __future__ import annotations

import torch

from strata.engine import kernels
from strata.engine.sparse import native as sparse_native


def flat_ids(block_ids: torch.Tensor, kv_heads: int, num_blocks: int) -> torch.Tensor:
    """[R*KVH, W] physical block ids of pairs (pair = row * KVH + head) -> flat ids."""
    head = torch.arange(block_ids.shape[0], device=block_ids.device) % kv_heads
    return block_ids + (head * num_blocks)[:, None]


def attend_blocks(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    flat: torch.Tensor,
    block_lens: torch.Tensor,
    scale: float,
    fused: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """q [P, G, D]; caches [KVH, NB, BS, D]; flat [P, B] flat block ids; block_lens [P, B] the
    leading tokens of each block to read (0: none). Returns the output [P, G, D] and log sum
    exp of the scaled scores [P, G] (float32). `fused`: through sparse_kernels.cpp."""
    _, _, block_size, dim = k_cache.shape
    if fused:
        ops = sparse_native.load()
        assert ops is not None, "fused is set only when the sparse kernels loaded"
        return ops.sparse_attention(
            q,
            k_cache.reshape(-1, block_size, dim),
            v_cache.reshape(-1, block_size, dim),
            flat,
            block_lens,
            scale,
        )
    pairs, width = flat.shape
    rows = flat.reshape(-1)
    keys = k_cache.reshape(-1, block_size, dim).index_select(0, rows)
    scores = torch.matmul(q, keys.view(pairs, width * block_size, dim).transpose(-1, -2))
    scores = scores.float().mul_(scale)  # [P, G, B*BS]
    unread = torch.arange(block_size, device=q.device) >= block_lens[..., None]
    scores.masked_fill_(unread.view(pairs, 1, -1), float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    probs = scores.sub_(lse[..., None]).exp_().to(q.dtype)
    vals = v_cache.reshape(-1, block_size, dim).index_select(0, rows)
    return torch.matmul(probs, vals.view(pairs, width * block_size, dim)), lse


def attend_full(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    flat: torch.Tensor,
    lens: torch.Tensor,
    scale: float,
    native: bool,
    fused: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Attention of pairs over their first lens[p] tokens (flat [P, W] in position order).

    Through the dense decode kernel when native (the same numbers as the dense decode of that
    KV head; no log partition), else through attend_blocks (with it)."""
    kv_heads, num_blocks, block_size, dim = k_cache.shape
    if native:
        ops = kernels.load()
        assert ops is not None, "native is set only when the kernel loaded"
        one = (1, kv_heads * num_blocks, block_size, dim)
        return ops.decode_attention(
            q, k_cache.reshape(one), v_cache.reshape(one), flat, lens, scale
        ), None
    start = torch.arange(flat.shape[1], device=q.device) * block_size
    block_lens = (lens[:, None] - start[None, :]).clamp_(0, block_size)
    return attend_blocks(q, k_cache, v_cache, flat, block_lens, scale, fused)
