"""HF checkpoint folders loaded by us and run by our engine, against transformers on the same
folder (fp32): every prefill position, every greedy decode step, the greedy token stream, and
the tokenizer with its chat template."""

import pytest
import torch

from strata.engine.attention import AttentionMetadata, SeqSlice
from strata.engine.engine import EngineConfig, EngineRequest, LLMEngine
from strata.engine.hf_loader import load_hf_dir
from strata.engine.sequence import SamplingParams
from tests.engine_helpers import run_to_end
from tests.unit.test_hf_loader import write_tiny_hf_dir

transformers = pytest.importorskip("transformers")

CONFIGS = {
    "llama-gqa-untied": ("LlamaForCausalLM", dict(num_attention_heads=4, num_key_value_heads=2)),
    "llama-mqa-tied-theta": (
        "LlamaForCausalLM",
        dict(
            num_attention_heads=4,
            num_key_value_heads=1,
            tie_word_embeddings=True,
            rope_theta=500000.0,
        ),
    ),
    "llama-llama3-scaling": (
        "LlamaForCausalLM",
        dict(
            rope_scaling={
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 32,
            }
        ),
    ),
    "llama-linear-scaling": (
        "LlamaForCausalLM",
        dict(rope_scaling={"rope_type": "linear", "factor": 2.0}),
    ),
    "qwen2-bias-gqa": ("Qwen2ForCausalLM", dict(num_attention_heads=4, num_key_value_heads=2)),
    "mistral-head-dim": ("MistralForCausalLM", dict(sliding_window=None, head_dim=32)),
}
# 19 tokens with this tokenizer: learned merges, single bytes and two special tokens
PROMPT = "<|im_start|>user\nhello there, the weather!?<|im_end|>"
STEPS = 8
BLOCKS = [9, 2, 14, 5, 11, 0, 7, 3]  # deliberately out of order; 8 blocks of 4 hold 32 tokens


def _engine(folder) -> LLMEngine:
    return LLMEngine(load_hf_dir(folder), EngineConfig(block_size=4, num_blocks=64))


@pytest.mark.parametrize("name", CONFIGS)
def test_logits_and_greedy_stream_match_transformers(tmp_path, name):
    torch.set_num_threads(1)
    arch, overrides = CONFIGS[name]
    hf = write_tiny_hf_dir(tmp_path, arch, **overrides)
    hf = type(hf).from_pretrained(tmp_path, dtype=torch.float32).eval()  # what the folder holds
    engine = _engine(tmp_path)
    ids = engine.tokenizer.encode(PROMPT)
    assert len(ids) == 19

    # the engine's own model over the engine's own cache, one sequence through scattered blocks
    model, kv = engine.model, engine.kv
    meta = AttentionMetadata.build([SeqSlice(0, len(ids), len(ids), BLOCKS)], 4, "cpu")
    logits = model(torch.tensor(ids), torch.arange(len(ids)), kv, meta, torch.arange(len(ids)))
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0]
    assert logits.shape == ref.shape == (19, 300)
    assert torch.allclose(logits, ref, atol=1e-4), (logits - ref).abs().max()
    seq = list(ids)
    for _ in range(STEPS):
        token = int(logits[-1].argmax())
        seq.append(token)
        meta = AttentionMetadata.build([SeqSlice(0, 1, len(seq), BLOCKS)], 4, "cpu")
        logits = model(
            torch.tensor([token]), torch.tensor([len(seq) - 1]), kv, meta, torch.tensor([0])
        )
        with torch.no_grad():
            ref = hf(torch.tensor([seq])).logits[0, -1:]
        assert torch.allclose(logits, ref, atol=1e-4), (logits - ref).abs().max()

    # the whole engine (scheduler, block pool, sampler) against transformers' greedy generate
    engine.add_request(EngineRequest("r", ids, SamplingParams(max_tokens=STEPS, ignore_eos=True)))
    ours = run_to_end(engine)["r"]
    with torch.no_grad():
        theirs = hf.generate(
            torch.tensor([ids]), max_new_tokens=STEPS, do_sample=False, eos_token_id=None
        )[0, len(ids) :].tolist()
    assert ours == theirs == seq[len(ids) :]
    assert len(ours) == STEPS


def test_sharded_checkpoint_runs_identically(tmp_path):
    torch.set_num_threads(1)
    write_tiny_hf_dir(tmp_path / "one", "Qwen2ForCausalLM")
    write_tiny_hf_dir(tmp_path / "shards", "Qwen2ForCausalLM", max_shard_size="40KB")
    assert len(list((tmp_path / "shards").glob("model-*.safetensors"))) > 4
    streams = []
    for folder in ("one", "shards"):
        engine = _engine(tmp_path / folder)
        ids = engine.tokenizer.encode(PROMPT)
        engine.add_request(
            EngineRequest("r", ids, SamplingParams(max_tokens=STEPS, ignore_eos=True))
        )
        streams.append(run_to_end(engine)["r"])
    assert streams[0] == streams[1] and len(streams[0]) == STEPS


@pytest.mark.parametrize("where", ["config", "list", "jinja"])
def test_tokenizer_and_template_match_auto_tokenizer(tmp_path, where):
    torch.set_num_threads(1)
    write_tiny_hf_dir(tmp_path, template_where=where)
    ours = load_hf_dir(tmp_path).tokenizer
    theirs = transformers.AutoTokenizer.from_pretrained(tmp_path)
    for text in (
        PROMPT,
        "the lazy dog answers",
        "héllo wörld 12345!\n\ttabs",
        "<|endoftext|>a<|im_end|>b<|im_start",
    ):
        assert ours.encode(text) == theirs.encode(text, add_special_tokens=False), text
        assert ours.decode(ours.encode(text)) == text
    messages = [
        ("system", "Be brief."),
        ("user", "the weather?"),
        ("assistant", "Sunny."),
        ("user", "and tomorrow?"),
    ]
    rendered = ours.apply_chat_template(messages)
    assert rendered == theirs.apply_chat_template(
        [{"role": r, "content": c} for r, c in messages], tokenize=False, add_generation_prompt=True
    )
    assert rendered.startswith("<|endoftext|><|im_start|>system\nBe brief.<|im_end|>\n")
    assert rendered.endswith("<|im_start|>assistant\n")
