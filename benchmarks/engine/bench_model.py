"""The benchmark model: "dummy-bench" from strata.engine.dummy, with seeded random weights.

    hidden 512, 8 layers, 8 heads (head_dim 64), 2 KV heads, intermediate 1536, vocab 32000,
    untied LM head: 57.1 M parameters

Every system in the benchmark (our engine, the worker, transformers, vLLM) gets these very
tensors, so a speed difference is never a model difference. The shape is checked at load, so a
later edit of the dummy table cannot silently change what the published numbers measured.
"""

from __future__ import annotations

from strata.engine.dummy import load_dummy
from strata.engine.loaded import LoadedModel

BENCH_MODEL = "dummy-bench"
BENCH_SEED = 0

# (hidden, layers, heads, kv heads, intermediate, vocab, tied head)
BENCH_SHAPE = (512, 8, 8, 2, 1536, 32000, False)


def model_shape(loaded: LoadedModel) -> tuple:
    c = loaded.config
    return (
        c.hidden_size,
        c.num_layers,
        c.num_heads,
        c.num_kv_heads,
        c.intermediate_size,
        c.vocab_size,
        c.tie_word_embeddings,
    )


def load_bench_model() -> LoadedModel:
    loaded = load_dummy(BENCH_MODEL, seed=BENCH_SEED)
    if model_shape(loaded) != BENCH_SHAPE:
        raise ValueError(
            f"{BENCH_MODEL} has shape {model_shape(loaded)} but the benchmark is "
            f"defined for {BENCH_SHAPE} (hidden, layers, heads, kv heads, "
            f"intermediate, vocab, tied head)"
        )
    return loaded
