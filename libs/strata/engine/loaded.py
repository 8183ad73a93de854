"""What a checkpoint loader hands the engine."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from strata.engine.config import ModelConfig
from strata.engine.quant import QuantizedWeight
from strata.engine.tokenizer import Tokenizer


@dataclass(slots=True)
class LoadedModel:
    config: ModelConfig
    # Hugging Face LlamaForCausalLM names; float tensors in the checkpoint's dtype, or quantized
    weights: Mapping[str, torch.Tensor | QuantizedWeight]
    tokenizer: Tokenizer
    chat_template: str | None = None
    # the checkpoint's float dtype: what EngineConfig dtype "auto" computes in (a quantized or
    # float32 checkpoint: float32)
    dtype: torch.dtype = torch.float32
