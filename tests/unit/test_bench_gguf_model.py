"""The benchmark model written as GGUF (for llama.cpp) loads back as the same tensors."""

import torch

from benchmarks.engine.gguf_model import save_gguf
from strata.engine.dummy import load_dummy
from strata.engine.gguf_loader import load_gguf


def test_a_saved_gguf_loads_back_as_the_bfloat16_rounded_weights(tmp_path):
    torch.set_num_threads(1)
    model = load_dummy("dummy-small")
    path = save_gguf(model, tmp_path / "small.gguf")
    back = load_gguf(path, keep_quantized=False)
    cfg, ref = back.config, model.config
    assert (cfg.num_layers, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim) == (
        ref.num_layers,
        ref.num_heads,
        ref.num_kv_heads,
        ref.head_dim,
    )
    assert cfg.vocab_size == ref.vocab_size and cfg.tie_word_embeddings == ref.tie_word_embeddings
    assert set(back.weights) == set(model.weights)
    for name, w in model.weights.items():
        want = w if w.dim() == 1 else w.bfloat16().float()  # norms stay float32
        assert torch.equal(back.weights[name], want), name
