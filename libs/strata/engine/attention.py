"""Attention over the paged KV cache.

Cache layout, one tensor for the whole pool:

    kv[layer, 0|1 (k|v), block_id, slot_in_block, kv_head, head_dim]

A step's tokens arrive flattened; `slot_mapping[t] = block_id * block_size + slot` says where
token t's key and value are written. Each sequence then attends over its own blocks (its block
table) up to its context length. Sequences are attended in two padded batches: decodes (one new
token each) and prefill chunks (several new tokens, a causal mask offset by what the cache
already holds). Grouped-query attention is computed by grouping query heads per KV head, so keys
and values are never repeated; the softmax runs in fp32.

    queries  [S, Q, H, D]  ->  [S, KVH, G*Q, D]      (G = H / KVH query heads per KV head)
    keys     [S, L, KVH, D] -> [S, KVH, D, L]
    scores   [S, KVH, G*Q, L] (+ mask: -inf where a key is in the future or past the context)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(slots=True)
class SeqSlice:
    """One sequence's part of a step: tokens [start, start+num_new) of the flattened batch."""

    start: int
    num_new: int
    context_len: int           # tokens in the cache after this step, including the new ones
    block_ids: list[int]


@dataclass(slots=True)
class Group:
    """Sequences attended together: padded gather indices and the additive mask."""

    token_index: torch.Tensor    # [S*Q] rows of the flattened step (padding repeats a row)
    valid: torch.Tensor          # [S*Q] bool: which of those rows are real
    block_tables: torch.Tensor   # [S, W] int64 (padded with 0)
    mask: torch.Tensor           # [S, 1, Q, W*block_size] additive (0 or -inf), float32
    queries: int                 # Q


@dataclass(slots=True)
class AttentionMetadata:
    slot_mapping: torch.Tensor           # [T] int64
    groups: list[Group]
    block_size: int

    @staticmethod
    def build(slices: list[SeqSlice], block_size: int, device: torch.device | str
              ) -> AttentionMetadata:
        slots: list[int] = []
        for s in slices:
            first = s.context_len - s.num_new
            for pos in range(first, s.context_len):
                slots.append(s.block_ids[pos // block_size] * block_size + pos % block_size)
        decodes = [s for s in slices if s.num_new == 1]
        prefills = [s for s in slices if s.num_new > 1]
        groups = [_group(g, block_size, device) for g in (decodes, prefills) if g]
        return AttentionMetadata(
            slot_mapping=torch.tensor(slots, dtype=torch.int64, device=device),
            groups=groups, block_size=block_size)


def _group(slices: list[SeqSlice], block_size: int, device) -> Group:
    q = max(s.num_new for s in slices)
    width = max(len(s.block_ids) for s in slices)
    keys = width * block_size
    token_index, valid, tables = [], [], []
    positions = torch.empty(len(slices), q, dtype=torch.int64)
    limits = torch.empty(len(slices), 1, dtype=torch.int64)
    for i, s in enumerate(slices):
        past = s.context_len - s.num_new
        token_index.extend(s.start + min(j, s.num_new - 1) for j in range(q))
        valid.extend(j < s.num_new for j in range(q))
        tables.append(s.block_ids + [0] * (width - len(s.block_ids)))
        positions[i] = past + torch.arange(q).clamp(max=s.num_new - 1)
        limits[i, 0] = s.context_len
    key_pos = torch.arange(keys)
    # key k is visible to query j when k <= its position and k < the context length
    allowed = (key_pos[None, None, :] <= positions[:, :, None]) & \
        (key_pos[None, None, :] < limits[:, :, None])
    mask = torch.zeros(allowed.shape, dtype=torch.float32).masked_fill_(~allowed, float("-inf"))
    return Group(
        token_index=torch.tensor(token_index, dtype=torch.int64, device=device),
        valid=torch.tensor(valid, dtype=torch.bool, device=device),
        block_tables=torch.tensor(tables, dtype=torch.int64, device=device),
        mask=mask[:, None].to(device), queries=q)


def paged_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor,
                    v_cache: torch.Tensor, meta: AttentionMetadata, scale: float) -> torch.Tensor:
    """q: [T, H, D]; k, v: [T, KVH, D]; caches: [num_blocks, block_size, KVH, D]. Returns [T, H, D]."""
    num_blocks, block_size, kv_heads, head_dim = k_cache.shape
    flat_k = k_cache.view(num_blocks * block_size, kv_heads, head_dim)
    flat_v = v_cache.view(num_blocks * block_size, kv_heads, head_dim)
    flat_k.index_copy_(0, meta.slot_mapping, k)
    flat_v.index_copy_(0, meta.slot_mapping, v)
    heads = q.shape[1]
    groups = heads // kv_heads
    if len(meta.groups) == 1 and meta.groups[0].queries == 1:
        return _attend(q, k_cache, v_cache, meta.groups[0], scale, groups).view_as(q)
    out = torch.empty_like(q)
    for g in meta.groups:
        o = _attend(q, k_cache, v_cache, g, scale, groups)          # [S*Q, H, D]
        rows = g.token_index[g.valid]
        out.index_copy_(0, rows, o[g.valid])
    return out


def _attend(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, g: Group,
            scale: float, groups: int) -> torch.Tensor:
    s, width = g.block_tables.shape
    _, block_size, kv_heads, head_dim = k_cache.shape
    nq = g.queries
    flat = g.block_tables.reshape(-1)
    keys = k_cache.index_select(0, flat).view(s, width * block_size, kv_heads, head_dim)
    vals = v_cache.index_select(0, flat).view(s, width * block_size, kv_heads, head_dim)
    qs = q.index_select(0, g.token_index).view(s, nq, kv_heads, groups, head_dim)
    qs = qs.permute(0, 2, 3, 1, 4).reshape(s, kv_heads, groups * nq, head_dim)
    scores = torch.matmul(qs, keys.permute(0, 2, 3, 1)).float() * scale  # [S, KVH, G*Q, L]
    scores = scores.view(s, kv_heads, groups, nq, -1) + g.mask[:, :, None]
    probs = torch.softmax(scores, dim=-1).to(q.dtype).view(s, kv_heads, groups * nq, -1)
    out = torch.matmul(probs, vals.permute(0, 2, 1, 3))                  # [S, KVH, G*Q, D]
    out = out.view(s, kv_heads, groups, nq, head_dim).permute(0, 3, 1, 2, 4)
    return out.reshape(s * nq, kv_heads * groups, head_dim)
