"""KV benchmark trace scaling: exact prompt lengths, shared tokens for shared hash ids, time
compression, and the infinite-cache bound and working set worked out by hand on the fixture."""

from pathlib import Path

import pytest

from benchmarks.kv.trace_scale import (
    TOKEN_LOW,
    Scaling,
    cache_figures,
    scale,
    select_window,
)
from strata.eval.traces import TraceRequest, read_mooncake

FIXTURE = Path(__file__).parents[1] / "fixtures" / "traces" / "mooncake.jsonl"

# The fixture's requests as (input_length, output_length, hash_ids), in arrival order:
#   0  1200   6  [0, 1, 2]        4  1024   3  [3, 4]
#   1   700  40  [3, 4]           5  2000  90  [0, 1, 2, 7]
#   2  1500  12  [0, 1, 5]        6   512   1  [8]
#   3   300 300  [6]              7  1536  64  [0, 9, 10]


@pytest.fixture
def requests():
    return scale(read_mooncake(FIXTURE).requests, Scaling(rate=2.0))


def test_prompt_lengths_scale_in_proportion_and_output_is_capped(requests):
    # ceil(L * 16 / 512): 1200 -> 37.5 -> 38 (block 2 cut to 6 tokens), 512 -> 16
    assert [len(r.prompt_ids) for r in requests] == [38, 22, 47, 10, 32, 63, 16, 48]
    assert [r.max_tokens for r in requests] == [6, 16, 12, 16, 3, 16, 1, 16]
    assert [r.hash_ids for r in requests] == [
        (0, 1, 2),
        (3, 4),
        (0, 1, 5),
        (6,),
        (3, 4),
        (0, 1, 2, 7),
        (8,),
        (0, 9, 10),
    ]
    assert all(TOKEN_LOW <= t < 49152 for r in requests for t in r.prompt_ids)


def test_equal_hash_ids_are_equal_tokens_and_a_cut_block_is_its_prefix(requests):
    r0, r2, r5, r7 = requests[0], requests[2], requests[5], requests[7]
    assert r0.prompt_ids[:32] == r2.prompt_ids[:32] == r5.prompt_ids[:32]
    assert r0.prompt_ids[:16] == r7.prompt_ids[:16]
    assert r0.prompt_ids[16:32] != r7.prompt_ids[16:32]  # hash 1 vs hash 9
    assert r0.prompt_ids[32:38] == r5.prompt_ids[32:38]  # 6 tokens of hash 2
    assert r2.prompt_ids[32:] != r5.prompt_ids[32:47]  # hash 5 vs hash 2
    assert requests[1].prompt_ids == requests[4].prompt_ids[:22]
    again = scale(read_mooncake(FIXTURE).requests, Scaling(rate=2.0))
    assert [r.prompt_ids for r in again] == [r.prompt_ids for r in requests]
    other_seed = scale(read_mooncake(FIXTURE).requests, Scaling(rate=2.0, seed=1))
    assert other_seed[0].prompt_ids != requests[0].prompt_ids


def test_time_is_compressed_to_the_target_mean_rate(requests):
    # 8 requests over 5 s of trace; at 2 req/s the 7 gaps take 3.5 s: a factor of 0.7
    assert [r.arrival_s for r in requests] == pytest.approx(
        [0.0, 0.0, 0.175, 0.7, 1.225, 1.75, 2.814, 3.5]
    )
    own = scale(read_mooncake(FIXTURE).requests, Scaling(rate=None))
    assert [r.arrival_s for r in own] == pytest.approx([0.0, 0.0, 0.25, 1.0, 1.75, 2.5, 4.02, 5.0])


def test_prompts_keep_their_leading_hash_blocks_under_the_cap():
    short = scale(read_mooncake(FIXTURE).requests, Scaling(max_hash_blocks=2, rate=None))
    assert [len(r.prompt_ids) for r in short] == [32, 22, 32, 10, 32, 32, 16, 32]
    assert [r.hash_ids for r in short][5] == (0, 1)


def test_a_prompt_longer_than_its_hash_blocks_ends_in_unique_tokens():
    reqs = [TraceRequest(0.0, 1024, 4, hash_ids=(7,)), TraceRequest(1.0, 1024, 4, hash_ids=(7,))]
    a, b = scale(reqs, Scaling(rate=None))
    assert len(a.prompt_ids) == len(b.prompt_ids) == 32
    assert a.prompt_ids[:16] == b.prompt_ids[:16]
    assert a.prompt_ids[16:] != b.prompt_ids[16:]


def test_cache_figures_worked_by_hand(requests):
    # Engine blocks looked up, floor((P - 1) / 16), and the hits an infinite cache would give:
    #   0: [0,1] none seen   1: [3] none   2: [0,1] both   3: -   4: [3] one
    #   5: [0,1,2] two (block 2 was never full in a prompt before)   6: -   7: [0,9] one
    f = cache_figures(requests, 16)
    assert (f.prompt_blocks, f.bound_blocks) == (11, 6)
    assert f.bound == pytest.approx(6 / 11)
    # distinct full prompt blocks: 0, 01, 3, 34, 012, 8, 09, 0910; generated full blocks:
    # requests 1, 2, 3 and 5 each fill one block with generated tokens
    assert (f.distinct_prompt_blocks, f.generated_blocks) == (8, 4)
    assert f.working_set_blocks == 12
    assert f.max_request_blocks == 5  # request 5: ceil((63 + 16) / 16)


def test_select_window_defaults_to_the_trace_tail():
    reqs = read_mooncake(FIXTURE).requests
    assert [r.prompt_tokens for r in select_window(reqs, 3, None)] == [2000, 512, 1536]
    assert [r.prompt_tokens for r in select_window(reqs, 2, 1)] == [700, 1500]
    assert len(select_window(reqs, 100, None)) == 8
    with pytest.raises(ValueError, match="window start 8 is outside the trace's 8 requests"):
        select_window(reqs, 2, 8)
    with pytest.raises(ValueError, match="at least 1 request, got 0"):
        select_window(reqs, 0, None)


def test_scaling_rejects_nonsense():
    with pytest.raises(ValueError, match="tokens_per_hash must be at least 1, got 0"):
        Scaling(tokens_per_hash=0)
    with pytest.raises(ValueError, match="rate must be a positive number of requests/s, got 0"):
        Scaling(rate=0)
