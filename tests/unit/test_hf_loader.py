"""Loading Hugging Face checkpoint folders: config mapping, weights, tokenizer files, refusals."""

import functools
import json

import pytest
import torch
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from strata.engine.config import ModelConfig
from strata.engine.engine import EngineConfig, LLMEngine
from strata.engine.hf_loader import load_hf_dir
from strata.engine.registry import load_model

transformers = pytest.importorskip("transformers")

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0, 1, 2
CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "hello there, the model answers questions about the weather today",
    "a paged cache keeps the keys and values of every token in blocks",
]
TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + "
    "m['content'] + '<|im_end|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
ARCHS = {
    "LlamaForCausalLM": ("LlamaConfig", "LlamaForCausalLM"),
    "Qwen2ForCausalLM": ("Qwen2Config", "Qwen2ForCausalLM"),
    "MistralForCausalLM": ("MistralConfig", "MistralForCausalLM"),
}
BASE = dict(
    vocab_size=300,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
    rms_norm_eps=1e-6,
    bos_token_id=1,
    eos_token_id=2,
    initializer_range=0.2,
)


@functools.cache
def _tokenizer_json() -> str:
    """A byte-level BPE with 300 tokens (3 specials, 256 bytes, 41 merges) learned on CORPUS."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        CORPUS,
        trainers.BpeTrainer(
            vocab_size=300,
            special_tokens=SPECIALS,
            show_progress=False,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    return tok.to_str()


def write_tokenizer(folder, template=TEMPLATE, where="config"):
    """tokenizer.json plus tokenizer_config.json; the template as a string, a named list, or
    a chat_template.jinja file."""
    (folder / "tokenizer.json").write_text(_tokenizer_json())
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<|endoftext|>",
        "eos_token": "<|im_end|>",
    }
    if where == "config":
        config["chat_template"] = template
    elif where == "list":
        config["chat_template"] = [
            {"name": "tool_use", "template": "unused"},
            {"name": "default", "template": template},
        ]
    else:
        (folder / "chat_template.jinja").write_text(template)
    (folder / "tokenizer_config.json").write_text(json.dumps(config))


def write_tiny_hf_dir(
    folder,
    arch="LlamaForCausalLM",
    seed=0,
    max_shard_size=None,
    template_where="config",
    **overrides,
):
    """Save a random tiny transformers model of `arch` and a tokenizer; return the model."""
    config_cls, model_cls = (getattr(transformers, n) for n in ARCHS[arch])
    torch.manual_seed(seed)
    model = model_cls(config_cls(**{**BASE, **overrides})).eval()
    kwargs = {} if max_shard_size is None else {"max_shard_size": max_shard_size}
    model.save_pretrained(folder, **kwargs)
    write_tokenizer(folder, where=template_where)
    return model


def _edit_config(folder, **changes):
    path = folder / "config.json"
    raw = json.loads(path.read_text())
    raw.update(changes)
    path.write_text(json.dumps(raw))


LLAMA3 = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 32,
}


def test_config_maps_every_field(tmp_path):
    torch.set_num_threads(1)
    write_tiny_hf_dir(
        tmp_path,
        num_key_value_heads=1,
        tie_word_embeddings=True,
        rope_theta=500000.0,
        rope_scaling=dict(LLAMA3),
    )
    loaded = load_hf_dir(tmp_path, name="tiny-llama")
    assert loaded.config == ModelConfig(
        name="tiny-llama",
        vocab_size=300,
        hidden_size=64,
        intermediate_size=128,
        num_layers=2,
        num_heads=4,
        num_kv_heads=1,
        head_dim=16,
        rms_norm_eps=1e-6,
        rope_theta=500000.0,
        rope_scaling=LLAMA3,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        attention_bias=False,
        bos_token_id=1,
        eos_token_ids=(2, 0),
    )
    assert loaded.tokenizer.eos_token_ids == (2, 0)
    assert load_hf_dir(tmp_path).config.name == tmp_path.name


def test_transformers4_layout_reads_the_same(tmp_path):
    """transformers 4 wrote rope_theta at the top and the scaling under rope_scaling."""
    torch.set_num_threads(1)
    write_tiny_hf_dir(tmp_path, rope_theta=500000.0, rope_scaling=dict(LLAMA3))
    v5 = load_hf_dir(tmp_path).config
    assert "rope_parameters" in json.loads((tmp_path / "config.json").read_text())
    _edit_config(tmp_path, rope_parameters=None, rope_theta=500000.0, rope_scaling=dict(LLAMA3))
    assert load_hf_dir(tmp_path).config == v5
    _edit_config(tmp_path, rope_theta=20000.0, rope_scaling={"type": "linear", "factor": 2.0})
    v4_linear = load_hf_dir(tmp_path).config
    assert (v4_linear.rope_theta, v4_linear.rope_scaling) == (
        20000.0,
        {"type": "linear", "rope_type": "linear", "factor": 2.0},
    )
    _edit_config(tmp_path, rope_scaling=None)
    assert load_hf_dir(tmp_path).config.rope_scaling is None
    # without num_key_value_heads every head has its own K/V, which these weights contradict
    _edit_config(tmp_path, num_key_value_heads=None)
    assert _error(tmp_path) == (
        "checkpoint tensor model.layers.0.self_attn.k_proj.weight has "
        "shape (32, 64), config.json implies (64, 64)"
    )


def test_qwen2_biases_and_mistral_head_dim(tmp_path):
    torch.set_num_threads(1)
    qwen = write_tiny_hf_dir(tmp_path / "qwen", "Qwen2ForCausalLM")
    loaded = load_hf_dir(tmp_path / "qwen")
    assert loaded.config.attention_bias is True
    bias = "model.layers.1.self_attn.k_proj.bias"
    assert torch.equal(loaded.weights[bias], qwen.state_dict()[bias])
    assert "model.layers.1.self_attn.o_proj.bias" not in loaded.weights
    write_tiny_hf_dir(tmp_path / "mistral", "MistralForCausalLM", head_dim=32, sliding_window=256)
    cfg = load_hf_dir(tmp_path / "mistral").config
    assert (cfg.head_dim, cfg.hidden_size, cfg.attention_bias) == (32, 64, False)
    assert load_hf_dir(tmp_path / "mistral").weights[
        "model.layers.0.self_attn.q_proj.weight"
    ].shape == (128, 64)


def test_weights_single_sharded_and_bf16(tmp_path):
    torch.set_num_threads(1)
    model = write_tiny_hf_dir(tmp_path / "one")
    write_tiny_hf_dir(tmp_path / "shards", max_shard_size="40KB")
    shards = sorted(p.name for p in (tmp_path / "shards").glob("*.safetensors"))
    assert len(shards) > 4 and (tmp_path / "shards" / "model.safetensors.index.json").is_file()
    one, sharded = load_hf_dir(tmp_path / "one"), load_hf_dir(tmp_path / "shards")
    reference = model.state_dict()
    assert set(one.weights) == set(sharded.weights) == set(reference)
    for name, weight in one.weights.items():
        assert weight.dtype == torch.float32
        assert torch.equal(weight, reference[name]) and torch.equal(sharded.weights[name], weight)

    model.to(torch.bfloat16).save_pretrained(tmp_path / "bf16")
    write_tokenizer(tmp_path / "bf16")
    loaded = load_hf_dir(tmp_path / "bf16")
    bf16 = loaded.weights["model.layers.0.mlp.up_proj.weight"]
    assert loaded.dtype == torch.bfloat16 and bf16.dtype == torch.bfloat16  # no float32 detour
    assert torch.equal(bf16, reference["model.layers.0.mlp.up_proj.weight"].bfloat16())


def test_a_bf16_checkpoint_is_served_in_bf16_with_its_buffers_as_the_parameters(tmp_path):
    """dtype "auto" keeps the checkpoint's bfloat16, and the loader's buffers (q|k|v and
    gate|up each read into one) become the model's parameters: one copy of the weights."""
    torch.set_num_threads(1)
    write_tiny_hf_dir(tmp_path / "f32")
    transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "f32").to(
        torch.bfloat16
    ).save_pretrained(tmp_path / "bf16")
    write_tokenizer(tmp_path / "bf16")
    loaded = load_hf_dir(tmp_path / "bf16")
    engine = LLMEngine(loaded, EngineConfig(block_size=4, num_blocks=16))
    assert engine.dtype == torch.bfloat16 and engine.kv.dtype == torch.bfloat16
    layer = engine.model.layers[0]
    q = loaded.weights["model.layers.0.self_attn.q_proj.weight"]
    gate = loaded.weights["model.layers.0.mlp.gate_proj.weight"]
    assert layer.qkv_proj.weight.data_ptr() == q.data_ptr()
    assert layer.gate_up_proj.weight.data_ptr() == gate.data_ptr()
    down = loaded.weights["model.layers.0.mlp.down_proj.weight"]
    assert layer.down_proj.weight.data_ptr() == down.data_ptr()
    # a float32 engine over the same checkpoint widens into its own memory
    wide = LLMEngine(loaded, EngineConfig(block_size=4, num_blocks=16, dtype="float32"))
    assert wide.model.layers[0].qkv_proj.weight.dtype == torch.float32
    assert torch.equal(wide.model.layers[0].qkv_proj.weight, layer.qkv_proj.weight.float())


def test_tied_checkpoint_needs_no_head(tmp_path):
    torch.set_num_threads(1)
    write_tiny_hf_dir(tmp_path, tie_word_embeddings=True)
    assert "lm_head.weight" not in load_file(tmp_path / "model.safetensors")
    assert "lm_head.weight" not in load_hf_dir(tmp_path).weights


def test_eos_ids_from_generation_config_then_config(tmp_path):
    torch.set_num_threads(1)
    write_tiny_hf_dir(tmp_path, eos_token_id=[2, 7])
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [9, 2]}))
    assert load_hf_dir(tmp_path).config.eos_token_ids == (9, 2, 0)
    (tmp_path / "generation_config.json").unlink()
    loaded = load_hf_dir(tmp_path)
    assert loaded.config.eos_token_ids == loaded.tokenizer.eos_token_ids == (2, 7, 0)


@pytest.mark.parametrize("where", ["config", "list", "jinja"])
def test_chat_template_from_each_place(tmp_path, where):
    torch.set_num_threads(1)
    write_tiny_hf_dir(tmp_path, template_where=where)
    loaded = load_hf_dir(tmp_path)
    assert loaded.chat_template == TEMPLATE
    assert loaded.tokenizer.apply_chat_template([("user", "hi")]) == (
        "<|endoftext|><|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )


def test_registry_routes_a_folder_to_this_loader(tmp_path):
    torch.set_num_threads(1)
    model = write_tiny_hf_dir(tmp_path / "my-model")
    loaded = load_model(str(tmp_path / "my-model"))
    assert loaded.config.name == "my-model"
    assert torch.equal(loaded.weights["lm_head.weight"], model.state_dict()["lm_head.weight"])


def _error(folder) -> str:
    with pytest.raises(ValueError) as err:
        load_hf_dir(folder)
    return str(err.value)


def test_refusals_say_why(tmp_path):
    torch.set_num_threads(1)
    assert (
        _error(tmp_path) == f"{tmp_path} has no config.json; a Hugging Face checkpoint "
        "folder needs one"
    )
    write_tiny_hf_dir(tmp_path)
    _edit_config(tmp_path, architectures=["GPT2LMHeadModel"])
    assert _error(tmp_path) == (
        "architecture 'GPT2LMHeadModel' is not supported; supported: "
        "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM"
    )
    _edit_config(
        tmp_path,
        architectures=["LlamaForCausalLM"],
        rope_parameters={"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e4},
    )
    assert _error(tmp_path) == (
        "rope scaling type 'yarn' is not supported; supported: default, linear, llama3"
    )
    _edit_config(tmp_path, rope_parameters=None, attention_bias=True)
    assert _error(tmp_path) == (
        "attention_bias=true is not supported for LlamaForCausalLM: it "
        "also biases o_proj, which the engine's attention lacks"
    )
    _edit_config(tmp_path, attention_bias=False, hidden_size=None)
    assert _error(tmp_path) == "config.json lacks hidden_size; the checkpoint is incomplete"
    _edit_config(tmp_path, hidden_size=64)

    weights = load_file(tmp_path / "model.safetensors")
    del weights["model.layers.1.mlp.up_proj.weight"]
    save_file(weights, tmp_path / "model.safetensors")
    assert _error(tmp_path) == (
        "checkpoint lacks 1 of the model's 21 tensors, e.g. 'model.layers.1.mlp.up_proj.weight'"
    )
    weights["model.layers.1.mlp.up_proj.weight"] = torch.zeros(128, 64)
    weights["model.layers.0.self_attn.o_proj.bias"] = torch.zeros(64)
    save_file(weights, tmp_path / "model.safetensors")
    assert _error(tmp_path) == (
        "checkpoint tensor 'model.layers.0.self_attn.o_proj.bias' has "
        "no place in this model; its config.json does not describe "
        "these weights"
    )
    (tmp_path / "model.safetensors").unlink()
    assert _error(tmp_path) == (
        f"{tmp_path} has neither model.safetensors nor "
        "model.safetensors.index.json; only safetensors checkpoints "
        "load (save with safe_serialization=True)"
    )


def test_sliding_window_refused_only_when_it_binds(tmp_path):
    torch.set_num_threads(1)
    write_tiny_hf_dir(tmp_path / "mistral", "MistralForCausalLM", sliding_window=64)
    assert _error(tmp_path / "mistral") == (
        "sliding_window 64 is smaller than max_position_embeddings 256, and the engine has no "
        "sliding-window attention; set max_position_embeddings to at most 64 in config.json to "
        "serve this model with full attention"
    )
    _edit_config(tmp_path / "mistral", max_position_embeddings=64)
    assert load_hf_dir(tmp_path / "mistral").config.max_position_embeddings == 64
    # Qwen2 ships a sliding_window it does not use unless use_sliding_window is set
    write_tiny_hf_dir(tmp_path / "qwen", "Qwen2ForCausalLM", sliding_window=64)
    _edit_config(tmp_path / "qwen", sliding_window=64, layer_types=None)
    assert load_hf_dir(tmp_path / "qwen").config.attention_bias is True
    _edit_config(tmp_path / "qwen", use_sliding_window=True, max_window_layers=1)
    assert _error(tmp_path / "qwen").startswith("sliding_window 64 is smaller than ")


_PEAK_PROBE = """
import sys, torch
from pathlib import Path
torch.set_num_threads(1)
from strata.engine.config import ModelConfig
from strata.engine.hf_loader import load_hf_dir
from strata.engine.model import LlamaModel, build_model

# torch's meta-device machinery costs ~70 MB once, whatever the model: pay it before measuring
with torch.device("meta"):
    LlamaModel(ModelConfig(name="warm", vocab_size=16, hidden_size=8, intermediate_size=8,
                           num_layers=1, num_heads=1, num_kv_heads=1, max_position_embeddings=8))

def status(key):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
before = status("VmRSS")
Path("/proc/self/clear_refs").write_text("5")  # the peak resident size starts again from here
loaded = load_hf_dir(sys.argv[1])
model = build_model(loaded.config, loaded.weights, torch.device("cpu"), loaded.dtype)
print(status("VmHWM") - before)
"""


def test_a_bf16_checkpoint_loads_in_under_one_and_a_half_times_its_size(tmp_path):
    """Peak resident memory while loading and building the model, above what the process held
    before (its imports, and torch's one-time meta-device set-up), in a fresh process: under
    1.5x the checkpoint file (one copy of the weights, read into place without mapping the
    file)."""
    import subprocess
    import sys

    torch.set_num_threads(1)
    config = transformers.LlamaConfig(
        **{
            **BASE,
            "vocab_size": 8192,
            "hidden_size": 512,
            "intermediate_size": 1536,
            "num_hidden_layers": 6,
        }
    )
    transformers.LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(tmp_path)
    write_tokenizer(tmp_path)
    size = (tmp_path / "model.safetensors").stat().st_size
    assert size > 40 << 20
    done = subprocess.run(
        [sys.executable, "-c", _PEAK_PROBE, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    grew = int(done.stdout.split()[-1])
    assert grew < 1.5 * size, f"peak grew by {grew / size:.2f}x the {size} byte file"
