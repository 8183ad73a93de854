"""Attention over the paged KV cache.

Cache layout, one tensor for the whole pool (see `kv_cache_shape`):

    kv[layer, 0|1 (k|v), kv_head, block_id, slot_in_block, head_dim]

KV heads lead so that gathering a batch's blocks yields, with no further copy, the layout the
batched matmuls read: [kv_head, sequence, key, head_dim], keys transposed by stride alone.

A step's tokens arrive flattened; `slot_mapping[t] = block_id * block_size + slot` says where
token t's key and value are written. Each sequence then attends over its own blocks (its block
table) up to its context length. Sequences are attended in padded batches: the decodes (one new
token each), and the prefill chunks (several new tokens, a causal mask offset by what the cache
already holds) in groups of similar size (strata.core.prefill_groups), so a short chunk is not
padded to a long one's square. Grouped-query attention is computed by grouping query heads per
KV head, so keys and values are never repeated; the softmax runs in fp32. On the CPU the decode
batch instead goes through the fused C++ kernel of strata.engine.kernels when it is built and
enabled: it reads each sequence's blocks in place, with no gather copy and no padding.

    queries  [S, Q, H, D]  ->  [KVH, S, G*Q, D]      (G = H / KVH query heads per KV head)
    keys     [KVH, S, L, D]     (gathered blocks; L = blocks * block_size)
    scores   [KVH, S, G*Q, L] (+ mask: -inf where a key is in the future or past the context)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from strata.core.prefill_groups import prefill_groups
from strata.engine import kernels
from strata.engine.packed_linear import AMX_BF16, ONEDNN_BF16
from strata.engine.rope import apply_rotary

if TYPE_CHECKING:
    from strata.engine.block_tables import BlockTables
    from strata.engine.sparse.decode import SparseStep


@dataclass(slots=True)
class SeqSlice:
    """One sequence's part of a step: tokens [start, start+num_new) of the flattened batch."""

    start: int
    num_new: int
    context_len: int  # tokens in the cache after this step, including the new ones
    block_ids: list[int]


# A tile of a prefill group's queries keeps its float32 scores within this many bytes (a few
# MiB: they stay in the caches; measured: docs/design/engine.md), and holds at least this many
# queries.
TILE_SCORE_BYTES = 4 << 20
TILE_MIN_QUERIES = 16


@dataclass(slots=True)
class Group:
    """Sequences attended together: padded gather indices and the additive mask."""

    token_index: torch.Tensor  # [S*Q] rows of the flattened step (padding repeats a row)
    valid: torch.Tensor  # [S*Q] bool: which of those rows are real
    block_tables: torch.Tensor  # [S, W] int64 (padded with 0)
    queries: int  # Q
    context_lens: torch.Tensor  # [S] int64: keys each sequence attends over (its last query's)
    positions: torch.Tensor  # [S, Q] int64: each query's position (padding repeats the last)
    block_size: int
    fresh: bool = False  # one prefill chunk from its prompt's start: keys = its Q queries
    _mask: torch.Tensor | None = None
    _allowed: torch.Tensor | None = None
    _tiles: list[tuple[int, int, int]] | None = None

    @property
    def mask(self) -> torch.Tensor:
        """[1, S, 1, Q, W*block_size] additive (0 or -inf), float32: key k is visible to a query
        at position p when k <= p (causal) and k < the context length (padding). Built on first
        use: it is as long as the context, and the fused CPU decode kernel never reads it."""
        if self._mask is None:
            allowed = self.allowed[:, 0]
            mask = torch.zeros(allowed.shape, dtype=torch.float32, device=allowed.device)
            self._mask = mask.masked_fill_(~allowed, float("-inf"))[None, :, None]
        return self._mask

    @property
    def allowed(self) -> torch.Tensor:
        """[S, 1, Q, W*block_size] bool: the keys `mask` leaves visible (where it is 0)."""
        if self._allowed is None:
            key_pos = torch.arange(
                self.block_tables.shape[1] * self.block_size, device=self.positions.device
            )
            allowed = (key_pos[None, None, :] <= self.positions[:, :, None]) & (
                key_pos[None, None, :] < self.context_lens[:, None, None]
            )
            self._allowed = allowed[:, None]
        return self._allowed

    def tiles(self, heads: int) -> list[tuple[int, int, int]]:
        """The queries in tiles (first, end, keys): queries [first, end) of every sequence, whose
        float32 scores over `heads` query heads take at most TILE_SCORE_BYTES, and the keys any
        of them sees (every later key is masked for all of them: causal). One tile when the
        whole group fits. Worked out on first use, for all of a step's layers."""
        if self._tiles is None:
            s, q = self.positions.shape
            keys = self.block_tables.shape[1] * self.block_size
            rows = max(TILE_MIN_QUERIES, TILE_SCORE_BYTES // (4 * heads * s * keys))
            if rows >= q:
                self._tiles = [(0, q, keys)]
            else:
                last = self.positions.max(dim=0).values.tolist()  # per query index
                self._tiles = [
                    (a, min(q, a + rows), min(keys, int(last[min(q, a + rows) - 1]) + 1))
                    for a in range(0, q, rows)
                ]
        return self._tiles


@dataclass(slots=True)
class AttentionMetadata:
    slot_mapping: torch.Tensor  # [T] int64
    groups: list[Group]
    block_size: int
    native: bool = False  # decode groups through the fused CPU kernel
    sparse: SparseStep | None = None  # decode rows on the sparse path (strata.engine.sparse)

    @staticmethod
    def build(
        slices: list[SeqSlice],
        block_size: int,
        device: torch.device | str,
        native: bool = False,
        tables: BlockTables | None = None,
    ) -> AttentionMetadata:
        """`tables`: the engine's block tables kept across steps (block_tables.py); without it
        each group's table is made from the slices' lists."""
        slots: list[int] = []
        for s in slices:
            first = s.context_len - s.num_new
            if s.num_new == 1:
                slots.append(s.block_ids[first // block_size] * block_size + first % block_size)
            else:
                slots.extend(
                    s.block_ids[p // block_size] * block_size + p % block_size
                    for p in range(first, s.context_len)
                )
        rows = (
            dict(zip(map(id, slices), tables.step([s.block_ids for s in slices])))
            if tables is not None
            else None
        )
        decodes = [s for s in slices if s.num_new == 1]
        prefills = [s for s in slices if s.num_new > 1]
        groups = [_group(decodes, block_size, device, rows)] if decodes else []
        groups += [
            _group([prefills[i] for i in members], block_size, device, rows)
            for members in prefill_groups(
                [(s.num_new, s.context_len) for s in prefills], block_size
            )
        ]
        return AttentionMetadata(
            slot_mapping=torch.tensor(slots, dtype=torch.int64, device=device),
            groups=groups,
            block_size=block_size,
            native=native,
        )


def _group(
    slices: list[SeqSlice], block_size: int, device, rows: dict[int, torch.Tensor] | None
) -> Group:
    q = max(s.num_new for s in slices)
    width = max(len(s.block_ids) for s in slices)
    token_index: list[int] = []
    valid: list[bool] = []
    for s in slices:
        token_index.extend(s.start + min(j, s.num_new - 1) for j in range(q))
        valid.extend(j < s.num_new for j in range(q))
    # query j of a sequence sits at position past + min(j, num_new - 1)
    positions = [
        [s.context_len - s.num_new + min(j, s.num_new - 1) for j in range(q)] for s in slices
    ]
    return Group(
        token_index=torch.tensor(token_index, dtype=torch.int64, device=device),
        valid=torch.tensor(valid, dtype=torch.bool, device=device),
        block_tables=_tables(slices, width, device, rows),
        queries=q,
        context_lens=torch.tensor(
            [s.context_len for s in slices], dtype=torch.int64, device=device
        ),
        positions=torch.tensor(positions, dtype=torch.int64, device=device),
        block_size=block_size,
        fresh=len(slices) == 1 and slices[0].num_new == slices[0].context_len,
    )


def _tables(
    slices: list[SeqSlice], width: int, device, rows: dict[int, torch.Tensor] | None
) -> torch.Tensor:
    """[S, width] int64: each slice's block ids, padded with 0."""
    if rows is None:
        return torch.tensor(
            [s.block_ids + [0] * (width - len(s.block_ids)) for s in slices],
            dtype=torch.int64,
            device=device,
        )
    if len(slices) == 1:
        return rows[id(slices[0])][None]
    out = torch.zeros((len(slices), width), dtype=torch.int64, device=device)
    for i, s in enumerate(slices):
        out[i, : len(s.block_ids)] = rows[id(s)]
    return out


def kv_cache_shape(
    num_layers: int, kv_heads: int, num_blocks: int, block_size: int, head_dim: int
) -> tuple[int, ...]:
    return (num_layers, 2, kv_heads, num_blocks, block_size, head_dim)


_ROPE_SOURCE = Path(kernels.__file__).with_name("rotary_kv.cpp")


def load_rotary_kernel():
    """torch.ops.strata_rope (kernels/rotary_kv.cpp), built or loaded from the cache, or None
    where it cannot be (a failure is logged once)."""
    return kernels.load_extra(_ROPE_SOURCE, "rotary_kv", "strata_rope", "strata rotary kernel")


def store_kv(
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
) -> None:
    """Write one step's keys and values ([T, KVH, D]) at their slots (meta.slot_mapping)."""
    kv_heads, num_blocks, block_size, head_dim = k_cache.shape
    k_cache.view(kv_heads, num_blocks * block_size, head_dim).index_copy_(
        1, meta.slot_mapping, k.transpose(0, 1)
    )
    v_cache.view(kv_heads, num_blocks * block_size, head_dim).index_copy_(
        1, meta.slot_mapping, v.transpose(0, 1)
    )


def rotate_and_store(
    qkv: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
    heads: int,
) -> torch.Tensor:
    """A step's fused q|k|v rows ([T, (H + 2 KVH) * D]): q and k rotated (cos/sin: [T, D]), k
    and v written into the caches at their slots; returns q [T, H, D]. One C++ pass where the
    CPU kernels are in use (meta.native; kernels/rotary_kv.cpp, the same numbers), otherwise
    apply_rotary and store_kv."""
    t = qkv.shape[0]
    kv_heads, _, _, head_dim = k_cache.shape
    if meta.native and qkv.device.type == "cpu" and qkv.dtype in (torch.float32, torch.bfloat16):
        ops = load_rotary_kernel()
        if ops is not None:
            return ops.rotary_kv(
                qkv, cos.contiguous(), sin.contiguous(), k_cache, v_cache, meta.slot_mapping, heads
            )
    qk = apply_rotary(qkv[:, : (heads + kv_heads) * head_dim].view(t, -1, head_dim), cos, sin)
    q, k = qk.split((heads, kv_heads), dim=1)
    store_kv(
        k,
        qkv[:, (heads + kv_heads) * head_dim :].view(t, kv_heads, head_dim),
        k_cache,
        v_cache,
        meta,
    )
    return q


def paged_attention(
    q: torch.Tensor,
    k: torch.Tensor | None,
    v: torch.Tensor | None,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
    layer: int = 0,
) -> torch.Tensor:
    """q: [T, H, D]; k, v: [T, KVH, D], or None when the step already stored them
    (rotate_and_store); caches: [KVH, num_blocks, block_size, D]. Returns [T, H, D].

    `layer` picks the sparse path's index entries when meta.sparse is set."""
    kv_heads = k_cache.shape[0]
    if k is not None and v is not None:
        store_kv(k, v, k_cache, v_cache, meta)
    groups = q.shape[1] // kv_heads
    native = meta.native and q.device.type == "cpu"
    fused = fused_prefill(q)

    def decode(g: Group) -> torch.Tensor:
        if native:
            return _decode_native(q, k_cache, v_cache, g, scale)
        return _attend(q, k_cache, v_cache, g, scale, groups)

    sparse = meta.sparse
    if sparse is not None:

        def decode_sparse(g: Group) -> torch.Tensor:
            return sparse.attend(q, k_cache, v_cache, g, scale, layer, decode)
    else:
        decode_sparse = decode
    if len(meta.groups) == 1 and meta.groups[0].queries == 1:
        return decode_sparse(meta.groups[0]).view_as(q)
    out = torch.empty_like(q)
    for g in meta.groups:
        if g.queries == 1:
            o = decode_sparse(g)
        elif fused:
            o = _attend_chunks(q, k_cache, v_cache, g, scale)  # [S*Q, H, D]
        else:
            o = _attend(q, k_cache, v_cache, g, scale, groups)
        rows = g.token_index[g.valid]
        out.index_copy_(0, rows, o[g.valid])
    return out


def _decode_native(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, g: Group, scale: float
) -> torch.Tensor:
    """The decode group through the fused CPU kernel: it reads the cache in place by block table,
    so there is no gather, no padded mask and no dtype round trip. Returns [S, H, D]."""
    ops = kernels.load()
    assert ops is not None, "meta.native is set only when the kernel loaded"
    return ops.decode_attention(
        q.index_select(0, g.token_index), k_cache, v_cache, g.block_tables, g.context_lens, scale
    )


def _gather(cache: torch.Tensor, blocks: torch.Tensor) -> torch.Tensor:
    """cache [KVH, NB, BS, D] -> [KVH, len(blocks), BS, D]; index_select along a leading
    dimension per head, several times faster on CPU than along dimension 1."""
    out = cache.new_empty((cache.shape[0], blocks.numel(), *cache.shape[2:]))
    for h in range(cache.shape[0]):
        torch.index_select(cache[h], 0, blocks, out=out[h])
    return out


def fused_prefill(q: torch.Tensor) -> bool:
    """Whether prefill chunks of `q` go through the fused kernel (_attend_chunks): on a GPU, and
    in bfloat16 on a CPU with AMX, where it ran 2-7x faster than the tiles on one thread;
    elsewhere the tiles (_attend), which measured faster: in float32, on an AVX2-only CPU (for
    chunks up to 256 x 1,024 keys), and in bfloat16 on an AVX-512 BF16 CPU without AMX (about
    2x, from 16 x 216 to 1,024 x 1,024; docs/design/engine.md)."""
    if q.device.type != "cpu":
        return True
    return q.dtype == torch.bfloat16 and ONEDNN_BF16 and AMX_BF16


def _attend_chunks(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, g: Group, scale: float
) -> torch.Tensor:
    """A group of prefill chunks (several queries a sequence) over their gathered keys through
    torch's scaled_dot_product_attention, grouped-query heads mapped as the cache holds them
    (query head h reads KV head h // groups) and the group's mask as a boolean one (Group.allowed).
    Its fused kernel tiles the keys itself and keeps the scores in float32, so no score matrix is
    materialized (as `_attend` does, a tile at a time). A fresh group (one chunk from its
    prompt's start) goes as plainly causal over exactly its keys, with no mask: the kernel then
    skips the tiles above the diagonal. Returns [S*Q, H, D]."""
    s, width = g.block_tables.shape
    kv_heads, _, block_size, head_dim = k_cache.shape
    nq, heads = g.queries, q.shape[1]
    flat = g.block_tables.reshape(-1)
    keys = _gather(k_cache, flat).view(kv_heads, s, width * block_size, head_dim)
    vals = _gather(v_cache, flat).view(kv_heads, s, width * block_size, head_dim)
    qs = q.index_select(0, g.token_index).view(s, nq, heads, head_dim).transpose(1, 2)
    if g.fresh:
        out = F.scaled_dot_product_attention(
            qs,
            keys.transpose(0, 1)[:, :, :nq],
            vals.transpose(0, 1)[:, :, :nq],
            is_causal=True,
            scale=scale,
            enable_gqa=heads != kv_heads,
        )
        return out.transpose(1, 2).reshape(nq, heads, head_dim)
    out = F.scaled_dot_product_attention(
        qs,
        keys.transpose(0, 1),
        vals.transpose(0, 1),
        attn_mask=g.allowed,
        scale=scale,
        enable_gqa=heads != kv_heads,
    )
    return out.transpose(1, 2).reshape(s * nq, heads, head_dim)


def _attend(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    g: Group,
    scale: float,
    groups: int,
) -> torch.Tensor:
    """The group's queries over their gathered keys, a tile of queries at a time (Group.tiles):
    a long prefill chunk's scores, one float32 value per query, head and key, would otherwise
    outgrow the caches, and a tile reads only the keys its queries see. Each query's row is
    computed as it would be in one piece (the keys a tile leaves out are masked for it)."""
    s, width = g.block_tables.shape
    kv_heads, _, block_size, head_dim = k_cache.shape
    nq = g.queries
    flat = g.block_tables.reshape(-1)
    keys = _gather(k_cache, flat).view(kv_heads, s, width * block_size, head_dim)
    vals = _gather(v_cache, flat).view(kv_heads, s, width * block_size, head_dim)
    qs = q.index_select(0, g.token_index).view(s, nq, kv_heads, groups, head_dim)
    qs = qs.permute(2, 0, 3, 1, 4)  # [KVH, S, G, Q, D]
    tiles = g.tiles(kv_heads * groups)
    out = qs.new_empty((kv_heads, s, groups, nq, head_dim)) if len(tiles) > 1 else None
    for first, end, seen in tiles:
        n = end - first
        qt = qs[:, :, :, first:end].reshape(kv_heads, s, groups * n, head_dim)
        scores = torch.matmul(qt, keys[:, :, :seen].transpose(-1, -2)).float().mul_(scale)
        scores = scores.view(kv_heads, s, groups, n, seen).add_(g.mask[..., first:end, :seen])
        probs = torch.softmax(scores, dim=-1).to(q.dtype).view(kv_heads, s, groups * n, seen)
        part = torch.matmul(probs, vals[:, :, :seen]).view(kv_heads, s, groups, n, head_dim)
        if out is None:
            out = part
        else:
            out[:, :, :, first:end] = part
    assert out is not None
    out = out.permute(1, 3, 0, 2, 4)
    return out.reshape(s * nq, kv_heads * groups, head_dim)
