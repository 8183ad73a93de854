"""Which prefill chunks of a step share one attention call (strata.core.prefill_groups), and the
step shape that prices them the same way (strata.core.profile.step_shape)."""

from hypothesis import given
from hypothesis import strategies as st

from strata.core.prefill_groups import (
    GROUP_OVERHEAD_KEYS,
    padded_keys,
    prefill_groups,
    rectangle,
)
from strata.core.profile import step_shape

BLOCK = 16
chunk = st.tuples(st.integers(2, 2048), st.integers(0, 4096)).map(lambda c: (c[0], c[0] + c[1]))


@given(st.lists(chunk, max_size=24))
def test_every_chunk_is_in_exactly_one_group(chunks):
    groups = prefill_groups(chunks, BLOCK)
    flat = sorted(i for g in groups for i in g)
    assert flat == list(range(len(chunks)))
    assert all(groups)  # no empty group
    assert prefill_groups(chunks, BLOCK) == groups  # the same for the same input


@given(st.lists(chunk, min_size=1, max_size=24))
def test_grouping_never_costs_more_than_one_padded_rectangle(chunks):
    """Each split saves more than a group's overhead, so the groups, overheads included, cost
    at most the single rectangle every chunk used to be padded into."""
    keys, groups = padded_keys(chunks, BLOCK)
    assert keys + (groups - 1) * GROUP_OVERHEAD_KEYS <= rectangle(chunks, BLOCK)


def test_a_short_chunk_is_not_padded_to_a_long_ones_square():
    chunks = [(32, 32), (512, 512), (64, 64), (128, 128)]
    groups = prefill_groups(chunks, BLOCK)
    assert groups[0] == [1]  # the widest first, alone
    keys, n = padded_keys(chunks, BLOCK)
    assert n == len(groups) > 1
    assert keys < rectangle(chunks, BLOCK) / 2


def test_small_chunks_of_a_size_share_one_call():
    chunks = [(16, 16), (12, 16), (16, 32), (9, 9)]
    assert prefill_groups(chunks, BLOCK) == [[2, 0, 1, 3]]
    assert padded_keys(chunks, BLOCK) == (float(rectangle(chunks, BLOCK)), 1)


def test_step_shape_prices_the_groups_the_engine_runs():
    items = [(512, True, 512), (1, True, 90), (32, True, 32), (48, False, 200)]
    shape = step_shape(items, BLOCK)
    chunks = [(512, 512), (32, 32), (48, 200)]
    keys, groups = padded_keys(chunks, BLOCK)
    assert (shape.prefill_keys, shape.groups) == (keys, groups)
    assert groups == len(prefill_groups(chunks, BLOCK)) > 1
    assert shape.decode_keys == 90.0 and shape.tokens == 593 and shape.sampled == 3
    # one chunk alone: the rectangle it always was
    alone = step_shape([(40, True, 100)], BLOCK)
    assert (alone.prefill_keys, alone.groups) == (40.0 * 112, 1)
