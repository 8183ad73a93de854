"""Memory each known model needs per replica, for placing it before any node has loaded it.

The planner must size a replica before it exists, and policy code may not import the engine (and
with it torch), so the figures live here as a small static table. A figure is the weights in the
dtype the engine loads plus the default KV pool; operators override or extend the table with
STRATA_MODEL_MEMORY_BYTES (read by the placement service's config).
"""

from __future__ import annotations

from collections.abc import Mapping

_MB = 10**6

# SmolLM2-135M-Instruct: its GGUF's Q4_1 and Q8_0 weights kept quantized (111 MB; 1.13x the
# file), rounded up to 150 MB for activations and buffers, plus the engine's default KV pool of
# 250 MB.
_SMOLLM2_135M = 150 * _MB + 250 * _MB

MODEL_MEMORY_BYTES: Mapping[str, int] = {
    "smollm2-135m-instruct": _SMOLLM2_135M,
    # Random-weight test models: a few MB of weights and KV.
    "dummy-tiny": 4 * _MB,
    "dummy-small": 16 * _MB,
    # The engine benchmark's model: 56.9M parameters as fp32 (228 MB) plus the 256 MB KV pool.
    "dummy-bench": 230 * _MB + 256 * _MB,
    # TinyLlama-1.1B's shape: 1.1e9 parameters as fp32 (4.4 GB) plus the 256 MB KV pool.
    "dummy-1b": 4400 * _MB + 256 * _MB,
}


def model_memory_bytes(name: str, overrides: Mapping[str, int] | None = None) -> int | None:
    """Bytes one replica of `name` needs; None when neither the overrides nor the table know it."""
    if overrides and name in overrides:
        return overrides[name]
    return MODEL_MEMORY_BYTES.get(name)
