"""A Llama-family decoder (RMSNorm, RoPE, grouped-query attention, SwiGLU) over a paged KV cache.

Weights use Hugging Face LlamaForCausalLM names, so every loader maps onto one layout. The
forward pass takes one flattened step of tokens from many sequences (see attention.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from strata.engine import kernels
from strata.engine.attention import (
    AttentionMetadata,
    load_rotary_kernel,
    paged_attention,
    rotate_and_store,
)
from strata.engine.config import ModelConfig
from strata.engine.packed_linear import Packs, row_class
from strata.engine.quant import (
    QuantEmbedding,
    QuantizedWeight,
    QuantLayer,
    QuantLinear,
    dequantize,
)
from strata.engine.rope import RotaryCache

Weights = Mapping[str, "torch.Tensor | QuantizedWeight"]


_NORM_SOURCE = Path(kernels.__file__).with_name("rms_norm.cpp")
_SWIGLU_SOURCE = Path(kernels.__file__).with_name("swiglu.cpp")
_LAYERS_SOURCE = Path(kernels.__file__).with_name("decode_layers.cpp")
_NATIVE_DTYPES = (torch.float32, torch.bfloat16)


def _native(x: torch.Tensor, source: Path, stem: str, namespace: str):
    """The C++ ops for `x`'s kind of tensor (a 2-D float32 or bfloat16 tensor on the CPU, where
    the kernels build), or None: the torch expression then computes the same."""
    if x.device.type != "cpu" or x.dim() != 2 or x.dtype not in _NATIVE_DTYPES:
        return None
    return kernels.load_extra(source, stem, namespace, f"strata {stem} kernel")


def load_kernels() -> None:
    """Build (or load from the cache) the RMSNorm, SwiGLU and decode-layers kernels now, so that
    no first compile lands on a step; a failure is logged once and leaves the torch expressions
    (the Python loop over the layers)."""
    kernels.load_extra(_NORM_SOURCE, "rms_norm", "strata_norm", "strata rms_norm kernel")
    kernels.load_extra(_SWIGLU_SOURCE, "swiglu", "strata_swiglu", "strata swiglu kernel")
    load_layers_kernel()


def load_layers_kernel():
    """torch.ops.strata_layers (kernels/decode_layers.cpp: a decode step's layers in one call),
    built or loaded from the cache, or None where it cannot be (a failure is logged once)."""
    return kernels.load_extra(
        _LAYERS_SOURCE, "decode_layers", "strata_layers", "strata decode layers kernel"
    )


def _native_norm(x: torch.Tensor, weight: torch.Tensor):
    """The RMSNorm ops for x and weight where the kernel takes them (same dtype, or a float32
    x with a bfloat16 weight), else None."""
    mixed = x.dtype == torch.float32 and weight.dtype == torch.bfloat16
    if weight.dtype != x.dtype and not mixed:
        return None
    return _native(x, _NORM_SOURCE, "rms_norm", "strata_norm")


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """weight * (x * rsqrt(mean(x^2) + eps)) over the last dimension, computed in float32 and
    rounded to the weight's dtype before the weight multiplies it; the result has the weight's
    dtype. One fused C++ pass on the CPU where the kernel builds (kernels/rms_norm.cpp: the same
    expression, summed in another order)."""
    ops = _native_norm(x, weight)
    if ops is not None:
        return ops.rms_norm(x.contiguous(), weight, eps)
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(weight.dtype)


def add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> torch.Tensor:
    """x += residual (in place, rounded to x's dtype), then rms_norm(x): one C++ pass where the
    kernel builds. The residual has the weight's dtype."""
    ops = _native_norm(x, weight)
    if ops is not None and x.is_contiguous():
        return ops.add_rms_norm(x, residual.contiguous(), weight, eps)
    x.add_(residual)
    return rms_norm(x, weight, eps)


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up from the fused gate|up projection [T, 2 * inter]: one C++ pass where the
    kernel builds (kernels/swiglu.cpp; its exp is within 2.3e-7 of torch's)."""
    ops = _native(gate_up, _SWIGLU_SOURCE, "swiglu", "strata_swiglu")
    if ops is not None:
        return ops.silu_mul(gate_up.contiguous())
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate).mul_(up)


# How kernels/decode_layers.cpp multiplies by one projection: (kind, the tensor it multiplies
# with, the bias); the kinds are packed_linear's codes, or a QuantLinear's bits.
Route = tuple[int, torch.Tensor, "torch.Tensor | None"]


def _route(
    packs: Packs, name: str, layer: nn.Module, dtype: torch.dtype, rows: int
) -> Route | None:
    """How _project multiplies `rows` rows in `dtype` by `layer`, or None where no native op
    does it (a QuantLinear without its kernel)."""
    if isinstance(layer, QuantLinear):
        return (layer.bits, layer.data, None) if layer.native else None
    linear = cast(nn.Linear, layer)
    kind, weight = packs.route(name, dtype, rows, linear.weight, linear.bias)
    return kind, weight, linear.bias


def _project(
    packs: Packs, name: str, x: torch.Tensor, layer: nn.Module, float_sums: bool = False
) -> torch.Tensor:
    """x through a linear layer: a QuantLinear computes itself, a float one goes through `packs`
    (float_sums: as QuantLayer.matmul and Packs.linear take it)."""
    if isinstance(layer, QuantLinear):
        return layer.matmul(x, float_sums)  # not through nn.Module.__call__: it costs more
    linear = cast(nn.Linear, layer)
    return packs.linear(name, x, linear.weight, linear.bias, float_sums)


class DecoderLayer(nn.Module):
    """q/k/v and gate/up projections are fused into one matrix each: fewer, larger matmuls.
    Each projection is an nn.Linear or, for a quantized checkpoint, a QuantLinear."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        h, q, kv = cfg.hidden_size, cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
        self.cfg = cfg
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
        qkv = _project(p, "qkv", h, self.qkv_proj)
        # q and k rotated together, k and v stored in the cache: one pass (rotate_and_store)
        q = rotate_and_store(qkv, cos, sin, kv[0], kv[1], meta, cfg.num_heads)
        attn = paged_attention(q, None, None, kv[0], kv[1], meta, cfg.head_dim**-0.5, layer)
        h = add_rms_norm(
            x,
            _project(p, "o", attn.reshape(t, -1), self.o_proj),
            self.post_attention_layernorm,
            cfg.rms_norm_eps,
        )
        gate_up = _project(p, "gate_up", h, self.gate_up_proj)
        return x.add_(_project(p, "down", silu_mul(gate_up), self.down_proj))

    def routes(self, dtype: torch.dtype, rows: int) -> list[Route] | None:
        """The four projections (q|k|v, o, gate|up, down) as forward multiplies `rows` rows in
        `dtype` by them, or None where one has no native route."""
        out = [
            _route(self.packs, name, layer, dtype, rows)
            for name, layer in (
                ("qkv", self.qkv_proj),
                ("o", self.o_proj),
                ("gate_up", self.gate_up_proj),
                ("down", self.down_proj),
            )
        ]
        return None if any(r is None for r in out) else cast(list[Route], out)


@dataclass(slots=True)
class DecodePlan:
    """A decode step's arguments to kernels/decode_layers.cpp for one model and row class
    (packed_linear.row_class): what every layer multiplies with, and the float tensors whose
    version counters, unchanged since, keep it valid (a packed copy is of a weight as it was)."""

    norms: list[torch.Tensor]
    weights: list[torch.Tensor]
    biases: list[torch.Tensor | None]
    kinds: list[int]
    watched: list[torch.Tensor]
    versions: list[int]

    def valid(self) -> bool:
        return [t._version for t in self.watched] == self.versions


class LlamaModel(nn.Module):
    """The decoder stack. Whatever dtype the weights compute in, the residual stream (the hidden
    state the layers add into) is float32, as llama.cpp keeps it: each norm rounds its output to
    the weights' dtype for the projections, and each projection's output is added into the
    float32 stream. A bfloat16 stream loses about 2-3 bits of each layer's sum, enough to flip
    the greedy token of a small model where its float32 margin is a tenth of a logit."""

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
        # a decode step's layers in one native call where it applies (_decode_layers); the
        # Python loop computes the same, bit for bit
        self.layer_kernel = True
        self._plans: dict[int, DecodePlan | None] = {}  # by packed_linear.row_class

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
            self.rotary = RotaryCache(self.cfg, input_ids.device, self.norm.dtype)
        cos, sin = self.rotary.get(positions)
        x = self.embed_tokens(input_ids).float()
        if not self._decode_layers(x, cos, sin, kv_cache, meta):
            for i, layer in enumerate(self.layers):
                x = layer(x, cos, sin, kv_cache[i], meta, i)
        x = rms_norm(x.index_select(0, logits_index), self.norm, self.cfg.rms_norm_eps)
        # float32 where the head's kernel keeps float32 sums (a few rows), else in the model's
        # dtype: the sampler converts rows it must
        if self.lm_head is not None:
            return _project(self.packs, "head", x, self.lm_head, float_sums=True)
        if isinstance(self.embed_tokens, QuantEmbedding):
            return self.embed_tokens.matmul(x, float_sums=True)
        return self.packs.linear("head", x, self.embed_tokens.weight, float_sums=True)

    def _decode_layers(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        kv_cache: torch.Tensor,
        meta: AttentionMetadata,
    ) -> bool:
        """Every layer of a step in one native call (kernels/decode_layers.cpp), x updated in
        place, where the step is all decodes over the fused CPU attention kernel without the
        sparse path and every op has its native kernel; False, having done nothing, otherwise."""
        if not (
            self.layer_kernel
            and meta.native
            and meta.sparse is None
            and len(meta.groups) == 1
            and meta.groups[0].queries == 1
            and x.device.type == "cpu"
        ):
            return False
        ops = load_layers_kernel()
        if ops is None:
            return False
        rows = row_class(x.shape[0])
        plan = self._plans.get(rows)
        if plan is None or not plan.valid():
            plan = self._plans[rows] = self._plan(x.shape[0])
        if plan is None:
            return False
        g = meta.groups[0]
        cfg = self.cfg
        ops.decode_layers(
            x,
            plan.norms,
            plan.weights,
            plan.biases,
            plan.kinds,
            cos,
            sin,
            kv_cache,
            meta.slot_mapping,
            g.token_index,
            g.block_tables,
            g.context_lens,
            cfg.num_heads,
            cfg.head_dim**-0.5,
            cfg.rms_norm_eps,
        )
        return True

    def _plan(self, rows: int) -> DecodePlan | None:
        """The DecodePlan for `rows` rows, or None where some op of the layers has no native
        kernel here (the Python loop then runs, through the torch expressions)."""
        dtype = self.norm.dtype
        x = torch.empty((rows, self.cfg.hidden_size), dtype=torch.float32)
        if (
            dtype not in _NATIVE_DTYPES
            or _native_norm(x, self.norm) is None
            or _native(x.to(dtype), _SWIGLU_SOURCE, "swiglu", "strata_swiglu") is None
            or load_rotary_kernel() is None
        ):
            return None
        plan = DecodePlan([], [], [], [], [], [])
        for layer in cast(Iterable[DecoderLayer], self.layers):
            routes = layer.routes(dtype, rows)
            if routes is None:
                return None
            plan.norms += [layer.input_layernorm, layer.post_attention_layernorm]
            for kind, weight, bias in routes:
                plan.kinds.append(kind)
                plan.weights.append(weight)
                plan.biases.append(bias)
            for proj in (layer.qkv_proj, layer.o_proj, layer.gate_up_proj, layer.down_proj):
                if isinstance(proj, nn.Linear):
                    plan.watched += [t for t in (proj.weight, proj.bias) if t is not None]
        plan.watched += plan.norms
        plan.versions = [t._version for t in plan.watched]
        return plan

    def forget_plans(self) -> None:
        """Drop the decode plans: call it after replacing (not changing in place) a weight."""
        self._plans.clear()

    def _linear_sources(self) -> list[tuple[nn.Module, str, list[str]]]:
        """(owner, attribute, the HF tensors stacked into it) of every linear layer."""
        return [
            (self if i is None else self.layers[i], attr, names)
            for i, attr, names in _linear_parts(self.cfg)
        ]

    def adopt_quantized(
        self, weights: Weights, dtype: torch.dtype
    ) -> dict[QuantLayer, QuantizedWeight]:
        """Swap in a QuantLinear (QuantEmbedding) for every linear layer (the embedding) whose
        checkpoint tensors are all quantized in one format, before the model is materialized, so
        no float copy of them is ever allocated. Returns each new layer with the weight to `set`
        once the model has its dtype. A layer with a bias, or whose parts differ in format,
        stays float (its parts are widened at load)."""
        adopted: dict[QuantLayer, QuantizedWeight] = {}
        for owner, attr, names in self._linear_sources():
            parts = [weights.get(n) for n in names]
            quantized = [p for p in parts if isinstance(p, QuantizedWeight)]
            if (
                len(quantized) == len(parts)
                and len({q.bits for q in quantized}) == 1
                and getattr(owner, attr).bias is None
            ):
                layer = QuantLinear(dtype)
                setattr(owner, attr, layer)
                adopted[layer] = QuantizedWeight.stack(quantized)
        embed = weights.get("model.embed_tokens.weight")
        if isinstance(embed, QuantizedWeight):
            table = QuantEmbedding(dtype)
            self.embed_tokens = table  # type: ignore[assignment]
            adopted[table] = embed
        return adopted

    def load_hf_weights(self, weights: Weights, skip: AbstractSet[str] = frozenset()) -> None:
        """Copy the float layers' weights, named as in HF LlamaForCausalLM, except those in
        `skip` (already the parameters themselves); every tensor they need must be present (a
        quantized one is widened here)."""
        self.forget_plans()
        targets = self._hf_targets()
        missing = sorted(set(targets) - set(weights))
        if missing:
            raise ValueError(f"checkpoint lacks {len(missing)} tensors, e.g. {missing[:3]}")
        with torch.no_grad():
            for name, (param, start, rows) in targets.items():
                if name in skip:
                    continue
                src = weights[name]
                if isinstance(src, QuantizedWeight):
                    src = dequantize(src)
                want = (rows, *param.shape[1:]) if rows else tuple(param.shape)
                if tuple(src.shape) != want:
                    raise ValueError(
                        f"{name}: checkpoint shape {tuple(src.shape)} does not match "
                        f"the config's {want}"
                    )
                dst = param[start : start + rows] if rows else param
                dst.copy_(src.to(param.dtype))

    def _hf_targets(self) -> dict[str, tuple[torch.Tensor, int, int]]:
        """HF tensor name -> (our float parameter, first row, rows); rows 0 = the whole
        parameter. Quantized layers (adopt_quantized) are not targets."""
        out: dict[str, tuple[torch.Tensor, int, int]] = {"model.norm.weight": (self.norm, 0, 0)}
        if isinstance(self.embed_tokens, nn.Embedding):
            out["model.embed_tokens.weight"] = (self.embed_tokens.weight, 0, 0)
        if isinstance(self.lm_head, nn.Linear):
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
            if isinstance(layer.o_proj, nn.Linear):
                out[p + "self_attn.o_proj.weight"] = (layer.o_proj.weight, 0, 0)
            if isinstance(layer.qkv_proj, nn.Linear):
                qkv = layer.qkv_proj
                for name, start, rows in (
                    ("q_proj", 0, q),
                    ("k_proj", q, kv),
                    ("v_proj", q + kv, kv),
                ):
                    out[p + f"self_attn.{name}.weight"] = (qkv.weight, start, rows)
                    if qkv.bias is not None:
                        out[p + f"self_attn.{name}.bias"] = (qkv.bias, start, rows)
            if isinstance(layer.gate_up_proj, nn.Linear):
                out[p + "mlp.gate_proj.weight"] = (layer.gate_up_proj.weight, 0, inter)
                out[p + "mlp.up_proj.weight"] = (layer.gate_up_proj.weight, inter, inter)
            if isinstance(layer.down_proj, nn.Linear):
                out[p + "mlp.down_proj.weight"] = (layer.down_proj.weight, 0, 0)
        return out

    def hf_tensor_shapes(self) -> dict[str, tuple[int, ...]]:
        """The HF checkpoint's tensor names and shapes this model expects."""
        return {
            name: ((rows, *param.shape[1:]) if rows else tuple(param.shape))
            for name, (param, _, rows) in self._hf_targets().items()
        }


def _linear_parts(cfg: ModelConfig) -> list[tuple[int | None, str, list[str]]]:
    """(decoder layer index, or None for the model itself; attribute; the HF weight tensors
    stacked into it, in row order) of every linear layer: the one statement of the fusion."""
    out: list[tuple[int | None, str, list[str]]] = []
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}."
        out += [
            (i, "qkv_proj", [p + f"self_attn.{x}_proj.weight" for x in "qkv"]),
            (i, "o_proj", [p + "self_attn.o_proj.weight"]),
            (i, "gate_up_proj", [p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"]),
            (i, "down_proj", [p + "mlp.down_proj.weight"]),
        ]
    if not cfg.tie_word_embeddings:
        out.append((None, "lm_head", ["lm_head.weight"]))
    return out


def fused_groups(cfg: ModelConfig) -> list[list[str]]:
    """The HF tensors the model stacks into one matrix (q|k|v, their biases, gate|up), in row
    order: a loader that reads each group into one buffer, and hands the parts out as views of
    it, lets build_model use the buffer as the parameter without a copy."""
    groups = [names for _, _, names in _linear_parts(cfg) if len(names) > 1]
    if cfg.attention_bias:
        groups += [
            [n.replace(".weight", ".bias") for n in names]
            for _, attr, names in _linear_parts(cfg)
            if attr == "qkv_proj"
        ]
    return groups


def _shareable(
    param: torch.Tensor,
    parts: list[tuple[torch.Tensor | QuantizedWeight, int, int]],
    dtype: torch.dtype,
    device: torch.device,
) -> torch.Tensor | None:
    """The checkpoint tensor that can be `param` as it is (same dtype, device and layout; for a
    stacked parameter, one buffer whose row ranges are the parts), or None."""
    tensors = [src for src, _, _ in parts if isinstance(src, torch.Tensor)]
    if len(tensors) != len(parts):
        return None
    base = tensors[0]._base
    if len(parts) == 1 and parts[0][2] == 0:
        whole = tensors[0]
    elif base is None or any(t._base is not base for t in tensors):
        return None
    else:
        whole = base
        row_bytes = whole.stride(0) * whole.element_size() if whole.dim() else 0
        for t, (_, start, rows) in zip(tensors, parts):
            if t.shape[0] != rows or t.data_ptr() != whole.data_ptr() + start * row_bytes:
                return None
    if (
        whole.dtype != dtype
        or whole.device != device
        or not whole.is_contiguous()
        or tuple(whole.shape) != tuple(param.shape)
    ):
        return None
    return whole


def _materialize(
    model: LlamaModel, weights: Weights, device: torch.device, dtype: torch.dtype
) -> set[str]:
    """Give every float parameter of a meta-device model real memory in `dtype`: the checkpoint's
    own tensor where it can serve as is (no copy, and no second copy in memory), an empty one
    otherwise. Returns the HF names whose tensors became parameters."""
    targets = model._hf_targets()
    by_param: dict[int, list[tuple[str, int, int]]] = {}
    for name, (param, start, rows) in targets.items():
        by_param.setdefault(id(param), []).append((name, start, rows))
    shared: dict[int, torch.Tensor] = {}
    for param, _, _ in targets.values():
        key = id(param)
        if key in shared or not all(n in weights for n, _, _ in by_param[key]):
            continue
        parts = [(weights[n], start, rows) for n, start, rows in by_param[key]]
        whole = _shareable(param, parts, dtype, device)
        if whole is not None:
            shared[key] = whole
    adopted: set[str] = set()
    for module in model.modules():
        for attr, meta in list(module._parameters.items()):
            if meta is None:
                continue
            data = shared.get(id(meta))
            if data is None:
                data = torch.empty(meta.shape, dtype=dtype, device=device)
            else:
                adopted.update(n for n, _, _ in by_param[id(meta)])
            module._parameters[attr] = nn.Parameter(data, requires_grad=False)
    return adopted


def build_model(
    cfg: ModelConfig,
    weights: Weights,
    device: torch.device,
    dtype: torch.dtype,
    keep_quantized: bool = True,
) -> LlamaModel:
    """The model on `device` computing in `dtype`. Quantized checkpoint tensors stay quantized
    (QuantLinear, QuantEmbedding) when `keep_quantized` and the device is the CPU; otherwise
    they are widened to `dtype` like every float tensor. A
    float checkpoint tensor already in `dtype` on `device` becomes the parameter itself (shared
    with `weights`, not copied)."""
    with torch.device("meta"):
        model = LlamaModel(cfg)
        adopted = (
            model.adopt_quantized(weights, dtype) if keep_quantized and device.type == "cpu" else {}
        )
    shared = _materialize(model, weights, device, dtype)
    for layer, weight in adopted.items():
        layer.set(weight)
    model.load_hf_weights(weights, skip=shared)
    model.eval()
    return model
