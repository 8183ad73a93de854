"""Attention over the paged KV cache.

Cache layout, one tensor for the whole pool:

    kv[layer, 0|1 (k|v), block_id, slot_in_block, kv_head, head_dim]

A step's tokens arrive flattened; `slot_mapping[t] = block_id * block_size + slot` says where
token t's key and value are written. Each sequence then attends over its own blocks (its block
table) up to its context length. Decode-only sequences are attended in one padded batch; sequences
with several new tokens (prefill chunks) one at a time, with a causal mask offset by what the
cache already holds.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(slots=True)
class SeqSlice:
    """One sequence's part of a step: tokens [start, start+num_new) of the flattened batch."""

    start: int
    num_new: int
    context_len: int           # tokens in the cache after this step, including the new ones
    block_ids: list[int]


@dataclass(slots=True)
class AttentionMetadata:
    slot_mapping: torch.Tensor           # [T] int64
    prefills: list[SeqSlice]             # num_new > 1
    decode_index: torch.Tensor           # [D] flattened-token index of each decode token
    decode_block_tables: torch.Tensor    # [D, max_blocks] int64 (padded with 0)
    decode_context_lens: torch.Tensor    # [D] int64
    block_size: int

    @staticmethod
    def build(slices: list[SeqSlice], block_size: int, device: torch.device) -> AttentionMetadata:
        slots: list[int] = []
        prefills, decodes = [], []
        for s in slices:
            first = s.context_len - s.num_new
            for pos in range(first, s.context_len):
                slots.append(s.block_ids[pos // block_size] * block_size + pos % block_size)
            (decodes if s.num_new == 1 else prefills).append(s)
        width = max((len(s.block_ids) for s in decodes), default=0)
        tables = [s.block_ids + [0] * (width - len(s.block_ids)) for s in decodes]
        return AttentionMetadata(
            slot_mapping=torch.tensor(slots, dtype=torch.int64, device=device),
            prefills=prefills,
            decode_index=torch.tensor([s.start for s in decodes], dtype=torch.int64, device=device),
            decode_block_tables=torch.tensor(tables, dtype=torch.int64, device=device).reshape(
                len(decodes), width),
            decode_context_lens=torch.tensor([s.context_len for s in decodes], dtype=torch.int64,
                                             device=device),
            block_size=block_size,
        )


def paged_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor,
                    v_cache: torch.Tensor, meta: AttentionMetadata, scale: float) -> torch.Tensor:
    """q: [T, H, D]; k, v: [T, KVH, D]; caches: [num_blocks, block_size, KVH, D]. Returns [T, H, D]."""
    num_blocks, block_size, kv_heads, head_dim = k_cache.shape
    flat_k = k_cache.view(num_blocks * block_size, kv_heads, head_dim)
    flat_v = v_cache.view(num_blocks * block_size, kv_heads, head_dim)
    flat_k.index_copy_(0, meta.slot_mapping, k)
    flat_v.index_copy_(0, meta.slot_mapping, v)
    out = torch.empty_like(q)
    groups = q.shape[1] // kv_heads
    for s in meta.prefills:
        blocks = torch.tensor(s.block_ids, dtype=torch.int64, device=q.device)
        keys = k_cache.index_select(0, blocks).reshape(-1, kv_heads, head_dim)[:s.context_len]
        vals = v_cache.index_select(0, blocks).reshape(-1, kv_heads, head_dim)[:s.context_len]
        qs = q[s.start:s.start + s.num_new]
        past = s.context_len - s.num_new
        # query i sits at absolute position past+i and sees keys 0..past+i
        mask = (torch.arange(s.context_len, device=q.device)[None, :]
                <= (past + torch.arange(s.num_new, device=q.device))[:, None])
        out[s.start:s.start + s.num_new] = _sdpa(qs.transpose(0, 1), keys.transpose(0, 1),
                                                 vals.transpose(0, 1), mask, scale,
                                                 groups).transpose(0, 1)
    if meta.decode_index.numel():
        d = meta.decode_index.numel()
        width = meta.decode_block_tables.shape[1]
        keys = k_cache[meta.decode_block_tables].reshape(d, width * block_size, kv_heads, head_dim)
        vals = v_cache[meta.decode_block_tables].reshape(d, width * block_size, kv_heads, head_dim)
        mask = (torch.arange(width * block_size, device=q.device)[None, :]
                < meta.decode_context_lens[:, None])                       # [D, L]
        qd = q.index_select(0, meta.decode_index)                          # [D, H, Dh]
        o = _sdpa(qd[:, :, None, :], keys.transpose(1, 2), vals.transpose(1, 2),
                  mask[:, None, None, :], scale, groups)                   # [D, H, 1, Dh]
        out.index_copy_(0, meta.decode_index, o[:, :, 0, :])
    return out


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float,
          groups: int) -> torch.Tensor:
    if groups > 1:
        k = k.repeat_interleave(groups, dim=-3)
        v = v.repeat_interleave(groups, dim=-3)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
