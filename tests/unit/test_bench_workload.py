"""Engine benchmark workload: trace length scaling, Poisson arrivals, prompts as byte tokens."""

import random

import pytest

from benchmarks.engine.workload import (
    LengthMapping,
    PromptSet,
    offline_prompts,
    pick_lengths,
    poisson_offsets,
    prompt_text,
)
from strata.engine.byte_tokenizer import ByteTokenizer
from strata.eval.trace_lengths import RequestLengths


def test_default_mapping_is_ceil_of_quarter_clipped():
    m = LengthMapping()
    assert m.apply(RequestLengths(374, 44)) == RequestLengths(94, 11)
    assert m.apply(RequestLengths(4, 5)) == RequestLengths(1, 2)
    assert m.apply(RequestLengths(0, 0)) == RequestLengths(1, 1)  # never an empty request
    assert m.apply(RequestLengths(4096, 1024)) == RequestLengths(1024, 256)
    assert m.apply(RequestLengths(14050, 1000)) == RequestLengths(1024, 250)


def test_custom_mapping_and_description():
    m = LengthMapping(divisor=1, max_prompt=100, max_output=8)
    assert m.apply(RequestLengths(99, 7)) == RequestLengths(99, 7)
    assert m.apply(RequestLengths(101, 9)) == RequestLengths(100, 8)
    assert m.describe() == (
        "prompt = clip(ceil(ContextTokens / 1), 1, 100), "
        "output = clip(ceil(GeneratedTokens / 1), 1, 8)"
    )


def test_mapping_rejects_a_zero_divisor():
    with pytest.raises(ValueError, match="divisor must be at least 1, got 0"):
        LengthMapping(divisor=0)


def test_poisson_offsets_stop_at_the_count():
    offsets = poisson_offsets(8.0, 60, 1000.0, random.Random(1))
    assert len(offsets) == 60
    assert offsets == sorted(offsets) and offsets[0] > 0


def test_poisson_offsets_stop_at_the_time_limit():
    offsets = poisson_offsets(1.0, 10_000, 40.0, random.Random(2))
    # with this seed the 35th arrival would land past 40 s
    assert len(offsets) == 34 and round(offsets[-1], 3) == 39.548
    assert offsets == poisson_offsets(1.0, 10_000, 40.0, random.Random(2))


def test_poisson_mean_gap_is_one_over_rate():
    offsets = poisson_offsets(4.0, 4000, 1e9, random.Random(3))
    assert abs(offsets[-1] / len(offsets) - 0.25) < 0.01


def test_poisson_rejects_a_non_positive_rate():
    with pytest.raises(ValueError, match="rate must be positive, got 0"):
        poisson_offsets(0.0, 1, 1.0, random.Random(0))


def test_offline_prompts_are_seeded_byte_tokens():
    a, b = offline_prompts(3, 5, seed=7), offline_prompts(3, 5, seed=7)
    assert a == b and a != offline_prompts(3, 5, seed=8)
    assert [len(p) for p in a] == [5, 5, 5]
    tok = ByteTokenizer(32000)
    for ids in a:  # each id is one lowercase letter: the same prompt as text
        assert all(ord("a") <= i <= ord("z") for i in ids)
        assert tok.encode(tok.decode(ids)) == ids


def test_prompt_text_is_exactly_n_byte_tokens():
    text = prompt_text(300, random.Random(0))
    assert len(ByteTokenizer(32000).encode(text)) == 300


def test_pick_lengths_draws_from_the_pool():
    pool = [RequestLengths(1, 2), RequestLengths(3, 4)]
    picked = pick_lengths(pool, 50, random.Random(0))
    assert len(picked) == 50 and set(picked) == set(pool)
    with pytest.raises(ValueError, match="the length pool is empty"):
        pick_lengths([], 1, random.Random(0))


def test_prompt_set_groups_share_no_prefix_block():
    s = PromptSet.draw(count=64, length=128, seed=0)
    assert len(s.batch) == 64 and {len(p) for p in s.batch} == {128}
    assert len(s.single) == 128
    assert len(s.warmup) == 4 and {len(p) for p in s.warmup} == {16}
    # a prefix cache keys on whole 16-token blocks: no two prompts may share the first one
    first_blocks = {tuple(p[:16]) for p in [*s.batch, s.single, *s.warmup]}
    assert len(first_blocks) == 69
    assert PromptSet.draw(count=64, length=128, seed=0) == s
