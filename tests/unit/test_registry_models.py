"""load_model: registered names, dummy names, GGUF paths, and a useful error for anything else."""

import pytest
import torch

from strata.engine.registry import DEFAULT_MODEL, known_models, load_model
from tests.unit.test_gguf_loader import write_tiny_gguf


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def test_known_models():
    assert known_models() == (
        "smollm2-135m-instruct",
        "dummy-tiny",
        "dummy-small",
        "dummy-bench",
        "dummy-1b",
        "dummy-long",
    )
    assert DEFAULT_MODEL == "smollm2-135m-instruct"


def test_dummy_name_loads_the_dummy():
    model = load_model("dummy-tiny")
    assert model.config.name == "dummy-tiny" and model.config.num_layers == 2


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(ValueError) as err:
        load_model("gpt-5")
    assert str(err.value) == (
        "unknown model 'gpt-5'; known models: smollm2-135m-instruct, "
        "dummy-tiny, dummy-small, dummy-bench, dummy-1b, dummy-long, a path "
        "to a .gguf file, or a Hugging Face checkpoint folder"
    )


def test_missing_gguf_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="no GGUF file at .*nothing.gguf"):
        load_model(str(tmp_path / "nothing.gguf"))


def test_gguf_path_loads_that_file(tmp_path):
    write_tiny_gguf(tmp_path / "tiny-llama.gguf")
    model = load_model(str(tmp_path / "tiny-llama.gguf"))
    assert model.config.name == "tiny-llama" and model.config.hidden_size == 32


@pytest.mark.slow
def test_default_name_loads_the_packaged_checkpoint():
    model = load_model("smollm2-135m-instruct")
    assert model.config.name == "smollm2-135m-instruct"
    assert (model.config.num_layers, model.config.vocab_size) == (30, 49152)
    assert model.tokenizer.eos_token_ids == (2, 0)
