"""Sampler: each adjustment's exact effect on a hand-made distribution."""

import math

import torch

from strata.engine.sampler import SeqSampler, draw, sample_batch
from strata.engine.sequence import SamplingParams


def _s(**kw):
    return SeqSampler(SamplingParams(**kw), num_prompt=2)


def test_greedy_batch_fast_path_equals_per_row():
    logits = torch.tensor([[0.0, 3.0, 1.0], [5.0, 1.0, 2.0]])
    picks = sample_batch(logits, [_s(), _s()], [[0, 0], [0, 0]])
    assert [p.token_id for p in picks] == [1, 0]


def test_repetition_penalty_applies_to_prompt_and_output():
    # token 1 (in history) 3.0 -> 3.0 / 4 = 0.75 loses to token 2 (1.0)
    pick = _s(repetition_penalty=4.0).sample(torch.tensor([0.0, 3.0, 1.0]), [1, 0])
    assert pick.token_id == 2


def test_frequency_and_presence_penalties_count_output_tokens_only():
    logits = torch.tensor([2.5, 2.0, 0.0])
    # prompt [0, 0] does not count; output [0, 0] does: 2.5 - 2*0.5 - 0.1 = 1.4 < 2.0
    assert _s(frequency_penalty=0.5, presence_penalty=0.1).sample(logits, [0, 0]).token_id == 0
    assert (
        _s(frequency_penalty=0.5, presence_penalty=0.1).sample(logits, [0, 0, 0, 0]).token_id == 1
    )


def test_min_p_removes_unlikely_tokens():
    logits = torch.log(torch.tensor([0.6, 0.3, 0.1]))
    seen = {
        _s(temperature=1.0, min_p=0.4, seed=i).sample(logits, [0, 0]).token_id for i in range(200)
    }
    assert seen == {0, 1}  # 0.1 < 0.4 * 0.6: token 2 never drawn


def test_top_k_and_top_p():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    top_k = {
        _s(temperature=1.0, top_k=2, seed=i).sample(logits, [0, 0]).token_id for i in range(200)
    }
    top_p = {
        _s(temperature=1.0, top_p=0.7, seed=i).sample(logits, [0, 0]).token_id for i in range(200)
    }
    assert top_k == {0, 1}
    assert top_p == {0, 1}  # 0.5 < 0.7 needs the second token; 0.8 >= 0.7 stops there


def test_seed_reproducible_and_logprobs_of_raw_distribution():
    logits = torch.tensor([1.0, 2.0, 0.5, 0.0])
    a = [_s(temperature=1.0, seed=42).sample(logits, [0, 0]).token_id for _ in range(3)]
    assert len(set(a)) == 1
    pick = _s(logprobs=2).sample(logits, [0, 0])
    z = math.log(sum(math.exp(x) for x in [1.0, 2.0, 0.5, 0.0]))
    assert pick.token_id == 1
    assert math.isclose(pick.logprob, 2.0 - z, rel_tol=1e-6)
    assert [t for t, _ in pick.top] == [1, 0]
    assert math.isclose(pick.top[1][1], 1.0 - z, rel_tol=1e-6)


def test_draw_follows_the_distribution_and_never_picks_a_zero():
    """Each index's share of 20,000 draws within 4 standard deviations of its probability
    (weights need not sum to 1); an index of weight 0 is never drawn, first and last included."""
    weights = torch.tensor([0.0, 2.0, 0.0, 5.0, 1.0, 0.0, 2.0, 0.0])
    g = torch.Generator().manual_seed(7)
    n = 20_000
    counts = torch.zeros(len(weights))
    for _ in range(n):
        counts[draw(weights, g)] += 1
    p = weights / weights.sum()
    assert torch.all(counts[weights == 0] == 0)
    sd = torch.sqrt(n * p * (1 - p))
    assert torch.all((counts - n * p).abs() <= 4 * sd + 1e-9), counts.tolist()


def test_draw_is_reproducible_from_a_seed_and_takes_a_lone_token():
    weights = torch.softmax(torch.randn(1000, generator=torch.Generator().manual_seed(1)), 0)
    a = [draw(weights, torch.Generator().manual_seed(3)) for _ in range(5)]
    assert len(set(a)) == 1
    one = torch.zeros(50)
    one[49] = 0.25
    assert {draw(one, torch.Generator().manual_seed(i)) for i in range(20)} == {49}
