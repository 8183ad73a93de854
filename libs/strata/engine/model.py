"""A Llama-family decoder (RMSNorm, RoPE, grouped-query attention, SwiGLU) over a paged KV cache.

Weights use Hugging Face LlamaForCausalLM names, so every loader maps onto one layout. The
forward pass takes one flattened step of tokens from many sequences (see attention.py).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from strata.engine.attention import AttentionMetadata, paged_attention
from strata.engine.config import ModelConfig
from strata.engine.rope import RotaryCache, apply_rotary


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    dtype = x.dtype
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(dtype)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        h, q, kv = cfg.hidden_size, cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
        self.cfg = cfg
        self.input_layernorm = nn.Parameter(torch.ones(h))
        self.post_attention_layernorm = nn.Parameter(torch.ones(h))
        self.q_proj = nn.Linear(h, q, bias=cfg.attention_bias)
        self.k_proj = nn.Linear(h, kv, bias=cfg.attention_bias)
        self.v_proj = nn.Linear(h, kv, bias=cfg.attention_bias)
        self.o_proj = nn.Linear(q, h, bias=False)
        self.gate_proj = nn.Linear(h, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(h, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, h, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, kv: torch.Tensor,
                meta: AttentionMetadata) -> torch.Tensor:
        cfg = self.cfg
        t = x.shape[0]
        h = rms_norm(x, self.input_layernorm, cfg.rms_norm_eps)
        q = self.q_proj(h).view(t, cfg.num_heads, cfg.head_dim)
        k = self.k_proj(h).view(t, cfg.num_kv_heads, cfg.head_dim)
        v = self.v_proj(h).view(t, cfg.num_kv_heads, cfg.head_dim)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        attn = paged_attention(q, k, v, kv[0], kv[1], meta, cfg.head_dim ** -0.5)
        x = x + self.o_proj(attn.reshape(t, -1))
        h = rms_norm(x, self.post_attention_layernorm, cfg.rms_norm_eps)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class LlamaModel(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_layers))
        self.norm = nn.Parameter(torch.ones(cfg.hidden_size))
        self.lm_head = None if cfg.tie_word_embeddings else nn.Linear(
            cfg.hidden_size, cfg.vocab_size, bias=False)
        self.rotary: RotaryCache | None = None

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, kv_cache: torch.Tensor,
                meta: AttentionMetadata, logits_index: torch.Tensor) -> torch.Tensor:
        """Run one step; return logits [len(logits_index), vocab] for the chosen token rows.

        kv_cache: [layers, 2, num_blocks, block_size, kv_heads, head_dim].
        """
        if self.rotary is None:
            self.rotary = RotaryCache(self.cfg, input_ids.device, self.embed_tokens.weight.dtype)
        cos, sin = self.rotary.get(positions)
        x = self.embed_tokens(input_ids)
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, kv_cache[i], meta)
        x = rms_norm(x.index_select(0, logits_index), self.norm, self.cfg.rms_norm_eps)
        head = self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        return F.linear(x, head).float()

    def load_hf_weights(self, weights: dict[str, torch.Tensor]) -> None:
        """Copy weights named as in HF LlamaForCausalLM; every parameter must be present."""
        mapping = self._hf_names()
        missing = sorted(set(mapping) - set(weights))
        if missing:
            raise ValueError(f"checkpoint lacks {len(missing)} tensors, e.g. {missing[:3]}")
        with torch.no_grad():
            for name, param in mapping.items():
                src = weights[name]
                if tuple(src.shape) != tuple(param.shape):
                    raise ValueError(f"{name}: checkpoint shape {tuple(src.shape)} does not match "
                                     f"the config's {tuple(param.shape)}")
                param.copy_(src.to(param.dtype))

    def _hf_names(self) -> dict[str, torch.Tensor]:
        names: dict[str, torch.Tensor] = {"model.embed_tokens.weight": self.embed_tokens.weight,
                                          "model.norm.weight": self.norm}
        if self.lm_head is not None:
            names["lm_head.weight"] = self.lm_head.weight
        for i, layer in enumerate(self.layers):
            p = f"model.layers.{i}."
            names[p + "input_layernorm.weight"] = layer.input_layernorm
            names[p + "post_attention_layernorm.weight"] = layer.post_attention_layernorm
            for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
                names[p + f"self_attn.{proj}.weight"] = getattr(layer, proj).weight
                bias = getattr(layer, proj).bias
                if bias is not None:
                    names[p + f"self_attn.{proj}.bias"] = bias
            for proj in ("gate_proj", "up_proj", "down_proj"):
                names[p + f"mlp.{proj}.weight"] = getattr(layer, proj).weight
        return names


def build_model(cfg: ModelConfig, weights: dict[str, torch.Tensor], device: torch.device,
                dtype: torch.dtype) -> LlamaModel:
    with torch.device("meta"):
        model = LlamaModel(cfg)
    model = model.to_empty(device=device).to(dtype)
    model.load_hf_weights(weights)
    model.eval()
    return model
