"""Our paged-cache model against transformers' LlamaForCausalLM on tiny random configs (fp32)."""

import pytest
import torch

from strata.engine.attention import AttentionMetadata, SeqSlice, kv_cache_shape
from strata.engine.config import ModelConfig
from strata.engine.model import build_model

transformers = pytest.importorskip("transformers")

CONFIGS = {
    "gqa3-tied": dict(num_attention_heads=6, num_key_value_heads=2, tie_word_embeddings=True),
    "mha-untied": dict(num_attention_heads=4, num_key_value_heads=4, tie_word_embeddings=False),
    "mqa-theta": dict(num_attention_heads=4, num_key_value_heads=1, rope_theta=500000.0),
    "llama3-scaling": dict(
        num_attention_heads=4,
        num_key_value_heads=2,
        rope_scaling={
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 32,
        },
    ),
    "linear-scaling": dict(
        num_attention_heads=4,
        num_key_value_heads=2,
        rope_scaling={"rope_type": "linear", "factor": 2.0},
    ),
}


def _pair(overrides):
    torch.manual_seed(0)
    hf_cfg = transformers.LlamaConfig(
        vocab_size=97,
        hidden_size=48,
        intermediate_size=96,
        num_hidden_layers=2,
        max_position_embeddings=128,
        rms_norm_eps=1e-6,
        **overrides,
    )
    hf = transformers.LlamaForCausalLM(hf_cfg).eval()
    cfg = ModelConfig(
        name="tiny",
        vocab_size=97,
        hidden_size=48,
        intermediate_size=96,
        num_layers=2,
        num_heads=hf_cfg.num_attention_heads,
        num_kv_heads=hf_cfg.num_key_value_heads,
        rms_norm_eps=1e-6,
        rope_theta=getattr(hf_cfg, "rope_theta", None) or hf_cfg.rope_parameters["rope_theta"],
        rope_scaling=overrides.get("rope_scaling"),
        max_position_embeddings=128,
        tie_word_embeddings=hf_cfg.tie_word_embeddings,
    )
    weights = {k: v for k, v in hf.state_dict().items()}
    ours = build_model(cfg, weights, torch.device("cpu"), torch.float32)
    return hf, ours, cfg


def _kv(cfg, num_blocks, block_size):
    return torch.zeros(
        kv_cache_shape(cfg.num_layers, cfg.num_kv_heads, num_blocks, block_size, cfg.head_dim)
    )


@pytest.mark.parametrize("name", CONFIGS)
def test_prefill_and_decode_match_transformers(name):
    torch.set_num_threads(1)
    hf, ours, cfg = _pair(CONFIGS[name])
    block_size = 4
    kv = _kv(cfg, 16, block_size)
    blocks = [5, 2, 9, 11, 3, 7, 1, 0]  # deliberately out of order
    prompt = torch.randint(0, 97, (11,), generator=torch.Generator().manual_seed(1))
    ids = prompt.tolist()

    meta = AttentionMetadata.build([SeqSlice(0, len(ids), len(ids), blocks)], block_size, "cpu")
    logits = ours(prompt, torch.arange(len(ids)), kv, meta, torch.arange(len(ids)))
    with torch.no_grad():
        ref = hf(prompt[None]).logits[0]
    assert torch.allclose(logits, ref, atol=1e-4), (logits - ref).abs().max()

    for _ in range(6):  # decode steps through the paged cache
        nxt = int(logits[-1].argmax())
        ids.append(nxt)
        meta = AttentionMetadata.build([SeqSlice(0, 1, len(ids), blocks)], block_size, "cpu")
        logits = ours(
            torch.tensor([nxt]), torch.tensor([len(ids) - 1]), kv, meta, torch.tensor([0])
        )
        with torch.no_grad():
            ref = hf(torch.tensor([ids])).logits[0, -1:]
        assert torch.allclose(logits, ref, atol=1e-4), (logits - ref).abs().max()


def test_batched_mixed_step_matches_separate_runs():
    """Two sequences in one step (one decoding, one prefilling a chunk) equal their solo runs."""
    torch.set_num_threads(1)
    hf, ours, cfg = _pair(CONFIGS["gqa3-tied"])
    kv = _kv(cfg, 16, 4)
    a = torch.randint(0, 97, (9,), generator=torch.Generator().manual_seed(2))
    b = torch.randint(0, 97, (6,), generator=torch.Generator().manual_seed(3))
    blocks_a, blocks_b = [0, 1, 2, 3], [4, 5, 6]
    # a: prefill 8 tokens first, then decode its 9th in the same step as b's first chunk of 6
    meta = AttentionMetadata.build([SeqSlice(0, 8, 8, blocks_a)], 4, "cpu")
    ours(a[:8], torch.arange(8), kv, meta, torch.tensor([7]))
    step_ids = torch.cat([a[8:9], b])
    positions = torch.cat([torch.tensor([8]), torch.arange(6)])
    meta = AttentionMetadata.build(
        [SeqSlice(0, 1, 9, blocks_a), SeqSlice(1, 6, 6, blocks_b)], 4, "cpu"
    )
    logits = ours(step_ids, positions, kv, meta, torch.tensor([0, 6]))
    with torch.no_grad():
        ref_a = hf(a[None]).logits[0, -1]
        ref_b = hf(b[None]).logits[0, -1]
    assert torch.allclose(logits[0], ref_a, atol=1e-4)
    assert torch.allclose(logits[1], ref_b, atol=1e-4)


def test_a_bfloat16_model_keeps_its_residual_stream_in_float32():
    """Each layer of a bfloat16 model reads and updates a float32 hidden state (the norms round
    their outputs to bfloat16 for the projections), so its logits are closer to the float32
    model's than a bfloat16 stream leaves them."""
    torch.set_num_threads(1)
    hf, ours, cfg = _pair(CONFIGS["gqa3-tied"])
    weights = {k: v.to(torch.bfloat16) for k, v in hf.state_dict().items()}
    narrow = build_model(cfg, weights, torch.device("cpu"), torch.bfloat16)
    seen: list[torch.dtype] = []
    narrow.layers[1].register_forward_hook(
        lambda _m, args, out: seen.extend([args[0].dtype, out.dtype])
    )
    ids = torch.randint(0, 97, (7,), generator=torch.Generator().manual_seed(4))
    meta = AttentionMetadata.build([SeqSlice(0, 7, 7, [0, 1])], 4, "cpu")
    logits = narrow(ids, torch.arange(7), _kv(cfg, 4, 4).bfloat16(), meta, torch.tensor([6]))
    assert seen == [torch.float32, torch.float32]
    want = ours(ids, torch.arange(7), _kv(cfg, 4, 4), meta, torch.tensor([6]))
    assert float((logits.float() - want).abs().max()) < 0.05
