"""sparse_kernels.cpp's sparse_decode: one call per layer for selection, attention over it,
compensation, the trust check and its fallback. The pairs that pass equal the three ops it fuses
(select_blocks, sparse_attention, compensate) bit for bit, the check equals the one decode.py
computes after them, and a pair that fails it, or that the layer policy runs dense, gets full
attention over its context (its blocks split over the threads) within float rounding; bad
arguments get a sentence naming what is wrong."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from strata.engine.attention import AttentionMetadata, SeqSlice
from strata.engine.sparse import SparseConfig, SparseDecoder, native
from strata.engine.sparse.attend import attend_blocks
from strata.engine.sparse.decode import SparseStep
from strata.engine.sparse.select import select_blocks

BS, KVH, G, NB = 4, 2, 3, 48


@pytest.fixture(autouse=True)
def _kernels():
    if native.load() is None:
        pytest.skip("the sparse CPU kernels did not build")
    torch.set_num_threads(2)  # pairs split over threads: each pair's numbers must hold


def case(dim: int, dtype: torch.dtype, comp: bool, estimate: str):
    gen = torch.Generator().manual_seed(31)
    kv = torch.randn(1, 2, KVH, NB, BS, dim, generator=gen)
    kv[0, 0] *= 0.5
    kv = kv.to(dtype)
    cfg = SparseConfig(
        enabled=True,
        min_context=1,
        budget_blocks=6,
        sink_blocks=1,
        window_blocks=2,
        estimate=estimate,
        compensate=comp,
    )
    dec = SparseDecoder(cfg, 1, KVH, NB, BS, dim, torch.device("cpu"), dtype)
    dec.index.summarize(kv, list(range(NB)))
    tables = [list(range(40, 20, -1)), list(range(2, 16)), [30, 5, 17, 44, 9, 26, 33, 1, 12]]
    lens = [19 * BS + 2, 13 * BS + 4, 8 * BS + 1]  # the third row reads 6 of 9 blocks
    for i in range(3):
        dec.register(f"r{i}", True)
    slices = [SeqSlice(i, 1, n, t) for i, (n, t) in enumerate(zip(lens, tables))]
    meta = AttentionMetadata.build(slices, BS, "cpu", True)
    step = dec.plan(kv, [f"r{i}" for i in range(3)], slices, meta.groups[0], True)
    q = torch.randn(3, KVH * G, dim, generator=gen).to(dtype)
    return kv, dec, step, q


def full_attention(kv, step, q, scale):
    """Every pair's full attention over its row's context, through the torch path."""
    dim = q.shape[-1]
    qp = q.view(3 * KVH, G, dim)
    pairs = torch.arange(3 * KVH)
    return step._full(qp, kv[0, 0], kv[0, 1], pairs, scale, native=False)[0]


def close(dtype):
    return {"atol": 1e-2, "rtol": 1e-2} if dtype == torch.bfloat16 else {"atol": 1e-5, "rtol": 0}


def three_ops(kv, dec, step, q, scale):
    """The layer through select_blocks, sparse_attention and compensate, and the trust check
    as decode.py computes it after them."""
    dim = q.shape[-1]
    qp = q.view(3 * KVH, G, dim)
    sel = select_blocks(
        qp.view(3, KVH, G, dim), dec.index, 0, step.layout, dec.cfg, BS, scale, fused=True
    )
    got, lse = attend_blocks(
        qp, kv[0, 0], kv[0, 1], sel.flat_ids, sel.block_lens, scale, fused=True
    )
    if step.left_out is not None:
        got = step.left_out.apply(
            got, lse, sel.log_left_comp, sel.flat_ids, dec.index.vsum, 0, fused=True
        )
    fail = (sel.log_left_out - lse).gt_(dec.cfg.logit_threshold).any(dim=-1)
    return got, fail, sel.log_left_out - lse


@pytest.mark.parametrize(
    "dim, dtype, comp, estimate",
    [
        (64, torch.bfloat16, True, "moment"),
        (64, torch.float32, True, "moment"),
        (64, torch.bfloat16, False, "moment"),
        (24, torch.float32, True, "moment"),
        (24, torch.bfloat16, False, "bound"),
    ],
)
def test_one_call_equals_the_three_ops_and_falls_back_to_full_attention(dim, dtype, comp, estimate):
    kv, dec, step, q = case(dim, dtype, comp, estimate)
    scale = dim**-0.5
    want, want_fail, logit = three_ops(kv, dec, step, q, scale)
    full = full_attention(kv, step, q, scale)
    # thresholds that fail none, some and all of the pairs
    cut = logit.amax(dim=-1).sort().values
    failed = []
    for thr in (float(cut[-1]) + 1.0, float(cut[2] + cut[3]) / 2, float(cut[0]) - 1.0):
        dec.cfg = dataclasses.replace(dec.cfg, threshold=1.0 / (1.0 + math.exp(-thr)))
        _, want_fail, _ = three_ops(kv, dec, step, q, scale)
        got, fail = step._fused(q.view(3 * KVH, G, dim), kv[0, 0], kv[0, 1], scale, 0)
        assert torch.equal(fail, want_fail)
        assert torch.equal(got[~fail], want[~fail])
        torch.testing.assert_close(got[fail], full[fail], **close(dtype))
        failed.append(int(fail.sum()))
    assert failed == [0, 3, 6]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_pairs_marked_dense_skip_the_selection_and_get_full_attention(dtype):
    kv, dec, step, q = case(64, dtype, True, "moment")
    scale = 0.125
    _, _, logit = three_ops(kv, dec, step, q, scale)
    thr = float(logit.max()) + 1.0  # every pair passes the check
    dec.cfg = dataclasses.replace(dec.cfg, threshold=1.0 / (1.0 + math.exp(-thr)))
    want, want_fail, _ = three_ops(kv, dec, step, q, scale)
    assert not bool(want_fail.any())
    full = full_attention(kv, step, q, scale)
    dense = torch.tensor([False, True] * 3)  # KV head 1 of every row
    got, fail = step._fused(q.view(3 * KVH, G, 64), kv[0, 0], kv[0, 1], scale, 0, 0, dense)
    assert not bool(fail.any())  # a dense pair is not a fallback
    assert torch.equal(got[~dense], want[~dense])
    torch.testing.assert_close(got[dense], full[dense], **close(dtype))
    assert not torch.equal(got[dense], want[dense])


def test_a_layer_through_attend_takes_the_one_call_and_falls_back_as_before(monkeypatch):
    kv, dec, step, q = case(64, torch.bfloat16, True, "moment")
    dim, scale = 64, 0.125
    _, _, logit = three_ops(kv, dec, step, q, scale)
    worst = logit.amax(dim=-1)
    dec.cfg = dataclasses.replace(dec.cfg, threshold=float(torch.sigmoid(worst.median())))
    got, fail, _ = three_ops(kv, dec, step, q, scale)
    assert 0 < int(fail.sum()) < fail.numel()
    calls = []
    real = SparseStep._fused
    monkeypatch.setattr(SparseStep, "_fused", lambda *a: calls.append(1) or real(*a))
    out = step.attend(q, kv[0, 0], kv[0, 1], None, scale, 0, lambda g: None)
    assert calls == [1]
    out = out.view(3 * KVH, G, dim)
    kept = ~fail
    assert torch.equal(out[kept], got[kept])
    assert not torch.equal(out[fail], got[fail])  # recomputed with full attention
    torch.testing.assert_close(
        out[fail], full_attention(kv, step, q, scale)[fail], **close(q.dtype)
    )


def test_a_block_id_outside_the_index_is_refused_with_a_sentence():
    kv, dec, step, q = case(64, torch.float32, False, "moment")
    step.layout.fixed_ids[0, 0, 0] = NB + 3
    with pytest.raises(RuntimeError, match=f"block id {NB + 3} is outside the index's {NB}"):
        step._fused(q.view(3 * KVH, G, 64), kv[0, 0], kv[0, 1], 0.125, 0)


def test_queries_sliced_from_the_models_projection_give_what_contiguous_ones_do():
    # the model hands attention q as a slice of its q/k projection: rows are not contiguous
    kv, dec, step, q = case(64, torch.bfloat16, True, "moment")
    wide = torch.cat([q, torch.zeros(3, KVH, 64, dtype=q.dtype)], dim=1)  # [S, H + KVH, D]
    sliced = wide[:, : KVH * G]
    assert not sliced.is_contiguous()
    want = step.attend(q, kv[0, 0], kv[0, 1], None, 0.125, 0, lambda g: None)
    got = step.attend(sliced, kv[0, 0], kv[0, 1], None, 0.125, 0, lambda g: None)
    assert torch.equal(got, want)
