"""What a checkpoint loader hands the engine."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from strata.engine.config import ModelConfig
from strata.engine.tokenizer import Tokenizer


@dataclass(slots=True)
class LoadedModel:
    config: ModelConfig
    weights: dict[str, torch.Tensor]  # Hugging Face LlamaForCausalLM names, float32
    tokenizer: Tokenizer
    chat_template: str | None = None
