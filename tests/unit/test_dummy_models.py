"""Dummy models: named shapes, seeded N(0, 0.02) weights, a byte tokenizer."""

import pytest
import torch

from strata.engine.byte_tokenizer import ByteTokenizer
from strata.engine.chat_template import CHATML_TEMPLATE
from strata.engine.dummy import DUMMY_CONFIGS, dummy_names, load_dummy
from strata.engine.gguf_loader import weight_shapes


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def test_tiny_shape():
    model = load_dummy("dummy-tiny")
    cfg = model.config
    assert (cfg.num_layers, cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads) == (2, 64, 4, 2)
    assert (cfg.intermediate_size, cfg.vocab_size, cfg.head_dim) == (128, 512, 16)
    assert cfg.eos_token_ids == (257, 259) and cfg.bos_token_id == 256
    assert {k: tuple(v.shape) for k, v in model.weights.items()} == weight_shapes(cfg)
    assert model.weights["lm_head.weight"].shape == (512, 64)  # tiny keeps an untied head
    assert isinstance(model.tokenizer, ByteTokenizer) and model.tokenizer.vocab_size == 512
    assert model.chat_template == CHATML_TEMPLATE


def test_same_seed_same_weights_other_seed_other_weights():
    a, b, c = load_dummy("dummy-tiny"), load_dummy("dummy-tiny"), load_dummy("dummy-tiny", seed=1)
    assert all(torch.equal(a.weights[k], b.weights[k]) for k in a.weights)
    embed = "model.embed_tokens.weight"
    assert not torch.equal(a.weights[embed], c.weights[embed])
    # pinned values: seed 0 means the same model in every process (with the pinned torch)
    assert a.weights["model.embed_tokens.weight"][0, :3].tolist() == pytest.approx(
        [-0.022516796365380287, -0.023047203198075294, -0.005011571571230888], rel=1e-6
    )


def test_weights_are_small_and_norms_are_one():
    model = load_dummy("dummy-small")
    w = model.weights["model.layers.3.mlp.up_proj.weight"]
    assert w.dtype == torch.float32
    assert abs(w.std().item() - 0.02) < 0.001 and abs(w.mean().item()) < 0.001
    assert torch.equal(model.weights["model.layers.3.input_layernorm.weight"], torch.ones(256))
    assert torch.equal(model.weights["model.norm.weight"], torch.ones(256))
    assert "lm_head.weight" not in model.weights  # small ties its head to the embedding
    assert model.config.num_layers == 8


def test_logits_of_a_random_model_are_tame():
    """With std 0.02 the tied head gives logits near zero: sampling is close to uniform, no NaNs."""
    model = load_dummy("dummy-small")
    emb = model.weights["model.embed_tokens.weight"]
    logits = emb[:8] @ emb.T
    assert torch.isfinite(logits).all()
    assert logits.abs().max().item() < 0.5


def test_configs_are_not_shared_with_callers():
    model = load_dummy("dummy-tiny")
    model.config.max_position_embeddings = 7
    assert DUMMY_CONFIGS["dummy-tiny"].max_position_embeddings == 2048


def test_names_and_the_large_one_is_about_a_billion_parameters():
    assert dummy_names() == ("dummy-tiny", "dummy-small", "dummy-bench", "dummy-1b", "dummy-long")
    # the engine benchmark's shape: embeddings and head 2 x 32000 x 512, 8 layers of 2.88M
    assert (
        DUMMY_CONFIGS["dummy-bench"].param_count()
        == 2 * 32000 * 512
        + 8 * (512 * 512 + 2 * 512 * 128 + 512 * 512 + 3 * 512 * 1536 + 2 * 512)
        + 512
    )
    assert 1.0e9 < DUMMY_CONFIGS["dummy-1b"].param_count() < 1.2e9
    with pytest.raises(ValueError, match="unknown dummy model 'dummy-huge'; known: dummy-tiny"):
        load_dummy("dummy-huge")
