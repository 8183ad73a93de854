"""Named dummy models: Llama-shaped configs with seeded random weights and a byte tokenizer.

They let the engine, the services and the benchmarks run without a checkpoint. Weights are drawn
from N(0, 0.02) (RMSNorm scales are 1), the usual Llama initialisation, so activations and logits
stay in a normal range and sampling behaves; the same name and seed always give the same weights.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from strata.engine.byte_tokenizer import ByteTokenizer
from strata.engine.chat_template import CHATML_TEMPLATE
from strata.engine.config import ModelConfig
from strata.engine.gguf_loader import LoadedModel, weight_shapes

INIT_STD = 0.02

_BASE = dict(rms_norm_eps=1e-5, rope_theta=10000.0)

DUMMY_CONFIGS: dict[str, ModelConfig] = {
    # the unit-test model: two layers, grouped-query attention, an untied LM head
    "dummy-tiny": ModelConfig(name="dummy-tiny", vocab_size=512, hidden_size=64,
                              intermediate_size=128, num_layers=2, num_heads=4, num_kv_heads=2,
                              max_position_embeddings=2048, tie_word_embeddings=False, **_BASE),
    # big enough for batching and KV-tier behaviour to show, still fast on a CPU
    "dummy-small": ModelConfig(name="dummy-small", vocab_size=1024, hidden_size=256,
                               intermediate_size=704, num_layers=8, num_heads=8, num_kv_heads=4,
                               max_position_embeddings=4096, tie_word_embeddings=True, **_BASE),
    # the engine benchmark's model (issue 3): the same shape is run by transformers and vLLM
    "dummy-bench": ModelConfig(name="dummy-bench", vocab_size=32000, hidden_size=512,
                               intermediate_size=1536, num_layers=8, num_heads=8, num_kv_heads=2,
                               max_position_embeddings=4096, tie_word_embeddings=False, **_BASE),
    # TinyLlama-1.1B's shape (1.1e9 parameters, 4.4 GB in float32), for GPU benchmarks only
    "dummy-1b": ModelConfig(name="dummy-1b", vocab_size=32768, hidden_size=2048,
                            intermediate_size=5632, num_layers=22, num_heads=32, num_kv_heads=4,
                            max_position_embeddings=4096, tie_word_embeddings=False, **_BASE),
}


def dummy_names() -> tuple[str, ...]:
    return tuple(DUMMY_CONFIGS)


def load_dummy(name: str, seed: int = 0) -> LoadedModel:
    """The dummy model `name` with weights drawn from a generator seeded with `seed`."""
    if name not in DUMMY_CONFIGS:
        raise ValueError(f"unknown dummy model {name!r}; known: {', '.join(DUMMY_CONFIGS)}")
    tokenizer = ByteTokenizer(DUMMY_CONFIGS[name].vocab_size)
    # a fresh copy, so a caller editing its config cannot change the registry's
    cfg = replace(DUMMY_CONFIGS[name], bos_token_id=tokenizer.bos_token_id,
                  eos_token_ids=tokenizer.eos_token_ids)
    generator = torch.Generator().manual_seed(seed)
    weights: dict[str, torch.Tensor] = {}
    # weight_shapes has a fixed order, so each tensor's draw does not depend on dict hashing.
    for key, shape in weight_shapes(cfg).items():
        if key.endswith("norm.weight"):
            weights[key] = torch.ones(shape)
        else:
            weights[key] = torch.empty(shape).normal_(0.0, INIT_STD, generator=generator)
    return LoadedModel(cfg, weights, tokenizer, CHATML_TEMPLATE)
