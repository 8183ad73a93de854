"""Workload building: scaling math, the window, tenant mapping, and exact-length token synthesis."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from strata.engine.byte_tokenizer import ByteTokenizer
from strata.eval.traces import TraceRequest, read_mooncake
from strata.eval.workload import (
    LETTERS,
    WORDS,
    ByteText,
    PromptSynth,
    Scaling,
    TenantKey,
    TenantMapper,
    Window,
    WordText,
    build_workload,
    parse_tenants,
    text_for_model,
)

MOONCAKE = Path(__file__).resolve().parents[1] / "fixtures" / "traces" / "mooncake.jsonl"


def test_scaling_divides_rounds_up_and_clips():
    scaling = Scaling(time_scale=10.0, length_scale=4.0, max_prompt=300, max_output=50)
    assert scaling.send_at(12.5) == 1.25
    assert [scaling.prompt_tokens(n) for n in (0, 1, 4, 5, 1199, 1200, 1201, 10_000)] == [
        1,
        1,
        1,
        2,
        300,
        300,
        300,
        300,
    ]
    assert [scaling.prompt_tokens(n) for n in (400, 401)] == [100, 101]
    assert [scaling.output_tokens(n) for n in (0, 7, 8, 9, 200, 201)] == [1, 2, 2, 3, 50, 50]
    assert scaling.block_tokens == 128
    assert Scaling(length_scale=3.0).block_tokens == 171  # round(512 / 3)
    assert Scaling(length_scale=1000.0).block_tokens == 1
    with pytest.raises(ValueError, match="time_scale must be a positive number, got 0"):
        Scaling(time_scale=0)
    with pytest.raises(ValueError, match="max_prompt must be at least 1, got 0"):
        Scaling(max_prompt=0)


def test_round_robin_unless_the_trace_names_a_known_tenant():
    keys = [TenantKey("alice", "ka"), TenantKey("bob", "kb")]
    mapper = TenantMapper(keys)
    assert [mapper.assign(t).label for t in ("", "", "bob", "", "carol", "")] == [
        "alice",
        "bob",
        "bob",
        "alice",
        "bob",
        "alice",
    ]


def test_weighted_mapping_follows_the_weights_and_the_seed():
    keys = [TenantKey("a", "ka", 3.0), TenantKey("b", "kb", 1.0)]
    draws = [
        TenantMapper(keys, weighted=True, rng=random.Random(4)).assign().label for _ in range(1)
    ]
    mapper = TenantMapper(keys, weighted=True, rng=random.Random(4))
    labels = [mapper.assign().label for _ in range(4000)]
    assert labels[0] == draws[0]
    assert labels.count("a") / 4000 == pytest.approx(0.75, abs=0.02)
    again = TenantMapper(keys, weighted=True, rng=random.Random(4))
    assert [again.assign().label for _ in range(4000)] == labels


def test_parse_tenants():
    assert parse_tenants("k1,k2") == ([TenantKey("key1", "k1"), TenantKey("key2", "k2")], False)
    assert parse_tenants("alice=k1:3, bob=k2") == (
        [TenantKey("alice", "k1", 3.0), TenantKey("bob", "k2", 1.0)],
        True,
    )
    with pytest.raises(ValueError, match="--tenants entry 2 is empty"):
        parse_tenants("k1,")
    with pytest.raises(ValueError, match="the weight after ':' must be a number, got 'x'"):
        parse_tenants("a=k1:x")
    with pytest.raises(ValueError, match="--tenants labels must be unique, got a, a"):
        parse_tenants("a=k1,a=k2")


def test_byte_prompts_are_exactly_n_tokens_for_the_byte_tokenizer():
    tokenizer = ByteTokenizer(1024)
    synth = PromptSynth(ByteText(), block_tokens=16, seed=1)
    for n in (1, 15, 16, 17, 300):
        text = synth.prompt(index=n, tokens=n, hash_ids=(5, 6, 7))
        assert len(tokenizer.encode(text)) == n
        assert set(text) <= set(LETTERS)
    assert text_for_model("dummy-small").name == "bytes"
    assert text_for_model("smollm2-135m-instruct").name == "words"


def test_equal_hash_ids_give_equal_blocks_and_different_ones_differ():
    synth = PromptSynth(ByteText(), block_tokens=8, seed=3)
    a = synth.pieces(0, 24, (0, 1, 2))
    b = synth.pieces(1, 30, (0, 1, 5))
    assert a[:16] == b[:16]  # blocks 0 and 1 shared
    assert a[16:24] != b[16:24]  # block 2 vs block 5
    # a prompt ending inside a block takes that block's beginning
    assert synth.pieces(2, 12, (0, 1)) == a[:12]
    # no hash ids: unique per request index, the same on a rebuild
    assert synth.pieces(3, 20) != synth.pieces(4, 20)
    assert synth.pieces(3, 20) == PromptSynth(ByteText(), 8, seed=3).pieces(3, 20)
    # another seed draws other contents for the same block
    assert PromptSynth(ByteText(), 8, seed=4).pieces(0, 8, (0,)) != a[:8]


def test_mooncake_fixture_shares_scaled_blocks():
    requests = read_mooncake(MOONCAKE).requests
    scaling = Scaling(time_scale=2.0, length_scale=4.0, max_prompt=400, max_output=20)
    synth = PromptSynth(ByteText(), scaling.block_tokens, seed=0)
    workload = build_workload(
        requests, scaling, Window(), TenantMapper([TenantKey("d", "k")]), synth
    )
    assert [(w.send_at_s, w.prompt_tokens, w.max_tokens, w.shared_blocks) for w in workload] == [
        (0.0, 300, 2, 3),
        (0.0, 175, 10, 2),
        (0.125, 375, 3, 3),
        (0.5, 75, 20, 1),
        (0.875, 256, 1, 2),
        (1.25, 400, 20, 4),
        (2.01, 128, 1, 1),
        (2.5, 384, 16, 3),
    ]
    prompts = [w.prompt for w in workload]
    assert all(len(p) == w.prompt_tokens for p, w in zip(prompts, workload))
    # hash ids (0, 1, 2), (0, 1, 5), (0, 1, 2, 7), (0, 9, 10): 128-token blocks
    assert prompts[0][:256] == prompts[2][:256] and prompts[0][256:300] != prompts[2][256:300]
    assert prompts[5][:300] == prompts[0]
    assert prompts[7][:128] == prompts[0][:128] and prompts[7][128:256] != prompts[0][128:256]
    # (3, 4) at 700 and 1024 trace tokens: 175 tokens are a prefix of 256
    assert prompts[4][:175] == prompts[1]


def test_window_by_count_and_scaled_duration():
    requests = [TraceRequest(float(t), 10, 10) for t in range(10)]
    mapper = TenantMapper([TenantKey("d", "k")])
    synth = PromptSynth(ByteText(), 16, seed=0)
    by_time = build_workload(
        requests, Scaling(time_scale=2.0), Window(max_duration_s=2.0), mapper, synth
    )
    assert [w.send_at_s for w in by_time] == [0.0, 0.5, 1.0, 1.5, 2.0]
    by_count = build_workload(requests, Scaling(), Window(max_requests=3), mapper, synth)
    assert [(w.index, w.send_at_s) for w in by_count] == [(0, 0.0), (1, 1.0), (2, 2.0)]
    with pytest.raises(ValueError, match="max_requests must be at least 1, got 0"):
        Window(max_requests=0)


@pytest.mark.slow
def test_every_word_is_one_token_for_the_default_model():
    """The default model's tokenizer splits before each space and knows each " word" whole, so
    a prompt of N words is N tokens (2 s: reads the GGUF vocabulary)."""
    from strata.engine.bpe_tokenizer import BpeTokenizer
    from strata.engine.gguf_loader import GGUFReader, _metadata, default_model_path

    tokenizer = BpeTokenizer.from_gguf_metadata(_metadata(GGUFReader(default_model_path())))
    assert len(WORDS) == len(set(WORDS)) == 256
    assert all(len(tokenizer.encode(" " + w)) == 1 for w in WORDS)
    synth = PromptSynth(WordText(), block_tokens=32, seed=9)
    for n in (1, 31, 32, 200, 1024):
        assert len(tokenizer.encode(synth.prompt(n, n, hash_ids=(1, 2)))) == n
