"""load_tokenizer: the tokenizer and model name load_model would give the engine, for every kind
of name, read without weights; the same refusals as load_model."""

from __future__ import annotations

import pytest
import torch

from strata.engine.registry import load_model, load_tokenizer
from tests.unit.test_gguf_loader import write_tiny_gguf

TEXTS = ["the theme of the day", "<|im_start|>user\nhello<|im_end|>", "héllo wörld 123", ""]
CHAT = [("system", "Be brief."), ("user", "the weather today?")]


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def assert_same_tokenizer(named, loaded) -> None:
    assert named.name == loaded.config.name
    assert [named.tokenizer.encode(t) for t in TEXTS] == [loaded.tokenizer.encode(t) for t in TEXTS]
    assert named.tokenizer.apply_chat_template(CHAT) == loaded.tokenizer.apply_chat_template(CHAT)


def test_a_dummy_name_gives_the_dummy_byte_tokenizer():
    named = load_tokenizer("dummy-tiny")
    assert_same_tokenizer(named, load_model("dummy-tiny"))
    assert named.tokenizer.vocab_size == 512
    assert named.tokenizer.encode("<|im_start|>hi") == [258, 104, 105]


def test_a_gguf_path_gives_the_files_tokenizer_under_the_files_stem(tmp_path):
    write_tiny_gguf(tmp_path / "tiny-llama.gguf")
    named = load_tokenizer(str(tmp_path / "tiny-llama.gguf"))
    assert named.name == "tiny-llama"
    assert_same_tokenizer(named, load_model(str(tmp_path / "tiny-llama.gguf")))
    # "the" is merged ("Ġthe" after a space), everything else is bytes; specials are one id
    assert named.tokenizer.encode(" the<|im_end|>") == [261, 2]


def test_a_hugging_face_folder_gives_its_tokenizer_json(tmp_path):
    pytest.importorskip("transformers")
    from tests.unit.test_hf_loader import write_tiny_hf_dir

    folder = tmp_path / "tiny-hf"
    folder.mkdir()
    write_tiny_hf_dir(folder)
    named = load_tokenizer(str(folder))
    assert named.name == "tiny-hf"
    assert_same_tokenizer(named, load_model(str(folder)))


def test_unknown_names_are_refused_as_load_model_refuses_them(tmp_path):
    with pytest.raises(ValueError) as err:
        load_tokenizer("gpt-5")
    with pytest.raises(ValueError) as same:
        load_model("gpt-5")
    assert str(err.value) == str(same.value)
    with pytest.raises(FileNotFoundError, match="no GGUF file at .*nothing.gguf"):
        load_tokenizer(str(tmp_path / "nothing.gguf"))


def test_the_gateway_tokenizes_without_importing_torch():
    import subprocess
    import sys

    code = (
        "import sys, services.gateway.__main__, strata.gateway.prefix_hashes as p; "
        "p.load_engine_tokenizer('dummy-tiny'); print('torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "False"
