"""Named dummy models: Llama-shaped configs with seeded random weights and a byte tokenizer.

They let the engine, the services and the benchmarks run without a checkpoint. Weights are drawn
from N(0, 0.02) (RMSNorm scales are 1), the usual Llama initialisation, so activations and logits
stay in a normal range and sampling behaves; the same name and seed always give the same weights.
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch

from strata.engine.byte_tokenizer import ByteTokenizer
from strata.engine.chat_template import CHATML_TEMPLATE
from strata.engine.config import ModelConfig
from strata.engine.dummy_configs import DUMMY_CONFIGS, RECENCY_NATS, dummy_names  # noqa: F401
from strata.engine.gguf_loader import LoadedModel, weight_shapes
from strata.engine.rope import inv_frequencies

INIT_STD = 0.02


def load_dummy(name: str, seed: int = 0) -> LoadedModel:
    """The dummy model `name` with weights drawn from a generator seeded with `seed`."""
    if name not in DUMMY_CONFIGS:
        raise ValueError(f"unknown dummy model {name!r}; known: {', '.join(DUMMY_CONFIGS)}")
    tokenizer = ByteTokenizer(DUMMY_CONFIGS[name].vocab_size)
    # a fresh copy, so a caller editing its config cannot change the registry's
    cfg = replace(
        DUMMY_CONFIGS[name],
        bos_token_id=tokenizer.bos_token_id,
        eos_token_ids=tokenizer.eos_token_ids,
    )
    generator = torch.Generator().manual_seed(seed)
    weights: dict[str, torch.Tensor] = {}
    # weight_shapes has a fixed order, so each tensor's draw does not depend on dict hashing.
    for key, shape in weight_shapes(cfg).items():
        if key.endswith("norm.weight"):
            weights[key] = torch.ones(shape)
        else:
            weights[key] = torch.empty(shape).normal_(0.0, INIT_STD, generator=generator)
    if cfg.attention_bias:
        weights.update(recency_biases(cfg, RECENCY_NATS.get(name, 0.0)))
    return LoadedModel(cfg, weights, tokenizer, CHATML_TEMPLATE)


def recency_biases(cfg: ModelConfig, nats: float) -> dict[str, torch.Tensor]:
    """q/k/v biases that draw attention to recent tokens, as trained models' attention is.

    The q and k biases of every head put the same amplitude a on the rotary pairs whose
    wavelength lies between 64 and 8192 positions. Rotary embeddings turn their product into
    scale * a^2 * sum_i cos(theta_i * distance): `nats` at distance 0, averaging out far away,
    with bumps where the pairs' phases meet again. The v biases are zero."""
    wavelength = 2 * math.pi / inv_frequencies(cfg)
    pairs = ((wavelength >= 64) & (wavelength <= 8192)).nonzero().flatten()
    head = torch.zeros(cfg.head_dim)
    if len(pairs) and nats > 0:
        head[pairs] = math.sqrt(nats * math.sqrt(cfg.head_dim) / len(pairs))
    out: dict[str, torch.Tensor] = {}
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}.self_attn."
        out[p + "q_proj.bias"] = head.repeat(cfg.num_heads)
        out[p + "k_proj.bias"] = head.repeat(cfg.num_kv_heads)
        out[p + "v_proj.bias"] = torch.zeros(cfg.num_kv_heads * cfg.head_dim)
    return out
