"""The default GGUF loaded by us against transformers' own GGUF loading of the same file."""

import pytest
import torch

from strata.engine.gguf_loader import default_model_path, load_gguf

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pair():
    torch.set_num_threads(1)
    path = default_model_path()
    ours = load_gguf(path, keep_quantized=False)
    hf = transformers.AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32
    )
    return ours, hf


def test_every_weight_equals_transformers_bit_for_bit(pair):
    ours, hf = pair
    reference = hf.state_dict()
    # transformers lists the tied head under its own name; it is the embedding itself
    embed = reference["model.embed_tokens.weight"]
    assert reference["lm_head.weight"].data_ptr() == embed.data_ptr()
    assert set(reference) - set(ours.weights) == {"lm_head.weight"}
    assert set(ours.weights) <= set(reference)
    assert len(ours.weights) == 2 + 9 * 30
    for name, weight in ours.weights.items():
        assert weight.dtype == torch.float32
        assert torch.equal(weight, reference[name]), name


def test_config_matches_transformers(pair):
    ours, hf = pair
    cfg, ref = ours.config, hf.config
    assert (cfg.vocab_size, cfg.hidden_size, cfg.intermediate_size) == (49152, 576, 1536)
    assert (cfg.num_layers, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim) == (30, 9, 3, 64)
    assert (ref.num_hidden_layers, ref.num_attention_heads, ref.num_key_value_heads) == (30, 9, 3)
    assert cfg.rms_norm_eps == ref.rms_norm_eps
    assert cfg.rope_theta == ref.rope_parameters["rope_theta"] == 100000.0
    assert cfg.max_position_embeddings == ref.max_position_embeddings == 8192
    assert cfg.tie_word_embeddings is True and ref.tie_word_embeddings is True
    assert cfg.eos_token_ids[0] == hf.generation_config.eos_token_id == 2
