"""Prefill attention, a tile of queries at a time or through the fused kernel, gives every query's
row as the dense reference does."""

import pytest
import torch

from strata.engine import attention
from strata.engine.attention import AttentionMetadata, SeqSlice, paged_attention

BLOCK = 4
KV_HEADS, GROUPS, DIM = 2, 3, 8


def _step(chunks: list[tuple[int, int]], dtype=torch.float32, seed=0):
    """Sequences that each prefill `new` tokens after `before` cached ones; a cache of random
    keys and values and the step's queries."""
    gen = torch.Generator().manual_seed(seed)
    slices, start, block = [], 0, 0
    for before, new in chunks:
        ctx = before + new
        blocks = list(range(block, block + -(-ctx // BLOCK)))
        block += len(blocks)
        slices.append(SeqSlice(start, new, ctx, blocks))
        start += new
    k = torch.randn(KV_HEADS, block + 1, BLOCK, DIM, generator=gen).to(dtype)
    v = torch.randn(KV_HEADS, block + 1, BLOCK, DIM, generator=gen).to(dtype)
    q = torch.randn(start, KV_HEADS * GROUPS, DIM, generator=gen).to(dtype)
    return slices, q, k, v


def _reference(slices, q, k, v, scale):
    """Each sequence alone, densely, in float64: query at position p sees keys 0..p."""
    out = torch.empty(q.shape, dtype=torch.float64)
    for s in slices:
        keys = k[:, s.block_ids].reshape(KV_HEADS, -1, DIM)[:, : s.context_len].double()
        vals = v[:, s.block_ids].reshape(KV_HEADS, -1, DIM)[:, : s.context_len].double()
        first = s.context_len - s.num_new
        for t in range(s.num_new):
            pos = first + t
            for h in range(KV_HEADS * GROUPS):
                kv = h // GROUPS
                w = torch.softmax(keys[kv, : pos + 1] @ q[s.start + t, h].double() * scale, 0)
                out[s.start + t, h] = w @ vals[kv, : pos + 1]
    return out


@pytest.mark.parametrize("tile_bytes", [1, 4 << 10, 1 << 30])
def test_tiled_prefill_rows_equal_the_dense_reference(monkeypatch, tile_bytes):
    torch.set_num_threads(1)
    monkeypatch.setattr(attention, "TILE_SCORE_BYTES", tile_bytes)
    monkeypatch.setattr(attention, "TILE_MIN_QUERIES", 3)
    slices, q, k, v = _step([(0, 37), (21, 16), (5, 29)])
    meta = AttentionMetadata.build(slices, BLOCK, "cpu")
    (group,) = meta.groups
    tiles = group.tiles(KV_HEADS * GROUPS)
    assert (len(tiles) > 1) == (tile_bytes < 1 << 30)
    got = paged_attention(q, None, None, k, v, meta, 0.3)
    want = _reference(slices, q, k, v, 0.3)
    assert torch.allclose(got.double(), want, atol=1e-5, rtol=1e-5)


def test_tiles_cover_the_queries_in_order_and_keep_every_key_a_query_sees(monkeypatch):
    monkeypatch.setattr(attention, "TILE_SCORE_BYTES", 4 << 10)
    monkeypatch.setattr(attention, "TILE_MIN_QUERIES", 2)
    slices, *_ = _step([(0, 37), (21, 16), (5, 29)])
    (group,) = AttentionMetadata.build(slices, BLOCK, "cpu").groups
    width = group.block_tables.shape[1] * BLOCK
    tiles = group.tiles(KV_HEADS * GROUPS)
    assert tiles[0][0] == 0 and tiles[-1][1] == group.queries
    for (_, end, _), (first, _, _) in zip(tiles, tiles[1:], strict=False):
        assert end == first
    for first, end, seen in tiles:
        assert 4 * KV_HEADS * GROUPS * 3 * width * (end - first) <= 4 << 10 or end - first == 2
        assert seen <= width
        assert int(group.positions[:, first:end].max()) < seen  # every visible key kept
        assert int(group.positions[:, end - 1].max()) + 1 == seen  # and no more
    # the group's tiles are worked out once for all layers
    assert group.tiles(KV_HEADS * GROUPS) is tiles


def test_one_tile_when_the_scores_fit():
    slices, *_ = _step([(0, 20), (3, 9)])
    (group,) = AttentionMetadata.build(slices, BLOCK, "cpu").groups
    width = group.block_tables.shape[1] * BLOCK
    assert group.tiles(KV_HEADS * GROUPS) == [(0, group.queries, width)]


def test_bfloat16_tiles_agree_with_one_piece(monkeypatch):
    torch.set_num_threads(1)
    slices, q, k, v = _step([(0, 64), (40, 24)], dtype=torch.bfloat16, seed=3)
    whole = paged_attention(q, None, None, k, v, AttentionMetadata.build(slices, BLOCK, "cpu"), 0.3)
    monkeypatch.setattr(attention, "TILE_SCORE_BYTES", 1)
    monkeypatch.setattr(attention, "TILE_MIN_QUERIES", 8)
    tiled = paged_attention(q, None, None, k, v, AttentionMetadata.build(slices, BLOCK, "cpu"), 0.3)
    want = _reference(slices, q, k, v, 0.3)
    # the same bfloat16 rounding of the scores and weights either way
    assert torch.allclose(tiled.double(), want, atol=3e-2)
    assert torch.allclose(tiled.float(), whole.float(), atol=2e-2)


def test_fused_prefill_rows_equal_the_dense_reference():
    """_attend_chunks: grouped-query heads, chunks after cached tokens, sequences of different
    lengths padded into one group; float32 within 1e-5 of the float64 reference."""
    torch.set_num_threads(1)
    slices, q, k, v = _step([(0, 37), (21, 16), (5, 29)], seed=4)
    (group,) = AttentionMetadata.build(slices, BLOCK, "cpu").groups
    got = attention._attend_chunks(q, k, v, group, 0.3)[group.valid]
    rows = group.token_index[group.valid]
    want = _reference(slices, q, k, v, 0.3)[rows]
    assert torch.allclose(got.double(), want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    ("native", "amx"), [(True, True), (True, False), (False, True), (False, False)]
)
def test_bfloat16_prefill_takes_the_fused_kernel_where_amx_multiplies_it(monkeypatch, native, amx):
    monkeypatch.setattr(attention, "ONEDNN_BF16", native)
    monkeypatch.setattr(attention, "AMX_BF16", amx)
    called = []
    fused = attention._attend_chunks
    monkeypatch.setattr(attention, "_attend_chunks", lambda *a: called.append(1) or fused(*a))
    slices, q, k, v = _step([(0, 19), (8, 11)], dtype=torch.bfloat16, seed=5)
    meta = AttentionMetadata.build(slices, BLOCK, "cpu")
    got = paged_attention(q, None, None, k, v, meta, 0.3)
    assert bool(called) == (native and amx)
    assert not attention.fused_prefill(q.float())  # float32 keeps the tiles
    want = _reference(slices, q.float(), k.float(), v.float(), 0.3)
    assert torch.allclose(got.double(), want, atol=3e-2, rtol=3e-2)


@pytest.mark.parametrize("fused", [True, False])
def test_chunks_of_different_sizes_go_in_groups_and_equal_the_reference(monkeypatch, fused):
    """A long chunk beside short ones: the step runs several prefill groups (strata.core.
    prefill_groups), the fresh long one causal over exactly its keys, and every row is the
    float64 reference's, through the fused kernel and through the tiles."""
    torch.set_num_threads(1)
    monkeypatch.setattr(attention, "fused_prefill", lambda q: fused)
    calls = []
    real = attention._attend_chunks
    monkeypatch.setattr(attention, "_attend_chunks", lambda *a: calls.append(a[3]) or real(*a))
    slices, q, k, v = _step([(0, 160), (0, 9), (30, 12), (2, 7)], seed=6)
    meta = AttentionMetadata.build(slices, BLOCK, "cpu")
    assert len(meta.groups) > 1
    assert [g.fresh for g in meta.groups][0]  # the 160-token prompt from its start, alone
    got = paged_attention(q, None, None, k, v, meta, 0.3)
    want = _reference(slices, q, k, v, 0.3)
    assert torch.allclose(got.double(), want, atol=1e-5, rtol=1e-5)
    assert len(calls) == (len(meta.groups) if fused else 0)
