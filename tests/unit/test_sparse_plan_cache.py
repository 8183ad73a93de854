"""A step's sparse layout kept for the steps after it (strata.engine.sparse.decode._Prepared):
equal, step by step, to the layout built from scratch, and built again whenever a row begins a
block, steps back, changes blocks or the configuration changes."""

from __future__ import annotations

import torch

from strata.engine.attention import AttentionMetadata, SeqSlice
from strata.engine.sparse import SparseConfig, SparseDecoder
from strata.engine.sparse.compensate import LeftOut
from strata.engine.sparse.select import Layout

BS, KVH, NB, DIM = 16, 2, 64, 8


def config(budget: int = 8) -> SparseConfig:
    return SparseConfig(
        enabled=True, min_context=1, budget_blocks=budget, sink_blocks=1, window_blocks=2
    )


def setup():
    kv = torch.randn(1, 2, KVH, NB, BS, DIM, generator=torch.Generator().manual_seed(5))
    dec = SparseDecoder(config(), 1, KVH, NB, BS, DIM, torch.device("cpu"), torch.float32)
    dec.index.summarize(kv, list(range(NB)))
    dec.register("a", True)
    dec.register("b", True)
    dec.register("off", False)
    return kv, dec


def plan(kv, dec, rows: list[tuple[str, int, list[int]]]):
    slices = [SeqSlice(i, 1, ctx, blocks) for i, (_, ctx, blocks) in enumerate(rows)]
    meta = AttentionMetadata.build(slices, BS, "cpu")
    return dec.plan(kv, [rid for rid, _, _ in rows], slices, meta.groups[0], False), meta


def assert_fresh(dec, step, group, sparse_rows: list[int]):
    pick = torch.tensor(sparse_rows)
    want = Layout.build(
        group.block_tables.index_select(0, pick),
        group.context_lens.index_select(0, pick),
        dec.cfg,
        BS,
        pool_blocks=NB,
    )
    got = step.layout
    for name in (
        "context_lens",
        "mid_ids",
        "mid_counts",
        "takes",
        "chosen",
        "fixed_ids",
        "block_lens",
        "mid_valid",
    ):
        assert torch.equal(getattr(got, name), getattr(want, name)), name
    assert (got.nblocks, got.budgets, got.picks) == (want.nblocks, want.budgets, want.picks)
    assert torch.equal(got.pair_lens(KVH), want.pair_lens(KVH))
    left = LeftOut.build(want, step.left_out.totals, BS)
    for name in ("per_token", "weights", "tokens"):
        assert torch.equal(getattr(step.left_out, name), getattr(left, name)), name


def test_kept_layouts_equal_fresh_ones_across_block_boundaries():
    kv, dec = setup()
    a, b, other = list(range(2, 26)), list(range(30, 50)), list(range(56, 62))
    for t in range(40):  # a from 19 blocks + 10 tokens, b from 15 + 3: both cross blocks
        rows = [("a", 19 * BS + 10 + t, a), ("off", 17 + t, other), ("b", 15 * BS + 3 + t, b)]
        step, meta = plan(kv, dec, rows)
        assert_fresh(dec, step, meta.groups[0], [0, 2])
        assert step.request_ids == ["a", "b"]
        step.layout.pair_lens(KVH)  # as a layer would: the next step must renew it
    # a: blocks begin at steps 6, 22 and 38; b: 13 and 29; plus the first step
    assert dec.layouts == 6


def test_a_step_back_new_blocks_or_a_new_config_lay_out_again():
    kv, dec = setup()
    blocks = list(range(2, 26))
    plan(kv, dec, [("a", 19 * BS + 2, blocks)])
    plan(kv, dec, [("a", 19 * BS + 3, blocks)])
    assert dec.layouts == 1
    plan(kv, dec, [("a", 19 * BS + 3, blocks)])  # the same position again
    assert dec.layouts == 2
    moved = blocks[:4] + [40] + blocks[5:]
    step, meta = plan(kv, dec, [("a", 19 * BS + 4, moved)])
    assert dec.layouts == 3
    assert_fresh(dec, step, meta.groups[0], [0])
    dec.cfg = config(budget=10)
    step, meta = plan(kv, dec, [("a", 19 * BS + 5, moved)])
    assert dec.layouts == 4 and step.layout.budgets == [10]
    dec.forget("a")
    dec.register("a", True)
    plan(kv, dec, [("a", 19 * BS + 6, moved)])
    assert dec.layouts == 5
