"""PrefixIndex: exact sets after reports, resets on gaps, leading blocks, the best pull source."""

from __future__ import annotations

from strata.policy.kv_index import KVSource, PrefixIndex

A, B, C, D, E = 0xA, 0xB, 0xC, 0xD, 0xFFFF_FFFF_FFFF_FFFF  # E: the largest fixed64


def index_with(**nodes: list[int]) -> PrefixIndex:
    index = PrefixIndex()
    for node_id, hashes in nodes.items():
        assert index.apply(node_id, f"{node_id}.kv:9", 1, True, hashes, []) is False
    return index


def test_reports_in_order_add_and_remove_blocks():
    index = PrefixIndex()
    assert index.apply("n1", "n1.kv:9", 7, True, [A, B], []) is False
    assert index.apply("n1", "", 8, False, [C, E], [A]) is False
    assert index.apply("n1", "", 9, False, [], [D]) is False  # never held: nothing to do
    assert index.leading_blocks("n1", [B, C, E]) == 3
    assert index.leading_blocks("n1", [A, B]) == 0
    assert index.blocks("n1") == 3
    assert index.best_source([B, C]) == KVSource("n1", "n1.kv:9", 2)  # address kept from reset


def test_a_hash_stored_and_removed_in_one_report_counts_as_gone():
    index = index_with(n1=[A])
    assert index.apply("n1", "n1.kv:9", 2, False, [B], [B]) is False
    assert index.leading_blocks("n1", [A, B]) == 1


def test_unknown_node_or_gap_asks_for_a_reset_and_changes_nothing():
    index = PrefixIndex()
    assert index.apply("n1", "n1.kv:9", 1, False, [A], []) is True  # never reset
    assert index.node_ids() == []
    assert index.apply("n1", "n1.kv:9", 1, True, [A], []) is False
    assert index.apply("n1", "n1.kv:9", 3, False, [B], [A]) is True  # report 2 was lost
    assert index.leading_blocks("n1", [A, B]) == 1  # old set kept as is
    assert index.apply("n1", "n1.kv:9", 0, False, [B], []) is True  # going backwards
    assert index.apply("n1", "n1.kv:9", 40, True, [B, C], []) is False  # reset: any number
    assert index.leading_blocks("n1", [A]) == 0
    assert index.leading_blocks("n1", [B, C]) == 2
    assert index.apply("n1", "n1.kv:9", 41, False, [D], []) is False
    assert index.leading_blocks("n1", [B, C, D]) == 3


def test_a_repeated_report_is_ignored_without_a_reset():
    index = index_with(n1=[A])
    assert index.apply("n1", "n1.kv:9", 2, False, [B], []) is False
    assert index.apply("n1", "n1.kv:9", 2, False, [C], [B]) is False  # retry of report 2
    assert index.leading_blocks("n1", [A, B, C]) == 2


def test_reset_replaces_the_set_and_frees_hashes_no_one_holds():
    index = index_with(n1=[A, B], n2=[A])
    index.apply("n1", "n1.kv:9", 5, True, [C], [])
    assert index.prefix_depths([A, B]) == {"n2": 1}
    assert index.prefix_depths([C]) == {"n1": 1}
    assert index._holders == {A: {"n2"}, C: {"n1"}}


def test_leading_blocks_stops_at_the_first_missing_hash():
    index = index_with(n1=[A, B, D])
    assert index.leading_blocks("n1", [A, B, C, D]) == 2
    assert index.leading_blocks("n1", []) == 0
    assert index.leading_blocks("nobody", [A]) == 0


def test_prefix_depths_for_every_node_holding_the_first_block():
    index = index_with(n1=[A, B, C], n2=[A, B], n3=[A, C], n4=[B, C])
    assert index.prefix_depths([A, B, C]) == {"n1": 3, "n2": 2, "n3": 1}
    assert index.prefix_depths([A, C]) == {"n1": 2, "n2": 1, "n3": 2}
    assert index.prefix_depths([D, A]) == {}
    assert index.prefix_depths([]) == {}


def test_best_source_longest_prefix_excluding_the_chosen_node_and_ties_to_lowest_id():
    index = index_with(n1=[A, B, C], n2=[A, B], n3=[A, B])
    assert index.best_source([A, B, C]) == KVSource("n1", "n1.kv:9", 3)
    assert index.best_source([A, B, C], exclude_node="n1") == KVSource("n2", "n2.kv:9", 2)
    assert index.best_source([A, B, C], exclude_node="n1", among={"n3"}) == KVSource(
        "n3", "n3.kv:9", 2
    )
    assert index.best_source([A, B], exclude_node="n1", among=set()) is None
    assert index.best_source([D]) is None


def test_a_node_without_a_store_address_is_never_a_source():
    index = PrefixIndex()
    index.apply("n1", "", 1, True, [A, B], [])
    index.apply("n2", "n2.kv:9", 1, True, [A], [])
    assert index.best_source([A, B]) == KVSource("n2", "n2.kv:9", 1)
    assert index.leading_blocks("n1", [A, B]) == 2


def test_forget_drops_the_node_and_its_hashes():
    index = index_with(n1=[A, B], n2=[B])
    index.forget("n1")
    index.forget("never-seen")
    assert index.node_ids() == ["n2"]
    assert index._holders == {B: {"n2"}}
    assert index.best_source([A, B]) is None
    assert index.apply("n1", "n1.kv:9", 2, False, [C], []) is True  # must reset again
