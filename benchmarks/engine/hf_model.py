"""The benchmark model as Hugging Face transformers sees it: a LlamaConfig with the same shape
and a LlamaForCausalLM holding the very same tensors (our weight names are HF's).

Used in-process for the transformers baseline, and saved as a checkpoint directory for peers
(vLLM) that load models from disk.
"""

from __future__ import annotations

import os

import torch
import transformers

from strata.engine.loaded import LoadedModel


def llama_config(loaded: LoadedModel, dtype: torch.dtype) -> transformers.LlamaConfig:
    cfg = loaded.config
    eos = list(cfg.eos_token_ids)
    return transformers.LlamaConfig(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads,
        head_dim=cfg.head_dim,
        max_position_embeddings=cfg.max_position_embeddings,
        rms_norm_eps=cfg.rms_norm_eps,
        rope_theta=cfg.rope_theta,
        tie_word_embeddings=cfg.tie_word_embeddings,
        attention_bias=cfg.attention_bias,
        bos_token_id=cfg.bos_token_id,
        eos_token_id=eos,
        pad_token_id=eos[0],
        dtype=dtype,
        architectures=["LlamaForCausalLM"],
    )


def hf_model(loaded: LoadedModel, dtype: torch.dtype) -> transformers.LlamaForCausalLM:
    """A LlamaForCausalLM in `dtype` with exactly `loaded`'s weights: no name missing but the
    LM head of a model that ties it to the embedding, none left over."""
    model = transformers.LlamaForCausalLM(llama_config(loaded, dtype))
    missing, unexpected = model.load_state_dict(loaded.weights, strict=False)
    tied = {"lm_head.weight"} if loaded.config.tie_word_embeddings else set()
    if set(missing) - tied or unexpected:
        raise ValueError(
            f"{loaded.config.name}'s weights do not match LlamaForCausalLM: missing "
            f"{sorted(set(missing) - tied)}, unexpected {sorted(unexpected)}"
        )
    model.tie_weights()
    return model.to(dtype).eval()


def save_checkpoint(
    loaded: LoadedModel, directory: str | os.PathLike[str], dtype: torch.dtype
) -> None:
    """config.json + model.safetensors in `directory`, loadable by any HF-format engine."""
    hf_model(loaded, dtype).save_pretrained(directory, safe_serialization=True)
