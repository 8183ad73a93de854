"""The long-context model for 16k and 32k: `dummy-long` from strata.engine.dummy_configs.

SmolLM2-135M stops at 8,192 positions, and a 32k prefill of a real 30-layer model does not fit a
benchmark on two CPU cores, so the long runs use seeded random weights (byte tokenizer) whose
q/k biases draw attention to recent tokens as a trained model's is (random weights alone attend
almost uniformly, which no block selection can summarize).
"""

from __future__ import annotations

from strata.engine.config import ModelConfig
from strata.engine.dummy import load_dummy
from strata.engine.dummy_configs import RECENCY_NATS
from strata.engine.loaded import LoadedModel

LONG_NAME = "dummy-long"
SEED = 0


def load_long_model() -> LoadedModel:
    return load_dummy(LONG_NAME, SEED)


def describe_model(cfg: ModelConfig) -> str:
    return (
        f"{cfg.name}: hidden {cfg.hidden_size}, {cfg.num_layers} layers, {cfg.num_heads} "
        f"heads ({cfg.num_kv_heads} KV heads, head_dim {cfg.head_dim}), intermediate "
        f"{cfg.intermediate_size}, vocab {cfg.vocab_size}, "
        f"{cfg.max_position_embeddings} positions, seeded random weights (seed {SEED}) with "
        f"q/k biases scoring a key {RECENCY_NATS.get(cfg.name, 0.0):g} nats higher at "
        f"distance 0 than far away on average"
    )
