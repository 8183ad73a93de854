"""A model's tokenizer without its weights, resolved by the same names as `load_model`.

    "smollm2-135m-instruct"   the GGUF's tokenizer.* metadata (tensor data is never read)
    "dummy-*"                 the byte tokenizer of that size
    "/path/to/model.gguf"     that file's tokenizer.* metadata
    "/path/to/folder"         the folder's tokenizer.json

For callers that must tokenize exactly as a worker does (the gateway hashing a prompt's blocks)
and must not pay for torch: nothing here imports it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gguf import GGUFReader

from strata.engine.bpe_tokenizer import BpeTokenizer
from strata.engine.byte_tokenizer import ByteTokenizer
from strata.engine.checkpoints import CHECKPOINTS, unknown_model
from strata.engine.dummy_configs import DUMMY_CONFIGS, dummy_names
from strata.engine.tokenizer import Tokenizer


@dataclass(slots=True, frozen=True)
class NamedTokenizer:
    name: str  # the engine's model name (ModelConfig.name): a block hash's model key
    tokenizer: Tokenizer


def load_tokenizer(name_or_path: str) -> NamedTokenizer:
    """The tokenizer and model name `load_model(name_or_path)` would give the engine, read
    without the weights; the same errors for names it does not know."""
    if name_or_path in CHECKPOINTS:
        return NamedTokenizer(name_or_path, _gguf_tokenizer(CHECKPOINTS[name_or_path]()))
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
    raise unknown_model(name_or_path)


def _gguf_tokenizer(path: Path) -> BpeTokenizer:
    # Only the tokenizer.* keys are decoded: the vocabulary and merges are all the tokenizer
    # needs, and tensor data is memory-mapped by the reader, never read.
    reader = GGUFReader(path)
    meta = {
        key: field.contents()
        for key, field in reader.fields.items()
        if key.startswith("tokenizer.")
    }
    return BpeTokenizer.from_gguf_metadata(meta)
