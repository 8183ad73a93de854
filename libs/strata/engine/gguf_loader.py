"""Loading a Llama-family GGUF checkpoint: config, float32 weights in HF names, tokenizer, template.

GGUF differs from Hugging Face's LlamaForCausalLM layout in three ways this module undoes:

- names: `blk.{i}.attn_q.weight` is `model.layers.{i}.self_attn.q_proj.weight`, and so on;
- shapes: GGUF lists dimensions innermost first (`[in, out]`); the reader's arrays are already
  row-major `(out, in)`, which is torch's Linear layout, so the listed shape is only checked;
- Q and K rows: llama.cpp's converter permutes them so RoPE can rotate interleaved pairs
  (x0,x1),(x2,x3)...; our model rotates halves (x_i, x_{i+d/2}) like HF, so they are permuted
  back. Skipping this still gives fluent-looking text, just wrong text.

Quantized tensors of the types strata.engine.quant decodes (Q4_0, Q4_1, Q4_K, Q8_0) stay
quantized, as QuantizedWeight, unless `keep_quantized` is false; every other type is widened to
float32 with `gguf.quants.dequantize`.
"""

from __future__ import annotations

import os
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gguf import GGMLQuantizationType, GGUFReader
from gguf.quants import dequantize

from strata.engine.bpe_tokenizer import BpeTokenizer
from strata.engine.checkpoints import default_model_path  # noqa: F401 (tests import it here)
from strata.engine.config import ModelConfig
from strata.engine.loaded import LoadedModel
from strata.engine.quant import GGUF_TYPES, QuantizedWeight, from_gguf

__all__ = [
    "LoadedModel",
    "default_model_path",
    "gguf_name",
    "hf_name",
    "load_gguf",
    "permute_rope",
    "unpermute_rope",
    "weight_shapes",
]


_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_LAYER_TENSOR = re.compile(r"blk\.(\d+)\.(.+)")


def hf_name(gguf_name: str) -> str:
    """The HF LlamaForCausalLM name of a GGUF tensor; ValueError for tensors a Llama lacks."""
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    match = _LAYER_TENSOR.fullmatch(gguf_name)
    if match and match.group(2) in _LAYER_NAMES:
        return f"model.layers.{match.group(1)}.{_LAYER_NAMES[match.group(2)]}"
    raise ValueError(
        f"GGUF tensor {gguf_name!r} has no place in a Llama model; this checkpoint "
        "needs a loader for its architecture"
    )


def gguf_name(hf: str) -> str:
    """The GGUF name of an HF LlamaForCausalLM tensor (hf_name's inverse); ValueError for a name
    a Llama GGUF has no tensor for."""
    for gguf, name in _GLOBAL_NAMES.items():
        if name == hf:
            return gguf
    match = re.fullmatch(r"model\.layers\.(\d+)\.(.+)", hf)
    if match:
        for gguf, name in _LAYER_NAMES.items():
            if name == match.group(2):
                return f"blk.{match.group(1)}.{gguf}"
    raise ValueError(f"{hf!r} has no GGUF name in a Llama model")


def permute_rope(weight: torch.Tensor, num_heads: int) -> torch.Tensor:
    """llama.cpp's Q/K row permutation (unpermute_rope's inverse): per head, rows [0, d/2, 1,
    d/2+1, ...] of the HF matrix, so that interleaved-pair RoPE rotates what HF's rotate-half
    rotates."""
    rows = weight.shape[0]
    head_dim = rows // num_heads
    return (
        weight.reshape(num_heads, 2, head_dim // 2, *weight.shape[1:])
        .transpose(1, 2)
        .reshape(weight.shape)
        .contiguous()
    )


def unpermute_rope(weight: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Undo llama.cpp's Q/K row permutation (interleaved-pair RoPE back to rotate-half).

    llama.cpp writes, per head, rows [0, d/2, 1, d/2+1, ...] of the HF matrix; reading them back
    in (pair, half) order and swapping the two axes restores [0, 1, ..., d-1].
    """
    rows = weight.shape[0]
    head_dim = rows // num_heads
    return (
        weight.reshape(num_heads, head_dim // 2, 2, *weight.shape[1:])
        .transpose(1, 2)
        .reshape(weight.shape)
        .contiguous()
    )


def _metadata(reader: GGUFReader) -> dict[str, Any]:
    return {
        key: field.contents() for key, field in reader.fields.items() if not key.startswith("GGUF.")
    }


class _LlamaMetadata:
    """Typed reads of the `llama.*` keys, with a clear error for a missing required one."""

    __slots__ = ("meta",)

    def __init__(self, meta: dict[str, Any]) -> None:
        self.meta = meta

    def number(self, key: str, default: float | None = None) -> float:
        value = self.meta.get(f"llama.{key}", default)
        if value is None:
            raise ValueError(f"GGUF metadata lacks llama.{key}; the file is incomplete")
        return float(value)

    def count(self, key: str, default: int | None = None) -> int:
        return int(self.number(key, default))


def _config(meta: dict[str, Any], name: str, tensor_names: set[str]) -> ModelConfig:
    arch = meta.get("general.architecture")
    if arch != "llama":
        raise ValueError(f"only Llama-architecture GGUF files are supported, this one is {arch!r}")
    llama = _LlamaMetadata(meta)
    hidden = llama.count("embedding_length")
    heads = llama.count("attention.head_count")
    head_dim = llama.count("attention.key_length", hidden // heads)
    rope_dims = llama.count("rope.dimension_count", head_dim)
    if rope_dims != head_dim:
        raise ValueError(
            f"partial rotary embeddings ({rope_dims} of {head_dim} dims) are not supported"
        )
    scaling = meta.get("llama.rope.scaling.type", "none")
    if scaling not in ("none", "linear"):
        raise ValueError(f"rope scaling {scaling!r} is not supported")
    return ModelConfig(
        name=name,
        vocab_size=len(meta["tokenizer.ggml.tokens"]),
        hidden_size=hidden,
        intermediate_size=llama.count("feed_forward_length"),
        num_layers=llama.count("block_count"),
        num_heads=heads,
        num_kv_heads=llama.count("attention.head_count_kv", heads),
        head_dim=head_dim,
        rms_norm_eps=llama.number("attention.layer_norm_rms_epsilon"),
        rope_theta=llama.number("rope.freq_base", 10000.0),
        rope_scaling=(
            {"rope_type": "linear", "factor": llama.number("rope.scaling.factor")}
            if scaling == "linear"
            else None
        ),
        max_position_embeddings=llama.count("context_length"),
        tie_word_embeddings="output.weight" not in tensor_names,
    )


def weight_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every weight a model of this config has, in HF names, with its shape, in a fixed order."""
    h, q, kv = cfg.hidden_size, cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    shapes: dict[str, tuple[int, ...]] = {
        "model.embed_tokens.weight": (cfg.vocab_size, h),
        "model.norm.weight": (h,),
    }
    if not cfg.tie_word_embeddings:
        shapes["lm_head.weight"] = (cfg.vocab_size, h)
    per_layer = {
        "input_layernorm.weight": (h,),
        "post_attention_layernorm.weight": (h,),
        "self_attn.q_proj.weight": (q, h),
        "self_attn.k_proj.weight": (kv, h),
        "self_attn.v_proj.weight": (kv, h),
        "self_attn.o_proj.weight": (h, q),
        "mlp.gate_proj.weight": (cfg.intermediate_size, h),
        "mlp.up_proj.weight": (cfg.intermediate_size, h),
        "mlp.down_proj.weight": (h, cfg.intermediate_size),
    }
    for i in range(cfg.num_layers):
        shapes.update({f"model.layers.{i}.{k}": v for k, v in per_layer.items()})
    return shapes


def _to_float32(
    data: np.ndarray, qtype: GGMLQuantizationType, shape: tuple[int, ...]
) -> torch.Tensor:
    # F32 tensors come back as views of the read-only file map; copy them into owned memory.
    array = np.array(dequantize(data, qtype), dtype=np.float32, copy=True)
    return torch.from_numpy(array.reshape(shape))


def _decode(
    data: np.ndarray, qtype: GGMLQuantizationType, shape: tuple[int, ...], keep_quantized: bool
) -> torch.Tensor | QuantizedWeight:
    if keep_quantized and qtype in GGUF_TYPES and len(shape) == 2:
        return from_gguf(data, qtype, (shape[0], shape[1]))
    return _to_float32(data, qtype, shape)


def _unpermute(
    weight: torch.Tensor | QuantizedWeight, heads: int
) -> torch.Tensor | QuantizedWeight:
    if isinstance(weight, QuantizedWeight):  # rows move whole: reorder them, still quantized
        order = unpermute_rope(torch.arange(weight.shape[0]).unsqueeze(1), heads).squeeze(1)
        return weight.rows(order)
    return unpermute_rope(weight, heads)


def load_gguf(
    path: str | os.PathLike[str], name: str | None = None, keep_quantized: bool = True
) -> LoadedModel:
    """Load a Llama GGUF file; `name` defaults to the file name without its extension. With
    `keep_quantized` false every tensor is widened to float32."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no GGUF file at {path}")
    reader = GGUFReader(path)
    meta = _metadata(reader)
    cfg = _config(meta, name or path.stem, {t.name for t in reader.tensors})
    tokenizer = BpeTokenizer.from_gguf_metadata(meta)
    cfg.bos_token_id = tokenizer.bos_token_id
    cfg.eos_token_ids = tokenizer.eos_token_ids

    expected = weight_shapes(cfg)
    jobs = []
    for tensor in reader.tensors:
        target = hf_name(tensor.name)
        shape = tuple(int(d) for d in reversed(tensor.shape.tolist()))
        if expected.get(target) != shape:
            raise ValueError(
                f"GGUF tensor {tensor.name} has shape {shape}, the config implies "
                f"{expected.get(target)}"
            )
        jobs.append((target, tensor.data, tensor.tensor_type, shape))
    missing = set(expected) - {job[0] for job in jobs}
    if missing:
        raise ValueError(f"GGUF file lacks {len(missing)} tensors, e.g. {sorted(missing)[0]}")

    # numpy releases the GIL inside dequantization, so one thread per core overlaps most of it.
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        arrays = pool.map(lambda job: _decode(job[1], job[2], job[3], keep_quantized), jobs)
        weights = {job[0]: array for job, array in zip(jobs, arrays)}
    for i in range(cfg.num_layers):
        for proj, heads in (("q_proj", cfg.num_heads), ("k_proj", cfg.num_kv_heads)):
            key = f"model.layers.{i}.self_attn.{proj}.weight"
            weights[key] = _unpermute(weights[key], heads)
    chat_template = meta.get("tokenizer.chat_template")
    return LoadedModel(
        cfg, weights, tokenizer, chat_template if isinstance(chat_template, str) else None
    )
