"""The dummy models' shapes by name (no torch: the gateway and placement read these)."""

from __future__ import annotations

from typing import TypedDict

from strata.engine.config import ModelConfig


class _Base(TypedDict):
    """The ModelConfig fields shared by the dummy models that keep Llama's defaults."""

    rms_norm_eps: float
    rope_theta: float


_BASE: _Base = {"rms_norm_eps": 1e-5, "rope_theta": 10000.0}

DUMMY_CONFIGS: dict[str, ModelConfig] = {
    # the unit-test model: two layers, grouped-query attention, an untied LM head
    "dummy-tiny": ModelConfig(
        name="dummy-tiny",
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=False,
        **_BASE,
    ),
    # big enough for batching and KV-tier behaviour to show, still fast on a CPU
    "dummy-small": ModelConfig(
        name="dummy-small",
        vocab_size=1024,
        hidden_size=256,
        intermediate_size=704,
        num_layers=8,
        num_heads=8,
        num_kv_heads=4,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        **_BASE,
    ),
    # the engine benchmark's model: the same shape is run by transformers and vLLM
    "dummy-bench": ModelConfig(
        name="dummy-bench",
        vocab_size=32000,
        hidden_size=512,
        intermediate_size=1536,
        num_layers=8,
        num_heads=8,
        num_kv_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        **_BASE,
    ),
    # TinyLlama-1.1B's shape (1.1e9 parameters, 4.4 GB in float32), for GPU benchmarks only
    "dummy-1b": ModelConfig(
        name="dummy-1b",
        vocab_size=32768,
        hidden_size=2048,
        intermediate_size=5632,
        num_layers=22,
        num_heads=32,
        num_kv_heads=4,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        **_BASE,
    ),
    # long-context decode (the sparse path): 32k positions, and attention drawn to recent tokens
    # (RECENCY_NATS) as a trained model's is; random weights alone attend almost uniformly
    "dummy-long": ModelConfig(
        name="dummy-long",
        vocab_size=512,
        hidden_size=256,
        intermediate_size=704,
        num_layers=4,
        num_heads=4,
        num_kv_heads=2,
        max_position_embeddings=32768 + 512,
        tie_word_embeddings=False,
        attention_bias=True,
        rms_norm_eps=1e-5,
        rope_theta=500000.0,
    ),
}


# Models whose q and k biases make a query's score for a key this many nats higher at distance 0
# than on average far away (strata.engine.dummy.recency_biases); biases are zero elsewhere.
RECENCY_NATS: dict[str, float] = {"dummy-long": 12.0}


def dummy_names() -> tuple[str, ...]:
    return tuple(DUMMY_CONFIGS)
