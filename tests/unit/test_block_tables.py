"""Block tables kept across steps (strata.engine.block_tables) and the groups built from them."""

import torch

from strata.engine.attention import AttentionMetadata, SeqSlice
from strata.engine.block_tables import BlockTables


def test_a_growing_table_is_appended_to_and_earlier_views_stay_true():
    tables = BlockTables("cpu")
    ids = [7, 3, 9]
    views = []
    for new in ([], [4], [], list(range(20, 60))):  # the last one outgrows the room
        ids.extend(new)
        (view,) = tables.step([ids])
        assert view.tolist() == ids
        views.append((view, list(ids)))
    assert tables.built == 1
    for view, then in views:
        assert view.tolist() == then


def test_changed_leading_ids_or_a_new_list_build_a_new_tensor():
    tables = BlockTables("cpu")
    ids = [1, 2, 3]
    (first,) = tables.step([ids])
    ids[1] = 8  # a resume that got another block
    (second,) = tables.step([ids])
    assert second.tolist() == [1, 8, 3] and first.tolist() == [1, 2, 3]
    assert tables.built == 2
    shorter = ids[:2]
    (third,) = tables.step([shorter])
    assert third.tolist() == [1, 8] and tables.built == 3


def test_rows_of_sequences_a_step_leaves_out_are_dropped():
    tables = BlockTables("cpu")
    a, b = [1, 2], [3, 4]
    tables.step([a, b])
    tables.step([b])
    tables.step([a, b])
    assert tables.built == 3  # a was dropped and made again; b was kept


def test_groups_from_kept_tables_equal_groups_from_lists():
    a, b, c = [5, 6, 7], [1], [9, 10]
    slices = [SeqSlice(0, 1, 40, a), SeqSlice(1, 1, 9, b), SeqSlice(2, 6, 30, c)]
    tables = BlockTables("cpu")
    for step in range(3):
        kept = AttentionMetadata.build(slices, 16, "cpu", tables=tables)
        plain = AttentionMetadata.build(slices, 16, "cpu")
        for g, h in zip(kept.groups, plain.groups, strict=True):
            assert torch.equal(g.block_tables, h.block_tables)
            assert torch.equal(g.context_lens, h.context_lens)
        a.append(20 + step)
        slices[0] = SeqSlice(0, 1, 41 + step, a)
    assert tables.built == 3  # one per sequence, then only appends
