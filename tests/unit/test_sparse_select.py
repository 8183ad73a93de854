"""Sparse decode, pure parts: the index entries, block bounds and mass estimates, selection of
sinks, window and best blocks within a budget, exact attention over the selection and the
estimate of the attention mass left out."""

from __future__ import annotations

import math

import pytest
import torch

from strata.engine.sparse.attend import attend_blocks, attend_full, flat_ids
from strata.engine.sparse.config import SparseConfig, parse_budget
from strata.engine.sparse.index import BlockIndex
from strata.engine.sparse.select import (
    Layout,
    full_entries,
    left_out_mass,
    query_rows,
    score_blocks,
    select_blocks,
    split_scores,
)


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def indexed(
    keys: torch.Tensor, compensation: bool = True, dtype: torch.dtype = torch.float32
) -> tuple[torch.Tensor, BlockIndex]:
    """keys [L, KVH, NB, BS, D] -> (cache kv with random values, an index of every block),
    both in `dtype`."""
    layers, kv_heads, nb, _, dim = keys.shape
    values = torch.randn(keys.shape, generator=torch.Generator().manual_seed(7))
    kv = torch.stack([keys, values], dim=1).to(dtype).contiguous()
    index = BlockIndex(layers, kv_heads, nb, dim, "cpu", dtype, compensation)
    index.summarize(kv, list(range(nb)))
    return kv, index


def layout(tables: list[list[int]], lens: list[int], cfg: SparseConfig, bs: int) -> Layout:
    width = max(len(t) for t in tables)
    padded = torch.tensor([t + [0] * (width - len(t)) for t in tables])
    return Layout.build(padded, torch.tensor(lens), cfg, bs)


def test_index_entries_are_the_box_and_spread_of_each_blocks_keys():
    keys = torch.randn(2, 3, 5, 4, 8, generator=torch.Generator().manual_seed(1))
    _, index = indexed(keys)
    assert torch.equal(index.kmax, keys.amax(dim=3))
    assert torch.equal(index.kmin, keys.amin(dim=3))
    # the spread is computed from the box where it is used, not stored
    assert torch.allclose(index.spread, ((keys.amax(3) - keys.amin(3)) / 3) ** 2)
    # compensation's row: the keys' exact (population) variance per dimension
    assert torch.allclose(index.var, keys.var(dim=3, correction=0), atol=1e-6)
    # the entries (3 D in the cache's dtype: kmax, kmin, var) and the value sums (D in float32)
    assert index.entries.shape == (2, 3, 5, 3, 8)
    assert index.nbytes() == 2 * 3 * 5 * (3 * 8 * 4 + 8 * 4)
    # without compensation there are no var row and no value sums: 2 D a block
    bare = BlockIndex(2, 3, 5, 8, "cpu", torch.float32, compensation=False)
    bare.summarize(torch.randn(2, 2, 3, 5, 4, 8), [0, 3])
    assert bare.vsum is None and bare.var is None and not bare.compensation
    assert bare.nbytes() == 2 * 3 * 5 * 2 * 8 * 4


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_index_value_sums_are_each_blocks_values_summed_in_float32(dtype):
    kv = torch.randn(2, 2, 3, 6, 4, 8, generator=torch.Generator().manual_seed(3)).to(dtype)
    index = BlockIndex(2, 3, 6, 8, "cpu", dtype)
    index.summarize(kv, [4, 1, 2])
    assert index.vsum.dtype == torch.float32
    for layer in range(2):
        for head in range(3):
            for block in range(6):
                want = (
                    kv[layer, 1, head, block].double().sum(0)
                    if block in (1, 2, 4)
                    else torch.zeros(8, dtype=torch.float64)
                )
                assert torch.allclose(
                    index.vsum[layer, head, block].double(), want, rtol=0, atol=1e-5
                ), (layer, head, block)
    # a block handed out again and refilled is summed anew
    kv[:, 1, :, 2] = 1.0
    index.mark([2])
    index.refresh(kv)
    assert torch.equal(index.vsum[:, :, 2], torch.full((2, 3, 8), 4.0))
    if dtype == torch.bfloat16:
        assert index.nbytes() == 2 * 3 * 6 * (3 * 8 * 2 + 8 * 4)


def test_marked_blocks_are_summarized_once_at_refresh():
    keys = torch.zeros(1, 1, 4, 2, 2)
    kv, index = indexed(keys)
    kv[0, 0, 0, 2] = torch.tensor([[1.0, -2.0], [3.0, 0.5]])
    index.mark([2])
    index.mark_one(2, 0xABC)
    assert index.refresh(kv) == 1
    assert index.kmax[0, 0, 2].tolist() == [3.0, 0.5]
    assert index.kmin[0, 0, 2].tolist() == [1.0, -2.0]
    assert index.refresh(kv) == 0
    assert index.summarized == 4 + 1
    # how many times each block was summarized (a sum over blocks checks it: RunningSums)
    assert index.generation.tolist() == [1, 1, 2, 1]
    index.summarize(kv, [0, 0, 3])
    assert index.generation.tolist() == [3, 1, 2, 2]


def test_the_bound_is_never_below_a_score_and_exact_for_a_block_of_equal_keys():
    gen = torch.Generator().manual_seed(3)
    keys = torch.randn(1, 2, 40, 8, 16, generator=gen) * 2.0
    keys[0, :, 5] = keys[0, :, 5, :1]  # block 5: eight copies of one key
    _, index = indexed(keys)
    q = torch.randn(2, 3, 16, generator=gen) * 1.5  # [KVH, G, D]
    scale = 16**-0.5
    bounds, log_mass, _ = score_blocks(q, index.entries[0].flatten(-2), scale, 8, "bound")
    true_max = torch.einsum("hgd,hbjd->hgbj", q.double(), keys[0].double()).amax(-1) * scale
    assert (bounds.double() >= true_max - 1e-5).all()
    assert torch.allclose(bounds[:, :, 5].double(), true_max[:, :, 5], atol=1e-5)
    assert torch.allclose(log_mass, bounds + math.log(8))


def test_the_moment_estimate_is_exact_for_equal_keys_and_capped_by_the_bound():
    gen = torch.Generator().manual_seed(4)
    keys = torch.randn(1, 1, 6, 4, 8, generator=gen)
    keys[0, 0, 2] = keys[0, 0, 2, :1]
    _, index = indexed(keys)
    q = torch.randn(1, 2, 8, generator=gen)
    bounds, log_mass, comp = score_blocks(q, index.entries[0].flatten(-2), 0.5, 4, "moment")
    exact = math.log(4) + 0.5 * (q[0] @ keys[0, 0, 2, 0])
    assert torch.allclose(log_mass[0, :, 2], exact, atol=1e-5)
    assert torch.allclose(comp[0, :, 2], exact, atol=1e-5)
    assert (log_mass <= bounds + math.log(4) + 1e-6).all()
    assert (comp <= bounds + math.log(4) + 1e-6).all()


def test_compensations_estimate_is_the_log_normal_mean_from_the_exact_variance():
    gen = torch.Generator().manual_seed(5)
    keys = torch.randn(1, 1, 6, 16, 8, generator=gen) * 0.3
    _, index = indexed(keys)
    q = torch.randn(1, 2, 8, generator=gen)
    scale = 0.5
    bounds, trust, comp = score_blocks(q, index.entries[0].flatten(-2), scale, 16, "moment")
    qs = q[0] * scale  # [G, D]
    center = (keys.amax(3) + keys.amin(3))[0, 0] / 2  # [NB, D]
    var = keys.var(dim=3, correction=0)[0, 0]
    want = torch.minimum(qs @ center.T + 0.5 * (qs * qs) @ var.T, bounds[0]) + math.log(16)
    assert torch.allclose(comp[0], want, atol=1e-5)
    # where every dimension's range-based spread exceeds its variance, the trust check's
    # estimate is the larger (it leans high on purpose)
    wide = (index.spread[0, 0] >= index.var[0, 0]).all(dim=-1)  # [NB]
    assert wide.any() and (trust[0][:, wide] >= comp[0][:, wide] - 1e-6).all()
    # an index without the var row has no compensation estimate
    bare = BlockIndex(1, 1, 6, 8, "cpu", torch.float32, compensation=False)
    bare.summarize(torch.stack([keys, keys], dim=1), list(range(6)))
    assert score_blocks(q, bare.entries[0].flatten(-2), scale, 16, "moment")[2] is None


def test_selection_keeps_sinks_and_window_and_takes_each_kv_heads_best_blocks():
    # 12 blocks of 4 keys, the last one holding 2; block at position p is physical block 11 - p
    bs, dim = 4, 4
    keys = torch.zeros(1, 2, 12, bs, dim)
    table = list(range(11, -1, -1))
    for head, dims_values in ((0, {3: 5.0, 7: 4.0, 5: 3.0}), (1, {2: 6.0, 9: 2.0, 8: 1.0})):
        for pos, v in dims_values.items():
            keys[0, head, table[pos], 0, head] = v
    kv, index = indexed(keys)
    cfg = SparseConfig(
        enabled=True,
        min_context=1,
        budget_blocks=5,
        sink_blocks=1,
        window_blocks=2,
        estimate="bound",
    )
    lay = layout([table], [11 * bs + 2], cfg, bs)
    q = torch.zeros(1, 2, 1, dim)
    q[0, 0, 0, 0] = 1.0
    q[0, 1, 0, 1] = 1.0
    sel = select_blocks(q, index, 0, lay, cfg, bs, scale=0.5)
    # sinks (position 0), window (10, 11), then the two best middle blocks of each head
    assert sel.block_ids.tolist() == [[11, 1, 0, 8, 4], [11, 1, 0, 9, 2]]
    assert sel.block_lens.tolist() == [[4, 4, 2, 4, 4]] * 2
    # left out of head 0: middle positions 1 2 4 5 6 8 9, only position 5 (3.0) scoring above 0
    head0 = math.log(bs * (math.exp(1.5) + 6))
    head1 = math.log(bs * (math.exp(0.5) + 6))
    assert sel.log_left_out.flatten().tolist() == pytest.approx([head0, head1], abs=1e-6)


def test_query_heads_of_a_group_rank_blocks_relative_to_their_own_best():
    bs, dim = 2, 2
    keys = torch.zeros(1, 1, 10, bs, dim)
    keys[0, 0, 2, 0, 0] = 1.0  # query head 0's best block
    keys[0, 0, 3, 0, 0] = 0.9  # its second best: raw score far above head 1's best
    keys[0, 0, 5, 0, 1] = 1.0  # query head 1's best
    kv, index = indexed(keys)
    cfg = SparseConfig(enabled=True, min_context=1, budget_blocks=5, sink_blocks=1, window_blocks=2)
    lay = layout([list(range(10))], [20], cfg, bs)
    q = torch.tensor([[[[10.0, 0.0], [0.0, 1.0]]]])  # [R=1, KVH=1, G=2, D]
    sel = select_blocks(q, index, 0, lay, cfg, bs, scale=0.5)
    assert sorted(sel.block_ids[0, 3:].tolist()) == [2, 5]


def test_rows_of_different_lengths_read_their_own_budget():
    bs = 4
    cfg = SparseConfig(
        enabled=True, min_context=1, budget_fraction=0.5, sink_blocks=1, window_blocks=1
    )
    lay = layout([list(range(8)), list(range(8, 20))], [30, 47], cfg, bs)
    assert (lay.nblocks, lay.budgets, lay.picks) == ([8, 12], [4, 6], 4)
    assert lay.chosen.tolist() == [[[True, True, False, False], [True, True, True, True]]]
    assert lay.fixed_ids.tolist() == [[[0, 7]], [[8, 19]]]
    assert lay.block_lens.tolist() == [[[4, 2, 4, 4, 0, 0]], [[4, 3, 4, 4, 4, 4]]]


def test_attention_over_the_selection_is_exact_and_the_bound_covers_the_mass_left_out():
    gen = torch.Generator().manual_seed(11)
    bs, dim, kv_heads, g = 8, 16, 2, 3
    keys = torch.randn(1, kv_heads, 40, bs, dim, generator=gen) * 1.5
    kv, index = indexed(keys)
    cfg = SparseConfig(
        enabled=True,
        min_context=1,
        budget_fraction=0.3,
        sink_blocks=1,
        window_blocks=2,
        estimate="bound",
    )
    tables = [list(range(0, 17)), list(range(17, 40))]
    lens = [16 * bs + 3, 23 * bs]
    lay = layout(tables, lens, cfg, bs)
    q = torch.randn(2, kv_heads, g, dim, generator=gen)
    scale = dim**-0.5
    sel = select_blocks(q, index, 0, lay, cfg, bs, scale)
    qp = q.reshape(2 * kv_heads, g, dim)
    out, lse = attend_blocks(
        qp, kv[0, 0], kv[0, 1], flat_ids(sel.block_ids, kv_heads, 40), sel.block_lens, scale
    )
    estimate = left_out_mass(sel.log_left_out, lse)
    for p in range(2 * kv_heads):
        row, head = divmod(p, kv_heads)
        table, n = tables[row], lens[row]
        k_all = keys[0, head, table].reshape(-1, dim)[:n].double()
        v_all = kv[0, 1, head, table].reshape(-1, dim)[:n].double()
        scores = qp[p].double() @ k_all.T * scale  # [G, n]
        read = torch.zeros(n, dtype=torch.bool)
        for block, length in zip(sel.block_ids[p].tolist(), sel.block_lens[p].tolist()):
            start = table.index(block) * bs
            read[start : start + length] = True
        want_lse = torch.logsumexp(scores[:, read], -1)
        want_out = torch.softmax(scores[:, read], -1) @ v_all[read]
        true_left = 1 - torch.exp(want_lse - torch.logsumexp(scores, -1))
        assert int(read.sum()) == (lay.budgets[row] - 1) * bs + (n - (lay.nblocks[row] - 1) * bs)
        assert torch.allclose(lse[p].double(), want_lse, atol=1e-5)
        assert torch.allclose(out[p].double(), want_out, atol=1e-5)
        assert (estimate[p].double() >= true_left - 1e-6).all()
        assert (true_left > 0.05).all()  # the case is not trivial: mass is left out


def test_scoring_the_whole_pool_selects_what_a_gather_of_the_rows_blocks_selects():
    gen = torch.Generator().manual_seed(12)
    bs, dim = 4, 8
    keys = torch.randn(2, 2, 30, bs, dim, generator=gen)
    _, index = indexed(keys)
    tables = [list(range(29, 9, -1)), list(range(0, 10))]
    q = torch.randn(2, 2, 2, dim, generator=gen)
    for estimate in ("moment", "bound"):
        cfg = SparseConfig(
            enabled=True,
            min_context=1,
            budget_fraction=0.4,
            sink_blocks=1,
            window_blocks=1,
            estimate=estimate,
        )
        width = max(len(t) for t in tables)
        padded = torch.tensor([t + [0] * (width - len(t)) for t in tables])
        gather = Layout.build(padded, torch.tensor([79, 37]), cfg, bs)
        pool = Layout.build(padded, torch.tensor([79, 37]), cfg, bs, pool_blocks=30)
        assert (gather.score_all, pool.score_all) == (False, True)
        a = select_blocks(q, index, 1, gather, cfg, bs, 0.35)
        b = select_blocks(q, index, 1, pool, cfg, bs, 0.35)
        assert torch.equal(a.block_ids, b.block_ids) and torch.equal(a.block_lens, b.block_lens)
        assert torch.allclose(a.log_left_out, b.log_left_out, atol=1e-5)


def test_full_attention_of_pairs_matches_the_kernel_and_the_torch_path():
    from strata.engine import kernels

    gen = torch.Generator().manual_seed(5)
    kv_heads, nb, bs, dim = 2, 9, 4, 8
    kc = torch.randn(kv_heads, nb, bs, dim, generator=gen)
    vc = torch.randn(kv_heads, nb, bs, dim, generator=gen)
    q = torch.randn(kv_heads, 2, dim, generator=gen)  # one row, 2 pairs
    flat = flat_ids(torch.tensor([[3, 1, 7]] * kv_heads), kv_heads, nb)
    lens = torch.tensor([10, 10])
    out, lse = attend_full(q, kc, vc, flat, lens, 0.3, native=False)
    for h in range(kv_heads):
        k = kc[h, [3, 1, 7]].reshape(-1, dim)[:10]
        v = vc[h, [3, 1, 7]].reshape(-1, dim)[:10]
        s = q[h] @ k.T * 0.3
        assert torch.allclose(out[h], torch.softmax(s, -1) @ v, atol=1e-6)
        assert torch.allclose(lse[h], torch.logsumexp(s, -1), atol=1e-6)
    if kernels.load() is not None:
        native, none = attend_full(q, kc, vc, flat, lens, 0.3, native=True)
        assert none is None and torch.allclose(native, out, atol=1e-5)


@pytest.mark.parametrize(
    "dim, estimate, comp, dtype",
    [
        (64, "moment", True, torch.float32),
        (64, "moment", False, torch.float32),
        (24, "moment", True, torch.float32),
        (64, "bound", True, torch.float32),
        (24, "bound", False, torch.float32),
        # a bfloat16 index: the kernel widens its entries (AVX-512 or not) as torch's .float() does
        (64, "moment", True, torch.bfloat16),
        (24, "moment", True, torch.bfloat16),
    ],
)
def test_the_fused_cpu_kernels_compute_what_the_torch_path_does(dim, estimate, comp, dtype):
    from strata.engine.sparse import native

    if native.load() is None:
        pytest.skip("the sparse CPU kernels did not build")
    gen = torch.Generator().manual_seed(13)
    bs, kv_heads, g = 4, 2, 3
    keys = torch.randn(1, kv_heads, 30, bs, dim, generator=gen)
    kv, index = indexed(keys, compensation=comp, dtype=dtype)
    kv = kv.float()  # attention below is compared in float32 whatever the index's dtype
    cfg = SparseConfig(
        enabled=True,
        min_context=1,
        budget_fraction=0.4,
        sink_blocks=1,
        window_blocks=1,
        estimate=estimate,
        compensate=comp,
    )
    # the third row has fewer middle blocks (3) than the longest row's picks (6): padding
    tables = [list(range(29, 9, -1)), list(range(0, 10)), [12, 4, 22, 8, 17]]
    lay = layout(tables, [79, 37, 18], cfg, bs)
    q = torch.randn(3, kv_heads, g, dim, generator=gen)
    a = select_blocks(q, index, 0, lay, cfg, bs, 0.35)
    b = select_blocks(q, index, 0, lay, cfg, bs, 0.35, fused=True)
    assert torch.equal(a.block_lens, b.block_lens)
    for sel in (a, b):  # block b of KV head h is flat block h * NB + b in both paths
        assert torch.equal(sel.flat_ids, flat_ids(sel.block_ids, kv_heads, 30))
    # Both read a best-ranked set of middle blocks of the row's size. Each query head's best
    # block ranks exactly 0, so blocks can tie; the kernel breaks ties by position, torch's
    # topk as it may: where the ranks at the cut differ the two sets are the same.
    rows = query_rows(q.transpose(0, 1), 0.35, estimate, comp)
    e = index.entries.shape[3] * dim
    entries = full_entries(
        index.entries[0].index_select(1, lay.mid_ids).view(kv_heads, 3, -1, e), dim
    )
    bounds = split_scores(rows @ entries.transpose(-1, -2), g, bs, estimate, comp)[0]
    rank = bounds + (lay.mid_mask if lay.mid_mask is not None else 0)
    rank = (rank - rank.amax(-1, keepdim=True)).amax(dim=2)  # [KVH, R, M]
    fixed = lay.fixed_ids.shape[-1]
    for sel in (a, b):
        for p, (ids, lens) in enumerate(zip(sel.block_ids.tolist(), sel.block_lens.tolist())):
            row, head = divmod(p, kv_heads)
            mids = lay.mid_ids.view(3, -1)[row].tolist()[: int(lay.mid_counts[row])]
            chosen = {i for i, n in zip(ids[fixed:], lens[fixed:]) if n}
            assert len(chosen) == int(lay.takes[row])
            inside = [rank[head, row, j] for j, i in enumerate(mids) if i in chosen]
            outside = [rank[head, row, j] for j, i in enumerate(mids) if i not in chosen]
            assert min(inside) >= max(outside, default=float("-inf"))

    def read(sel):
        return [
            sorted(i for i, n in zip(ids.tolist(), lens.tolist()) if n)
            for ids, lens in zip(sel.block_ids, sel.block_lens)
        ]

    same = [p for p, (x, y) in enumerate(zip(read(a), read(b))) if x == y]
    assert len(same) >= 5  # a tie at the cut changes at most one pair here
    assert torch.allclose(a.log_left_out[same], b.log_left_out[same], atol=1e-4)
    if comp:
        assert torch.allclose(a.log_left_comp[same], b.log_left_comp[same], atol=1e-4)
        # compensation's estimate differs from the trust check's where it is computed at all
        assert not torch.allclose(a.log_left_comp, a.log_left_out, atol=1e-3)
    else:
        assert a.log_left_comp is None and b.log_left_comp is None
    qp = q.reshape(3 * kv_heads, g, dim)
    flat = flat_ids(a.block_ids, kv_heads, 30)
    want, want_lse = attend_blocks(qp, kv[0, 0], kv[0, 1], flat, a.block_lens, 0.35)
    got, got_lse = attend_blocks(qp, kv[0, 0], kv[0, 1], flat, a.block_lens, 0.35, fused=True)
    assert (a.block_lens == 0).any()  # padding entries are skipped, not read
    assert torch.allclose(got, want, atol=1e-5) and torch.allclose(got_lse, want_lse, atol=1e-5)


def test_config_is_validated_and_budgets_parse():
    with pytest.raises(
        ValueError,
        match=r"budget_blocks \(5\) must exceed sink_blocks \+ "
        r"window_blocks \(5\)",
    ):
        SparseConfig(budget_blocks=5, sink_blocks=1, window_blocks=4)
    with pytest.raises(ValueError, match=r"budget_fraction must be in \(0, 1\], got 1.5"):
        SparseConfig(budget_fraction=1.5)
    with pytest.raises(ValueError, match="estimate must be one of moment, bound, got 'exact'"):
        SparseConfig(estimate="exact")
    with pytest.raises(
        ValueError,
        match=r"threshold must be a fraction of attention mass in "
        r"\[0, 1\], got -0.1",
    ):
        SparseConfig(threshold=-0.1)
    assert parse_budget("256") == (256, 0.125)
    assert parse_budget("0.25") == (0, 0.25)
    assert parse_budget("12.5%") == (0, 0.125)
    with pytest.raises(
        ValueError,
        match=r"a sparse budget is a block count \(256\) or a "
        r"fraction of the context \(0.125 or 12.5%\), got 'x'",
    ):
        parse_budget("x")
    cfg = SparseConfig(min_context=100, budget_fraction=0.25, sink_blocks=1, window_blocks=2)
    assert [cfg.budget_for(n) for n in (4, 10, 40)] == [4, 4, 10]
    # below min_context, or a budget that covers every block: dense
    assert (cfg.applies(99, 16), cfg.applies(100, 16), cfg.applies(100, 32)) == (False, True, False)


@pytest.mark.parametrize("threshold", [0.0, 0.1, 0.5, 0.97, 1.0])
def test_the_trust_check_in_logs_decides_as_the_mass_estimate_does(threshold):
    cfg = SparseConfig(threshold=threshold)
    x = torch.cat(
        [
            torch.linspace(-12, 12, 2001, dtype=torch.float64),
            torch.tensor([float("-inf")], dtype=torch.float64),
        ]
    )
    in_logs = x > cfg.logit_threshold
    in_mass = torch.sigmoid(x) > threshold
    # the two may differ only where the estimate sits on the threshold within rounding
    differ = in_logs != in_mass
    assert not differ.any() or (torch.sigmoid(x[differ]) - threshold).abs().max() < 1e-12
