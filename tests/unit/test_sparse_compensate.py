"""Left-out mass compensation on the sparse decode path: exact for uniform attention, today's
numbers when off, the same in the fused and the torch path, the same trust-check decisions either
way, and per-request running sums of the values that match a sum from scratch as blocks fill and
are rebuilt when the block table changes or the request recomputes its context."""

from __future__ import annotations

import pytest
import torch

from strata.engine.attention import AttentionMetadata, SeqSlice
from strata.engine.sparse import LayerProbe, SparseConfig, SparseDecoder
from strata.engine.sparse import native as sparse_native
from strata.engine.sparse.attend import attend_blocks, flat_ids
from strata.engine.sparse.compensate import LeftOut
from strata.engine.sparse.select import Layout, select_blocks

BS, KVH, G, DIM, NB = 16, 2, 2, 8, 48
SCALE = DIM**-0.5
# row 0 writes the 4th token of its last block; row 1's token completes its last block, whose
# index entry is stale until the next step (both are read, neither is summed)
ROWS = [("a", list(range(0, 20)), 19 * BS + 4), ("b", list(range(20, 40)), 20 * BS)]


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def config(compensate: bool = True, threshold: float = 1.0) -> SparseConfig:
    return SparseConfig(
        enabled=True,
        min_context=1,
        budget_blocks=8,
        sink_blocks=1,
        window_blocks=2,
        threshold=threshold,
        compensate=compensate,
    )


def decoder(kv: torch.Tensor, cfg: SparseConfig) -> SparseDecoder:
    """A decoder whose index summarizes every block of kv (the rows' last ones included, as
    a stale entry from the block's earlier use would be)."""
    dec = SparseDecoder(cfg, 1, KVH, NB, BS, DIM, torch.device("cpu"), torch.float32)
    dec.index.summarize(kv, list(range(NB)))
    for rid, _, _ in ROWS:
        dec.register(rid, True)
    return dec


def step(
    dec: SparseDecoder, kv: torch.Tensor, q: torch.Tensor, native: bool = False, probe: bool = True
) -> tuple[torch.Tensor, LayerProbe | None]:
    """One decode step of both rows through layer 0: the output [R, H, D] and its probe."""
    slices = [SeqSlice(i, 1, n, table) for i, (_, table, n) in enumerate(ROWS)]
    meta = AttentionMetadata.build(slices, BS, "cpu", native)
    plan = dec.plan(kv, [rid for rid, _, _ in ROWS], slices, meta.groups[0], native)
    probes: list[LayerProbe] = []
    dec.probe = probes.append if probe else None
    out = plan.attend(q, kv[0, 0], kv[0, 1], meta.groups[0], SCALE, 0, lambda g: None)
    dec.probe = None
    return out, probes[0] if probe else None


def dense(kv: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Full attention of both rows, in float64 [R, H, D]."""
    out = []
    for i, (_, table, n) in enumerate(ROWS):
        heads = []
        for h in range(KVH * G):
            keys = kv[0, 0, h // G, table].reshape(-1, DIM)[:n].double()
            vals = kv[0, 1, h // G, table].reshape(-1, DIM)[:n].double()
            heads.append(torch.softmax(keys @ q[i, h].double() * SCALE, -1) @ vals)
        out.append(torch.stack(heads))
    return torch.stack(out)


def random_case(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    kv = torch.randn(1, 2, KVH, NB, BS, DIM, generator=gen)
    return kv, torch.randn(len(ROWS), KVH * G, DIM, generator=gen)


def test_uniform_attention_is_exact_with_compensation_and_off_without():
    gen = torch.Generator().manual_seed(4)
    kv = torch.zeros(1, 2, KVH, NB, BS, DIM)
    kv[0, 0] = torch.randn(KVH, 1, 1, DIM, generator=gen)  # one key per head: uniform
    # values whose mean moves with the block, so what is left out is not what is read
    kv[0, 1] = (
        torch.randn(KVH, NB, BS, DIM, generator=gen)
        + torch.arange(NB, dtype=torch.float32)[None, :, None, None] * 0.5
    )
    q = torch.randn(len(ROWS), KVH * G, DIM, generator=gen)
    want = dense(kv, q)
    on, probe = step(decoder(kv, config()), kv, q)
    # every row leaves out 12 of its 19 full blocks, and the estimate knows it exactly
    for i, (_, _, n) in enumerate(ROWS):
        assert probe.estimate[i].flatten().tolist() == pytest.approx([12 * BS / n] * 4, abs=1e-5)
    assert torch.allclose(on.double(), want, rtol=0, atol=2e-5)
    assert torch.equal(probe.sparse, on) and torch.equal(probe.used, on)
    off, _ = step(decoder(kv, config(compensate=False)), kv, q)
    assert (off.double() - want).abs().max() > 1.0


@pytest.mark.parametrize("fused", [False, True])
def test_off_the_output_is_the_selections_attention_bit_for_bit(fused):
    if fused and sparse_native.load() is None:
        pytest.skip("the sparse CPU kernels did not build")
    kv, q = random_case(8)
    dec = decoder(kv, config(compensate=False))
    out, probe = step(dec, kv, q, native=fused)
    # today's path, from its parts: the selection, then exact attention over it, nothing more
    slices = [SeqSlice(i, 1, n, table) for i, (_, table, n) in enumerate(ROWS)]
    meta = AttentionMetadata.build(slices, BS, "cpu", fused)
    plan = dec.plan(kv, [rid for rid, _, _ in ROWS], slices, meta.groups[0], fused)
    assert plan.left_out is None
    qp = q.view(len(ROWS), KVH, G, DIM)
    sel = select_blocks(qp, dec.index, 0, plan.layout, dec.cfg, BS, SCALE, fused)
    got, _ = attend_blocks(
        qp.reshape(-1, G, DIM),
        kv[0, 0],
        kv[0, 1],
        flat_ids(sel.block_ids, KVH, NB),
        sel.block_lens,
        SCALE,
        fused,
    )
    assert torch.equal(out, got.view_as(out))
    assert torch.equal(probe.sparse, out)


def test_fused_and_torch_paths_compensate_alike():
    if sparse_native.load() is None:
        pytest.skip("the sparse CPU kernels did not build")
    kv, q = random_case(9)
    torch_out, torch_probe = step(decoder(kv, config()), kv, q, native=False)
    fused_out, fused_probe = step(decoder(kv, config()), kv, q, native=True)
    assert torch.allclose(fused_out, torch_out, rtol=0, atol=1e-5)
    # compensation moved the output, by the same amount in both paths
    off, _ = step(decoder(kv, config(compensate=False)), kv, q, native=True)
    assert (fused_out - off).abs().max() > 1e-3
    assert torch.allclose(fused_probe.estimate, torch_probe.estimate, atol=1e-5)


def test_compensation_closes_in_on_full_attention_and_leaves_fallbacks_alone():
    kv, q = random_case(10)
    want = dense(kv, q)
    _, base = step(decoder(kv, config()), kv, q)
    err = {
        c: (step(decoder(kv, config(compensate=c)), kv, q)[0].double() - want).norm()
        for c in (False, True)
    }
    assert err[True] < err[False]
    tops = sorted(base.estimate.amax(-1).flatten().tolist())
    for threshold in (0.0, (tops[0] + tops[1]) / 2, (tops[2] + tops[3]) / 2, 1.0):
        fell = {}
        for compensate in (False, True):
            out, p = step(decoder(kv, config(compensate, threshold)), kv, q)
            fell[compensate] = p.fell_back
            rows = p.fell_back.repeat_interleave(G, dim=1)  # [R, H]
            assert torch.equal(out[rows], p.dense[rows])
            assert torch.equal(out[~rows], p.sparse[~rows])
            # without the probe the fallback is computed on its own, to the same numbers
            alone, _ = step(decoder(kv, config(compensate, threshold)), kv, q, probe=False)
            assert torch.equal(alone, out)
        assert torch.equal(fell[False], fell[True]), threshold


def test_running_sums_follow_blocks_as_they_fill_and_rebuild_when_the_table_changes():
    gen = torch.Generator().manual_seed(11)
    final = torch.randn(1, 2, KVH, NB, BS, DIM, generator=gen)
    dec = SparseDecoder(config(), 1, KVH, NB, BS, DIM, torch.device("cpu"), torch.float32)
    table = list(range(5, 30))
    start = 19 * BS + 10
    # the whole pool summarized once with other values: a stale entry must never be summed
    kv = final.clone()
    kv[:, 1] += 100.0
    dec.index.summarize(kv, list(range(NB)))
    # the prompt's tokens in the cache, its full blocks summarized; later slots not yet written
    flat = kv.view(1, 2, KVH, NB * BS, DIM)
    for pos in range(start - 1):
        slot = table[pos // BS] * BS + pos % BS
        flat[:, :, :, slot] = final.view(1, 2, KVH, NB * BS, DIM)[:, :, :, slot]
    dec.index.summarize(kv, table[:19])
    dec.register("r", True)

    def plan(ctx: int, blocks: list[int], new: int = 1):
        """Plan a step, then write its tokens to the cache as the model would."""
        slices = [SeqSlice(0, new, ctx, blocks)]
        meta = AttentionMetadata.build(slices, BS, "cpu", False)
        group = meta.groups[0] if new == 1 else None
        got = dec.plan(kv, ["r"], slices, group, False)
        for pos in range(ctx - new, ctx):
            slot = blocks[pos // BS] * BS + pos % BS
            flat[:, :, :, slot] = final.view(1, 2, KVH, NB * BS, DIM)[:, :, :, slot]
        return got

    def from_scratch(blocks: list[int], ctx: int) -> torch.Tensor:
        full = blocks[: (ctx - 1) // BS]
        return final[:, 1, :, full].double().sum(dim=(2, 3))  # [L, KVH, D]

    # decode from 19 blocks and 10 tokens to 22 blocks and 3: three blocks fill on the way
    for ctx in range(start, 22 * BS + 4):
        left = plan(ctx, table).left_out
        assert torch.allclose(left.totals[0].double(), from_scratch(table, ctx), atol=1e-4)
        full = (ctx - 1) // BS
        # of the 8 blocks read, all but the one being written are full and summed
        assert left.tokens.flatten().tolist() == [(full - 7) * BS] * KVH
    assert dec.sums.rebuilds == 1
    # a block table that no longer starts with the summed blocks (a resume that got another
    # block): summed from scratch
    moved = table[:3] + [40] + table[4:]
    kv[:, :, :, 40] = final[:, :, :, 40]
    dec.index.summarize(kv, [40])
    ctx = 22 * BS + 4
    assert torch.allclose(
        plan(ctx, moved).left_out.totals[0].double(), from_scratch(moved, ctx), atol=1e-4
    )
    assert dec.sums.rebuilds == 2
    plan(ctx + 1, moved)
    assert dec.sums.rebuilds == 2
    # a prefill chunk keeps the sum: the blocks before it are summarized and unchanged
    plan(ctx + 3, moved, new=2)
    assert torch.allclose(
        plan(ctx + 4, moved).left_out.totals[0].double(), from_scratch(moved, ctx + 4), atol=1e-4
    )
    assert dec.sums.rebuilds == 2
    # a resume by recompute: a prefill chunk writes a summed block again, the next step's
    # refresh summarizes it again, and the sum is taken anew
    plan(ctx + 6, moved, new=2)
    final[:, 1, :, moved[5]] += 3.0
    kv[:, :, :, moved[5]] = final[:, :, :, moved[5]]
    dec.index.summarize(kv, [moved[5]])
    assert torch.allclose(
        plan(ctx + 7, moved).left_out.totals[0].double(), from_scratch(moved, ctx + 7), atol=1e-4
    )
    assert dec.sums.rebuilds == 3
    dec.forget("r")
    dec.register("r", True)
    plan(ctx + 8, moved)
    assert dec.sums.rebuilds == 4


def test_a_pair_with_nothing_left_out_keeps_its_output():
    # a budget covering every block (a row the decoder would keep dense): no mass to move
    cfg = SparseConfig(enabled=True, min_context=1, budget_blocks=6, sink_blocks=1, window_blocks=2)
    lay = Layout.build(
        torch.tensor([[3, 4, 5, 6, 7, 8], [9, 10, 11, 12, 13, 14]]),
        torch.tensor([6 * BS - 3, 5 * BS + 2]),
        cfg,
        BS,
    )
    totals = torch.randn(2, 1, KVH, DIM, generator=torch.Generator().manual_seed(2))
    left = LeftOut.build(lay, totals, BS)
    assert left.tokens.flatten().tolist() == [0.0] * 4
    got = torch.randn(4, G, DIM)
    vsum = torch.randn(1, KVH, NB, DIM)
    flat = flat_ids(
        torch.cat(
            [lay.fixed_ids.expand(2, KVH, -1), lay.mid_ids.view(2, 1, -1).expand(2, KVH, -1)], -1
        ).reshape(4, -1),
        KVH,
        NB,
    )
    out = left.apply(got, torch.zeros(4, G), torch.zeros(4, G), flat, vsum, 0)
    assert torch.equal(out, got)


def test_the_compensate_setting_is_a_bool_and_on_by_default():
    assert SparseConfig().compensate is True
    with pytest.raises(ValueError, match="compensate must be True or False, got 'no'"):
        SparseConfig(compensate="no")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_fused_compensate_kernel_computes_what_the_torch_path_does(dtype):
    if sparse_native.load() is None:
        pytest.skip("the sparse CPU kernels did not build")
    gen = torch.Generator().manual_seed(4)
    cfg = SparseConfig(enabled=True, min_context=1, budget_blocks=8, sink_blocks=1, window_blocks=2)
    lay = Layout.build(
        torch.tensor([list(range(0, 20)), list(range(20, 40))]),
        torch.tensor([19 * BS + 4, 20 * BS]),
        cfg,
        BS,
    )
    left = LeftOut.build(lay, torch.randn(2, 1, KVH, DIM, generator=gen), BS)
    got = torch.randn(4, G, DIM, generator=gen).to(dtype)
    lse = torch.randn(4, G, generator=gen)
    log_comp = torch.randn(4, G, generator=gen) - 1.0
    log_comp[1] = float("-inf")  # nothing left out: the output stays as it is
    vsum = torch.randn(1, KVH, NB, DIM, generator=gen)
    ids = torch.cat(
        [lay.fixed_ids.expand(2, KVH, -1), lay.mid_ids.view(2, 1, -1)[..., :5].expand(2, KVH, -1)],
        -1,
    )
    flat = flat_ids(ids.reshape(4, -1), KVH, NB)
    want = left.apply(got, lse, log_comp, flat, vsum, 0)
    out = left.apply(got, lse, log_comp, flat, vsum, 0, fused=True)
    assert out.dtype == dtype
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    assert torch.allclose(out.float(), want.float(), rtol=0, atol=tol)
    assert torch.equal(out[1], got[1]) and not torch.allclose(out[0], got[0])
