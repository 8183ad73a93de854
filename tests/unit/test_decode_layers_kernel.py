"""kernels/decode_layers.cpp runs a decode step's layers in one call: the same ops as the Python
loop over DecoderLayer.forward, so the logits and the KV cache it writes equal the loop's bit for
bit, for float32 and bfloat16 weights (with and without a q|k|v bias) and for weights kept
quantized, at one row and at several; a step it does not cover (a prefill chunk, the sparse path)
runs the loop; a weight changed in place is seen at the next step."""

from __future__ import annotations

from dataclasses import replace

import gguf
import pytest
import torch

from strata.engine import kernels
from strata.engine.attention import AttentionMetadata, SeqSlice, kv_cache_shape
from strata.engine.byte_tokenizer import ByteTokenizer
from strata.engine.engine import EngineConfig, LLMEngine
from strata.engine.gguf_loader import load_gguf
from strata.engine.loaded import LoadedModel
from strata.engine.model import DecoderLayer, LlamaModel, load_layers_kernel
from strata.engine.quant import QuantLinear
from tests.engine_helpers import tiny_loaded
from tests.unit.test_gguf_loader import write_tiny_gguf

BLOCK = 4

pytestmark = pytest.mark.skipif(
    kernels.load() is None or load_layers_kernel() is None,
    reason="the CPU kernels do not build here",
)


def _biased() -> LoadedModel:
    """tiny_loaded's model with a q|k|v bias (as Qwen2 has)."""
    base = tiny_loaded(seed=3)
    cfg = replace(base.config, attention_bias=True)
    with torch.device("meta"):
        shapes = LlamaModel(cfg).hf_tensor_shapes()
    gen = torch.Generator().manual_seed(4)
    weights = dict(base.weights)
    for name, shape in shapes.items():
        if name not in weights:
            weights[name] = torch.randn(shape, generator=gen) * 0.2
    return LoadedModel(cfg, weights, ByteTokenizer(cfg.vocab_size))


def _model(kind: str, tmp_path) -> LlamaModel:
    torch.set_num_threads(1)
    config = EngineConfig(block_size=BLOCK, num_blocks=32)
    if kind in ("q4_1", "q8_0"):
        path = tmp_path / "m.gguf"
        write_tiny_gguf(path, qtype=getattr(gguf.GGMLQuantizationType, kind.upper()))
        model = LLMEngine(load_gguf(path, keep_quantized=True), config).model
        assert isinstance(model.layers[0].qkv_proj, QuantLinear)
        return model
    loaded = _biased() if kind == "biased" else tiny_loaded(seed=1)
    dtype = "bfloat16" if kind == "bfloat16" else "float32"
    return LLMEngine(loaded, replace(config, dtype=dtype)).model


def _decode_step(model: LlamaModel, rows: int, seed: int = 0):
    """Inputs of one decode step of `rows` sequences over a cache of random keys and values:
    sequence i has 3 + 5 i tokens cached and adds one."""
    cfg = model.cfg
    gen = torch.Generator().manual_seed(seed)
    kv = torch.randn(
        kv_cache_shape(cfg.num_layers, cfg.num_kv_heads, 32, BLOCK, cfg.head_dim), generator=gen
    ).to(model.norm.dtype)
    slices, first = [], 0
    for i in range(rows):
        ctx = 4 + 5 * i
        blocks = list(range(first, first + -(-ctx // BLOCK)))
        first = blocks[-1] + 1
        slices.append(SeqSlice(i, 1, ctx, blocks))
    ids = torch.randint(0, cfg.vocab_size, (rows,), generator=gen)
    positions = torch.tensor([s.context_len - 1 for s in slices])
    return ids, positions, kv, slices


def _run(model: LlamaModel, on: bool, ids, positions, kv, slices):
    model.layer_kernel = on
    kv = kv.clone()
    meta = AttentionMetadata.build(slices, BLOCK, "cpu", native=True)
    rows = torch.tensor([s.start + s.num_new - 1 for s in slices])
    return model(ids, positions, kv, meta, rows), kv


@pytest.mark.parametrize("kind", ["float32", "bfloat16", "biased", "q4_1", "q8_0"])
@pytest.mark.parametrize("rows", [1, 3])
def test_the_native_layers_equal_the_python_loop_bit_for_bit(kind, rows, tmp_path, monkeypatch):
    model = _model(kind, tmp_path)
    step = _decode_step(model, rows)
    want_logits, want_kv = _run(model, False, *step)
    calls = []
    monkeypatch.setattr(DecoderLayer, "forward", lambda *a, **k: calls.append(a))
    got_logits, got_kv = _run(model, True, *step)
    assert calls == [], "the step went through the Python loop"
    assert torch.equal(got_logits, want_logits)
    assert torch.equal(got_kv, want_kv)


def test_a_prefill_chunk_runs_the_python_loop(tmp_path, monkeypatch):
    model = _model("float32", tmp_path)
    kv = _decode_step(model, 1)[2]
    chunk = [SeqSlice(0, 5, 5, [0, 1])]
    seen = []
    original = DecoderLayer.forward
    monkeypatch.setattr(
        DecoderLayer, "forward", lambda self, *a, **k: seen.append(1) or original(self, *a, **k)
    )
    _run(model, True, torch.arange(5), torch.arange(5), kv, chunk)
    assert len(seen) == model.cfg.num_layers


def test_a_weight_changed_in_place_is_seen_at_the_next_step(tmp_path):
    model = _model("float32", tmp_path)
    step = _decode_step(model, 2)
    before, _ = _run(model, True, *step)
    with torch.no_grad():
        model.layers[1].gate_up_proj.weight.mul_(1.5)
        model.layers[0].post_attention_layernorm.mul_(0.5)
    after, after_kv = _run(model, True, *step)
    want, want_kv = _run(model, False, *step)
    assert not torch.equal(before, after)
    assert torch.equal(after, want) and torch.equal(after_kv, want_kv)
