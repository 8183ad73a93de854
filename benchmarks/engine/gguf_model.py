"""The benchmark model written as a Llama GGUF file, for peers that load GGUF (llama.cpp): the
very same tensors in bfloat16 (or float32), under GGUF names, with llama.cpp's Q/K row order.

The tokenizer in the file is a stand-in (byte-level BPE tokens, then fillers up to the model's
vocabulary): the benchmark feeds token ids, so only its size matters.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import torch

from strata.engine.bpe_tokenizer import _bytes_to_unicode
from strata.engine.gguf_loader import gguf_name, permute_rope
from strata.engine.loaded import LoadedModel

_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
_MERGED, _MERGES = ["he", "Ġt", "Ġthe"], ["h e", "Ġ t", "Ġt he"]


def _tokens(vocab: int) -> list[str]:
    byte_tokens = [_bytes_to_unicode()[b] for b in range(256)]
    tokens = _SPECIALS + byte_tokens + _MERGED
    if vocab < len(tokens):
        raise ValueError(f"a vocabulary of {vocab} is too small for the stand-in tokenizer")
    return tokens + [f"<filler{i}>" for i in range(vocab - len(tokens))]


def save_gguf(loaded: LoadedModel, path: str | Path, dtype: torch.dtype = torch.bfloat16) -> Path:
    """Write `loaded` (float tensors) as a Llama GGUF at `path`; returns the path."""
    cfg = loaded.config
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(cfg.num_layers)
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_head_count(cfg.num_heads)
    writer.add_head_count_kv(cfg.num_kv_heads)
    writer.add_key_length(cfg.head_dim)
    writer.add_value_length(cfg.head_dim)
    writer.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    writer.add_rope_freq_base(cfg.rope_theta)
    writer.add_rope_dimension_count(cfg.head_dim)
    tokens = _tokens(cfg.vocab_size)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(tokens)
    writer.add_token_merges(_MERGES)
    writer.add_token_types([3] * len(_SPECIALS) + [1] * (len(tokens) - len(_SPECIALS)))
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(0)
    writer.add_add_bos_token(False)
    for name, weight in loaded.weights.items():
        if not isinstance(weight, torch.Tensor):
            raise ValueError(f"{name} is quantized; save_gguf writes float tensors")
        w = weight.detach()
        if name.endswith("self_attn.q_proj.weight"):
            w = permute_rope(w, cfg.num_heads)
        elif name.endswith("self_attn.k_proj.weight"):
            w = permute_rope(w, cfg.num_kv_heads)
        if w.dim() == 1 or dtype == torch.float32:  # norms stay float32, as converters write them
            writer.add_tensor(gguf_name(name), w.float().numpy())
        else:
            bits = w.to(torch.bfloat16).contiguous().view(torch.int16).numpy().view(np.uint16)
            writer.add_tensor(
                gguf_name(name),
                bits,
                raw_shape=bits.shape,
                raw_dtype=gguf.GGMLQuantizationType.BF16,
            )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
