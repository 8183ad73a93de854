"""A model whose GGUF weights stay quantized decodes as the one with the weights widened at load."""

from dataclasses import replace

import gguf
import pytest
import torch
from torch import nn

from strata.engine.attention import AttentionMetadata, SeqSlice, kv_cache_shape
from strata.engine.engine import EngineConfig, EngineRequest, LLMEngine
from strata.engine.gguf_loader import default_model_path, load_gguf
from strata.engine.model import LlamaModel
from strata.engine.quant import QuantEmbedding, QuantLinear, dequantize, from_gguf
from strata.engine.sequence import SamplingParams
from tests.engine_helpers import run_to_end
from tests.unit.test_gguf_loader import write_tiny_gguf

Q = gguf.GGMLQuantizationType


def _engine(path, keep: bool, dtype: str = "float32") -> LLMEngine:
    torch.set_num_threads(1)
    return LLMEngine(
        load_gguf(path, keep_quantized=keep),
        EngineConfig(block_size=4, num_blocks=128, max_batched_tokens=64, max_seqs=8, dtype=dtype),
    )


def _greedy(engine: LLMEngine, prompts: dict[str, list[int]], n: int) -> dict[str, list[int]]:
    for rid, prompt in prompts.items():
        engine.add_request(
            EngineRequest(rid, prompt, SamplingParams(max_tokens=n, ignore_eos=True, temperature=0))
        )
    return run_to_end(engine)


PROMPTS = {f"p{i}": [(7 * i + 3 * j) % 250 + 5 for j in range(5 + 4 * i)] for i in range(5)}


@pytest.mark.parametrize("qtype", [Q.Q8_0, Q.Q4_0, Q.Q4_1])
def test_quantized_layers_decode_the_same_tokens_as_widened_weights(tmp_path, qtype):
    write_tiny_gguf(tmp_path / "m.gguf", qtype=qtype)
    kept, wide = _engine(tmp_path / "m.gguf", True), _engine(tmp_path / "m.gguf", False)
    layer = kept.model.layers[0]
    assert all(
        isinstance(m, QuantLinear)
        for m in (layer.qkv_proj, layer.o_proj, layer.gate_up_proj, layer.down_proj)
    )
    assert isinstance(kept.model.embed_tokens, QuantEmbedding)
    assert isinstance(wide.model.layers[0].qkv_proj, nn.Linear)
    (kept_params, kept_bytes), (wide_params, wide_bytes) = kept.weights_size(), wide.weights_size()
    assert kept_params == wide_params
    assert kept_bytes < wide_bytes / 2.5
    assert _greedy(kept, PROMPTS, 12) == _greedy(wide, PROMPTS, 12)


def test_quantized_weights_can_be_widened_by_the_engine_config(tmp_path):
    write_tiny_gguf(tmp_path / "m.gguf", qtype=Q.Q8_0)
    engine = LLMEngine(
        load_gguf(tmp_path / "m.gguf"),
        EngineConfig(block_size=4, num_blocks=64, quantized_weights=False),
    )
    assert isinstance(engine.model.layers[1].down_proj, nn.Linear)
    assert isinstance(engine.model.embed_tokens, nn.Embedding)


def test_bfloat16_activations_over_quantized_weights_stay_close(tmp_path):
    """bfloat16 activations over Q8_0 weights against the float32 model widened from the same
    file, teacher-forced on its greedy tokens (so one near-tie cannot derail the rest): every
    logit within 5e-3, and the same top-1 wherever the reference's top-2 margin is wider than
    the error could close."""
    write_tiny_gguf(tmp_path / "m.gguf", qtype=Q.Q8_0)
    kept, wide = _engine(tmp_path / "m.gguf", True, "bfloat16"), _engine(tmp_path / "m.gguf", False)
    assert kept.model.embed_tokens(torch.tensor([3, 9])).dtype == torch.bfloat16
    for prompt in PROMPTS.values():
        forced, ref = _step_logits(wide.model, prompt, steps=6)
        _, ours = _step_logits(kept.model, prompt, forced)
        error = float((ours.float() - ref).abs().max())
        assert error < 5e-3
        top2 = ref.topk(2, dim=-1).values
        clear = top2[:, 0] - top2[:, 1] > 2 * error
        assert clear.sum() >= 4
        assert torch.equal(ours.argmax(-1)[clear], ref.argmax(-1)[clear])


def _step_logits(
    model: LlamaModel, prompt: list[int], forced: list[int] | None = None, steps: int = 0
) -> tuple[list[int], torch.Tensor]:
    """The tokens and the logits before each: the prompt as one prefill, then one row a step
    (the decode path). The tokens are `forced` when given (the same whatever the model would
    have picked), else `steps` of the model's own greedy picks."""
    cfg, block = model.cfg, 16
    steps = len(forced) if forced is not None else steps
    total = len(prompt) + steps
    blocks = list(range(-(-total // block)))
    kv = torch.zeros(
        kv_cache_shape(cfg.num_layers, cfg.num_kv_heads, len(blocks), block, cfg.head_dim),
        dtype=model.norm.dtype,
    )
    meta = AttentionMetadata.build([SeqSlice(0, len(prompt), len(prompt), blocks)], block, "cpu")
    n = len(prompt)
    out = [model(torch.tensor(prompt), torch.arange(n), kv, meta, torch.tensor([n - 1]))[0]]
    tokens: list[int] = []
    for i in range(steps):
        tokens.append(forced[i] if forced is not None else int(out[-1].argmax()))
        if i == steps - 1:
            break
        pos = n + i
        meta = AttentionMetadata.build([SeqSlice(0, 1, pos + 1, blocks)], block, "cpu")
        step = torch.tensor([tokens[-1]])
        out.append(model(step, torch.tensor([pos]), kv, meta, torch.tensor([0]))[0])
    return tokens, torch.stack(out)


@pytest.mark.slow
@pytest.mark.parametrize(("dtype", "least"), [("float32", 0.99), ("auto", 0.975)])
def test_the_default_q4_1_model_agrees_with_its_widened_self_on_256_decode_steps(dtype, least):
    """SmolLM2's Q4_1 layers and Q8_0 embedding, kept quantized, against the same file widened
    to float32: greedy tokens from the widened model, forced through both; the top-1 of the
    quantized one agrees on at least 99% of the steps when it computes in float32, and on at
    least 97.5% in the dtype a worker computes it in by default (bfloat16 on a CPU with a native
    bfloat16 path: docs/design/engine.md). The widened model's greedy run and its logits come
    from one pass of its decode path."""
    torch.set_num_threads(2)
    path = default_model_path()
    kept = LLMEngine(load_gguf(path), EngineConfig(num_blocks=64, dtype=dtype))
    wide = LLMEngine(load_gguf(path, keep_quantized=False), EngineConfig(num_blocks=64))
    assert wide.dtype == torch.float32
    assert kept.weights_size()[1] <= 2 * path.stat().st_size
    prompt = kept.tokenizer.encode(
        "<|im_start|>user\nWrite a long story about a lighthouse keeper.<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    forced, ref = _step_logits(wide.model, prompt, steps=256)
    _, ours = _step_logits(kept.model, prompt, forced)
    agree = float((ours.argmax(-1) == ref.argmax(-1)).float().mean())
    assert agree >= least, agree


def _as_q8_0(weights) -> tuple[dict, dict]:
    """Every matrix of a float checkpoint quantized to Q8_0 by gguf (as llama.cpp's converter
    does): once kept as QuantizedWeight, once widened back to float32."""
    kept, wide = {}, {}
    for name, w in weights.items():
        if w.dim() == 2:
            q = from_gguf(gguf.quants.quantize(w.numpy(), Q.Q8_0), Q.Q8_0, tuple(w.shape))
            kept[name], wide[name] = q, dequantize(q)
        else:
            kept[name] = wide[name] = w
    return kept, wide


@pytest.mark.slow
def test_the_default_model_in_q8_0_greedy_decodes_exactly_as_widened():
    torch.set_num_threads(2)
    loaded = load_gguf(default_model_path(), keep_quantized=False)
    kept_w, wide_w = _as_q8_0(loaded.weights)
    outs = []
    for weights in (kept_w, wide_w):
        engine = LLMEngine(
            replace(loaded, weights=weights), EngineConfig(num_blocks=64, dtype="float32")
        )
        for i, prompt in enumerate(PARITY_PROMPTS):
            ids = engine.tokenizer.encode(prompt)
            engine.add_request(
                EngineRequest(
                    f"r{i}", ids, SamplingParams(max_tokens=48, ignore_eos=True, temperature=0)
                )
            )
        outs.append(run_to_end(engine))
    assert isinstance(engine.model.layers[0].qkv_proj, nn.Linear)  # the second is widened
    assert outs[0] == outs[1]


PARITY_PROMPTS = (
    "<|im_start|>user\nhello there, the weather!?<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    "The quick brown fox",
)
