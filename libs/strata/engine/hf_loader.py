"""Loading a Hugging Face checkpoint folder (Llama, Qwen2, Mistral) into the engine's layout.

A folder as `save_pretrained` writes it:

    config.json                      architecture and shapes -> ModelConfig
    model.safetensors                weights, already in HF LlamaForCausalLM names
      or model.safetensors.index.json + model-0000k-of-0000n.safetensors
    tokenizer.json                   byte-level BPE (strata.engine.bpe_tokenizer)
    tokenizer_config.json            special tokens, chat template (or chat_template.jinja)
    generation_config.json           optional: the end-of-sequence ids generation stops on

Qwen2 and Mistral share Llama's decoder; Qwen2 adds q/k/v biases. What the engine's model cannot
do (sliding-window attention, rope types other than linear and llama3, biases on o_proj or the
MLP) is refused with the reason, never silently approximated.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch

from strata.engine.bpe_tokenizer import BpeTokenizer
from strata.engine.config import ModelConfig
from strata.engine.gguf_loader import weight_shapes
from strata.engine.loaded import LoadedModel
from strata.engine.model import fused_groups
from strata.engine.safetensors_reader import Entry, SafetensorsFile

SUPPORTED_ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM")
_MODEL_TYPES = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
}
_ROPE_TYPES = ("default", "linear", "llama3")
_REQUIRED_KEYS = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "max_position_embeddings",
)
# Old Llama exports store RoPE's inverse frequencies, which the model recomputes from the config.
_RECOMPUTED_SUFFIXES = ("rotary_emb.inv_freq",)


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.is_file() else {}


def _architecture(raw: dict[str, Any]) -> str:
    archs = raw.get("architectures") or []
    model_type = raw.get("model_type")
    if archs:
        arch = archs[0]
    else:
        arch = None if model_type is None else _MODEL_TYPES.get(model_type, model_type)
    if arch not in SUPPORTED_ARCHITECTURES:
        raise ValueError(
            f"architecture {arch!r} is not supported; supported: "
            f"{', '.join(SUPPORTED_ARCHITECTURES)}"
        )
    return arch


def _rope(raw: dict[str, Any]) -> tuple[float, dict | None]:
    """(rope_theta, rope_scaling) from transformers 5's `rope_parameters` or 4's top-level keys."""
    params = dict(raw.get("rope_parameters") or raw.get("rope_scaling") or {})
    if any(isinstance(v, dict) for v in params.values()):
        raise ValueError(
            "per-layer-type rope_parameters are not supported: the engine applies "
            "one rotary embedding to every layer"
        )
    theta = float(params.pop("rope_theta", raw.get("rope_theta", 10000.0)))
    kind = params.get("rope_type", params.get("type", "default"))
    if kind not in _ROPE_TYPES:
        raise ValueError(
            f"rope scaling type {kind!r} is not supported; supported: {', '.join(_ROPE_TYPES)}"
        )
    if kind == "default":
        return theta, None
    params["rope_type"] = kind
    if kind == "llama3":
        # transformers falls back to the context length when the checkpoint omits it
        params.setdefault("original_max_position_embeddings", raw["max_position_embeddings"])
    return theta, params


def _check_supported(raw: dict[str, Any], arch: str) -> None:
    if raw.get("hidden_act", "silu") != "silu":
        raise ValueError(
            f"hidden_act {raw['hidden_act']!r} is not supported; the engine's MLP is SwiGLU (silu)"
        )
    if raw.get("mlp_bias"):
        raise ValueError("mlp_bias=true is not supported: the engine's MLP has no biases")
    if arch != "Qwen2ForCausalLM" and raw.get("attention_bias"):
        raise ValueError(
            f"attention_bias=true is not supported for {arch}: it also biases "
            "o_proj, which the engine's attention lacks"
        )
    window = raw.get("sliding_window")
    layer_types = raw.get("layer_types")
    if layer_types is not None:
        slides = "sliding_attention" in layer_types
    elif arch == "Qwen2ForCausalLM":
        # Qwen2 slides only with use_sliding_window, and only from layer max_window_layers on
        slides = (
            bool(raw.get("use_sliding_window"))
            and raw.get("max_window_layers", 28) < raw["num_hidden_layers"]
        )
    else:
        slides = True
    context = raw["max_position_embeddings"]
    if window is not None and slides and window < context:
        raise ValueError(
            f"sliding_window {window} is smaller than max_position_embeddings "
            f"{context}, and the engine has no sliding-window attention; set "
            f"max_position_embeddings to at most {window} in config.json to serve "
            "this model with full attention"
        )


def _eos_list(value: int | list[int] | None) -> list[int]:
    if value is None:
        return []
    return [int(value)] if isinstance(value, int) else [int(v) for v in value]


def _config(raw: dict[str, Any], name: str) -> ModelConfig:
    arch = _architecture(raw)
    missing = [k for k in _REQUIRED_KEYS if raw.get(k) is None]
    if missing:
        raise ValueError(f"config.json lacks {', '.join(missing)}; the checkpoint is incomplete")
    _check_supported(raw, arch)
    theta, scaling = _rope(raw)
    heads = raw["num_attention_heads"]
    return ModelConfig(
        name=name,
        vocab_size=raw["vocab_size"],
        hidden_size=raw["hidden_size"],
        intermediate_size=raw["intermediate_size"],
        num_layers=raw["num_hidden_layers"],
        num_heads=heads,
        num_kv_heads=raw.get("num_key_value_heads") or heads,
        head_dim=raw.get("head_dim") or 0,
        rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
        rope_theta=theta,
        rope_scaling=scaling,
        max_position_embeddings=raw["max_position_embeddings"],
        # the three architectures' configs all default to an untied head
        tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
        attention_bias=arch == "Qwen2ForCausalLM",
        bos_token_id=raw.get("bos_token_id"),
        eos_token_ids=tuple(_eos_list(raw.get("eos_token_id"))),
    )


def _expected_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    shapes = weight_shapes(cfg)
    if cfg.attention_bias:
        q, kv = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
        for i in range(cfg.num_layers):
            p = f"model.layers.{i}.self_attn."
            shapes.update(
                {p + "q_proj.bias": (q,), p + "k_proj.bias": (kv,), p + "v_proj.bias": (kv,)}
            )
    return shapes


def _safetensors_files(folder: Path) -> list[Path]:
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        files = [folder / n for n in names]
        for f in files:
            if not f.is_file():
                raise ValueError(
                    f"model.safetensors.index.json lists {f.name}, which is missing from {folder}"
                )
        return files
    single = folder / "model.safetensors"
    if single.is_file():
        return [single]
    raise ValueError(
        f"{folder} has neither model.safetensors nor model.safetensors.index.json; "
        "only safetensors checkpoints load (save with safe_serialization=True)"
    )


def _checkpoint_dtype(entries: dict[str, Entry]) -> torch.dtype:
    """The float dtype most of the checkpoint's bytes are in: what it is served in."""
    size: dict[torch.dtype, int] = {}
    for e in entries.values():
        if e.dtype.is_floating_point:
            size[e.dtype] = size.get(e.dtype, 0) + e.end - e.begin
    if not size:
        raise ValueError("the checkpoint holds no floating-point tensors")
    dtype = max(size, key=lambda d: size[d])
    return torch.float32 if dtype == torch.float64 else dtype


def _load_weights(folder: Path, cfg: ModelConfig) -> tuple[dict[str, torch.Tensor], torch.dtype]:
    """Every tensor the model needs, in the checkpoint's dtype, read straight from the files
    into their final buffers; each fused group (model.fused_groups) shares one buffer, its
    parts being row views of it. Also returns that dtype."""
    expected = _expected_shapes(cfg)
    where: dict[str, SafetensorsFile] = {}
    for file in map(SafetensorsFile, _safetensors_files(folder)):
        for key, entry in file.entries.items():
            # some tied checkpoints store a copy of the embedding as the head
            if key.endswith(_RECOMPUTED_SUFFIXES) or (
                key == "lm_head.weight" and cfg.tie_word_embeddings
            ):
                continue
            if key not in expected:
                raise ValueError(
                    f"checkpoint tensor {key!r} has no place in this model; "
                    "its config.json does not describe these weights"
                )
            if entry.shape != expected[key]:
                raise ValueError(
                    f"checkpoint tensor {key} has shape {entry.shape}, config.json "
                    f"implies {expected[key]}"
                )
            where[key] = file
    missing = [k for k in expected if k not in where]
    if missing:
        raise ValueError(
            f"checkpoint lacks {len(missing)} of the model's {len(expected)} "
            f"tensors, e.g. {missing[0]!r}"
        )
    dtype = _checkpoint_dtype({k: f.entries[k] for k, f in where.items()})

    def keep(key: str) -> torch.dtype:  # float tensors in the served dtype, others as stored
        stored = where[key].entries[key].dtype
        return dtype if stored.is_floating_point else stored

    weights: dict[str, torch.Tensor] = {}
    for group in fused_groups(cfg):
        rows = [expected[k][0] for k in group]
        buffer = torch.empty((sum(rows), *expected[group[0]][1:]), dtype=keep(group[0]))
        start = 0
        for key, n in zip(group, rows):
            weights[key] = buffer[start : start + n]
            where[key].read_into(key, weights[key])
            start += n
    for key in expected:
        if key not in weights:
            weights[key] = torch.empty(expected[key], dtype=keep(key))
            where[key].read_into(key, weights[key])
    return weights, dtype


def _chat_template_source(folder: Path) -> str | None:
    """The template transformers would use: tokenizer_config.json's, else chat_template.jinja."""
    template = _read_json(folder / "tokenizer_config.json").get("chat_template")
    if isinstance(template, list):  # named templates: [{"name": "default", "template": ...}]
        template = next((t["template"] for t in template if t.get("name") == "default"), None)
    jinja = folder / "chat_template.jinja"
    if template is None and jinja.is_file():
        template = jinja.read_text()
    return template


def load_hf_dir(path: str | os.PathLike[str], name: str | None = None) -> LoadedModel:
    """Load a Hugging Face checkpoint folder; `name` defaults to the folder's name."""
    folder = Path(path)
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise ValueError(f"{folder} has no config.json; a Hugging Face checkpoint folder needs one")
    cfg = _config(json.loads(config_path.read_text()), name or folder.resolve().name)
    weights, dtype = _load_weights(folder, cfg)
    tokenizer = BpeTokenizer.from_tokenizer_json(folder)
    if tokenizer.vocab_size > cfg.vocab_size:
        raise ValueError(
            f"the tokenizer has {tokenizer.vocab_size} tokens but the model embeds "
            f"only {cfg.vocab_size}"
        )
    # generate() stops on generation_config.json's ids, falling back to config.json's; the
    # tokenizer's end-of-turn tokens stay stop tokens too.
    generation = _eos_list(_read_json(folder / "generation_config.json").get("eos_token_id"))
    eos = [*(generation or cfg.eos_token_ids), *tokenizer.eos_token_ids]
    cfg.eos_token_ids = tuple(dict.fromkeys(eos))
    tokenizer.eos_token_ids = cfg.eos_token_ids
    return LoadedModel(cfg, weights, tokenizer, _chat_template_source(folder), dtype)
