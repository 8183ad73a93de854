"""The dtype an engine computes in when its configuration says "auto"."""

from __future__ import annotations

import torch

from strata.engine.loaded import LoadedModel
from strata.engine.packed_linear import ONEDNN_BF16
from strata.engine.quant import QuantizedWeight


def native_bf16(device: torch.device) -> bool:
    """Whether `device` multiplies bfloat16 matrices natively: a CPU with oneDNN's bfloat16 path
    (packed_linear.ONEDNN_BF16; an AVX2-only CPU has none, and its bfloat16 products are slower
    than float32's), or a CUDA device that supports bfloat16."""
    if device.type == "cpu":
        return ONEDNN_BF16
    if device.type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    return False


def auto_dtype(loaded: LoadedModel, device: torch.device) -> torch.dtype:
    """A float checkpoint computes in its own dtype (`LoadedModel.dtype`: bfloat16 and float16
    stay so, float32 stays float32). A checkpoint with quantized weights (GGUF Q4/Q8) has no
    float dtype of its own: it computes in bfloat16 where `device` multiplies bfloat16
    natively, as llama.cpp and vLLM compute such weights with narrow activations, and in
    float32 elsewhere. The weights themselves stay as loaded either way."""
    quantized = any(isinstance(w, QuantizedWeight) for w in loaded.weights.values())
    if quantized and native_bf16(device):
        return torch.bfloat16
    return loaded.dtype
