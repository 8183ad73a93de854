"""A Llama-family decoder (RMSNorm, RoPE, grouped-query attention, SwiGLU) over a paged KV cache.

Weights use Hugging Face LlamaForCausalLM names, so every loader maps onto one layout. The
forward pass takes one flattened step of tokens from many sequences (see attention.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from strata.engine.attention import AttentionMetadata, paged_attention
from strata.engine.config import ModelConfig
from strata.engine.packed_linear import Packs
from strata.engine.rope import RotaryCache, apply_rotary


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    dtype = x.dtype
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(dtype)


class DecoderLayer(nn.Module):
    """q/k/v and gate/up projections are fused into one matrix each: fewer, larger matmuls."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        h, q, kv = cfg.hidden_size, cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
        self.cfg = cfg
        self.q_size, self.kv_size = q, kv
        self.input_layernorm = nn.Parameter(torch.ones(h))
        self.post_attention_layernorm = nn.Parameter(torch.ones(h))
        self.qkv_proj = nn.Linear(h, q + 2 * kv, bias=cfg.attention_bias)
        self.o_proj = nn.Linear(q, h, bias=False)
        self.gate_up_proj = nn.Linear(h, 2 * cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, h, bias=False)
        self.packs = Packs()  # bfloat16 weights laid out for oneDNN (packed_linear.py)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        kv: torch.Tensor,
        meta: AttentionMetadata,
        layer: int = 0,
    ) -> torch.Tensor:
        cfg = self.cfg
        t = x.shape[0]
        h = rms_norm(x, self.input_layernorm, cfg.rms_norm_eps)
        p = self.packs
        qkv = p.linear("qkv", h, self.qkv_proj.weight, self.qkv_proj.bias)
        heads = cfg.num_heads + cfg.num_kv_heads
        # q and k rotate together: one pass over [tokens, heads + kv_heads, head_dim]
        qk = apply_rotary(
            qkv[:, : self.q_size + self.kv_size].view(t, heads, cfg.head_dim), cos, sin
        )
        q, k = qk.split((cfg.num_heads, cfg.num_kv_heads), dim=1)
        v = qkv[:, self.q_size + self.kv_size :].view(t, cfg.num_kv_heads, cfg.head_dim)
        attn = paged_attention(q, k, v, kv[0], kv[1], meta, cfg.head_dim**-0.5, layer)
        x = x + p.linear("o", attn.reshape(t, -1), self.o_proj.weight)
        h = rms_norm(x, self.post_attention_layernorm, cfg.rms_norm_eps)
        gate, up = p.linear("gate_up", h, self.gate_up_proj.weight).chunk(2, dim=-1)
        return x.add_(p.linear("down", F.silu(gate).mul_(up), self.down_proj.weight))


class LlamaModel(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_layers))
        self.norm = nn.Parameter(torch.ones(cfg.hidden_size))
        self.lm_head = (
            None
            if cfg.tie_word_embeddings
            else nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        )
        self.rotary: RotaryCache | None = None
        self.packs = Packs()

    @torch.inference_mode()
    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        kv_cache: torch.Tensor,
        meta: AttentionMetadata,
        logits_index: torch.Tensor,
    ) -> torch.Tensor:
        """Run one step; return logits [len(logits_index), vocab] for the chosen token rows.

        kv_cache: the engine's whole pool, [layers, 2 (k|v), kv_heads, num_blocks, block_size,
        head_dim] (attention.kv_cache_shape); layer i reads kv_cache[i].
        """
        if self.rotary is None:
            self.rotary = RotaryCache(self.cfg, input_ids.device, self.embed_tokens.weight.dtype)
        cos, sin = self.rotary.get(positions)
        x = self.embed_tokens(input_ids)
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, kv_cache[i], meta, i)
        x = rms_norm(x.index_select(0, logits_index), self.norm, self.cfg.rms_norm_eps)
        head = self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        # in the model's dtype: the sampler converts rows it must
        return self.packs.linear("head", x, head)

    def load_hf_weights(self, weights: dict[str, torch.Tensor]) -> None:
        """Copy weights named as in HF LlamaForCausalLM; every tensor must be present."""
        targets = self._hf_targets()
        missing = sorted(set(targets) - set(weights))
        if missing:
            raise ValueError(f"checkpoint lacks {len(missing)} tensors, e.g. {missing[:3]}")
        with torch.no_grad():
            for name, (param, start, rows) in targets.items():
                src = weights[name]
                want = (rows, *param.shape[1:]) if rows else tuple(param.shape)
                if tuple(src.shape) != want:
                    raise ValueError(
                        f"{name}: checkpoint shape {tuple(src.shape)} does not match "
                        f"the config's {want}"
                    )
                dst = param[start : start + rows] if rows else param
                dst.copy_(src.to(param.dtype))

    def _hf_targets(self) -> dict[str, tuple[torch.Tensor, int, int]]:
        """HF tensor name -> (our parameter, first row, rows); rows 0 = the whole parameter."""
        out: dict[str, tuple[torch.Tensor, int, int]] = {
            "model.embed_tokens.weight": (self.embed_tokens.weight, 0, 0),
            "model.norm.weight": (self.norm, 0, 0),
        }
        if self.lm_head is not None:
            out["lm_head.weight"] = (self.lm_head.weight, 0, 0)
        cfg = self.cfg
        q, kv, inter = (
            cfg.num_heads * cfg.head_dim,
            cfg.num_kv_heads * cfg.head_dim,
            cfg.intermediate_size,
        )
        layers = cast(Iterable[DecoderLayer], self.layers)  # __init__ holds only DecoderLayers
        for i, layer in enumerate(layers):
            p = f"model.layers.{i}."
            out[p + "input_layernorm.weight"] = (layer.input_layernorm, 0, 0)
            out[p + "post_attention_layernorm.weight"] = (layer.post_attention_layernorm, 0, 0)
            out[p + "self_attn.o_proj.weight"] = (layer.o_proj.weight, 0, 0)
            for name, start, rows in (("q_proj", 0, q), ("k_proj", q, kv), ("v_proj", q + kv, kv)):
                out[p + f"self_attn.{name}.weight"] = (layer.qkv_proj.weight, start, rows)
                if layer.qkv_proj.bias is not None:
                    out[p + f"self_attn.{name}.bias"] = (layer.qkv_proj.bias, start, rows)
            out[p + "mlp.gate_proj.weight"] = (layer.gate_up_proj.weight, 0, inter)
            out[p + "mlp.up_proj.weight"] = (layer.gate_up_proj.weight, inter, inter)
            out[p + "mlp.down_proj.weight"] = (layer.down_proj.weight, 0, 0)
        return out

    def hf_tensor_shapes(self) -> dict[str, tuple[int, ...]]:
        """The HF checkpoint's tensor names and shapes this model expects."""
        return {
            name: ((rows, *param.shape[1:]) if rows else tuple(param.shape))
            for name, (param, _, rows) in self._hf_targets().items()
        }


def build_model(
    cfg: ModelConfig, weights: dict[str, torch.Tensor], device: torch.device, dtype: torch.dtype
) -> LlamaModel:
    with torch.device("meta"):
        model = LlamaModel(cfg)
    model = model.to_empty(device=device).to(dtype)
    model.load_hf_weights(weights)
    model.eval()
    return model
