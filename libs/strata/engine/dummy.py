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
from strata.engine.dummy_configs import DUMMY_CONFIGS, dummy_names  # noqa: F401
from strata.engine.gguf_loader import LoadedModel, weight_shapes

INIT_STD = 0.02


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
