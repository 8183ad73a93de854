"""Packaging: pyproject.toml pins every direct dependency exactly, declares every third-party
module the code imports, and the client install (SDK, CLI, healthcheck) works without the
server's dependencies."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
EXTRAS = PROJECT["optional-dependencies"]
# Import name -> distribution, where they differ.
DISTRIBUTION = {
    "google": "protobuf",
    "grpc": "grpcio",
    "grpc_health": "grpcio-health-checking",
    "grpc_reflection": "grpcio-reflection",
    "grpc_tools": "grpcio-tools",
    "yaml": "pyyaml",
    "jinja2": "jinja2",
    "pynvml": "nvidia-ml-py",
    "pydantic_settings": "pydantic-settings",
    "importlinter": "import-linter",
    "opentelemetry": "opentelemetry-api",
}
# Imported where they are, on purpose, without being declared: the vLLM and llama.cpp baselines
# run in their own venvs (make bench-engine PEERS=vllm, make bench-weights PEERS=llamacpp);
# docker is testcontainers' own dependency.
UNDECLARED = {"vllm", "llama_cpp", "docker"}
SERVER_ONLY = (
    "torch",
    "sqlalchemy",
    "aiosqlite",
    "asyncpg",
    "uvloop",
    "safetensors",
    "gguf",
    "tokenizers",
    "jinja2",
    "xxhash",
    "cryptography",
    "opentelemetry",
    "transformers",
)


def _name(requirement: str) -> str:
    return re.split(r"[=<>\[ ]", requirement, maxsplit=1)[0].lower()


def _declared() -> dict[str, str]:
    pins = list(PROJECT["dependencies"])
    for group in EXTRAS.values():
        pins += group
    return {_name(p): p for p in pins}


def _third_party_imports(folders: tuple[str, ...]) -> set[str]:
    stdlib = set(sys.stdlib_module_names)
    ours = {"strata", "services", "benchmarks", "tests"}
    found = set()
    for folder in folders:
        for path in (ROOT / folder).rglob("*.py"):
            if "/v1/" in str(path):
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                found |= {n.split(".")[0] for n in names}
    return found - stdlib - ours - {"__future__"}


def test_every_direct_dependency_is_pinned_exactly() -> None:
    for name, pin in _declared().items():
        assert re.fullmatch(r"[A-Za-z0-9_.\-]+(\[[a-z,]+\])?==[0-9][0-9A-Za-z.+]*", pin), (
            f"{name}: pin it exactly (name==version), got {pin!r}"
        )
    assert _declared()["torch"] == "torch==2.13.0"


def test_every_imported_module_is_declared() -> None:
    declared = set(_declared())
    for module in _third_party_imports(("libs", "services", "benchmarks", "tests")):
        if module in UNDECLARED:
            continue
        dist = DISTRIBUTION.get(module, module).lower().replace("_", "-")
        assert dist in declared, f"{module} is imported but {dist} is not in pyproject.toml"


def test_test_tools_stay_out_of_the_runtime_extras() -> None:
    runtime = {_name(p) for p in PROJECT["dependencies"] + EXTRAS["server"]}
    for tool in (
        "pytest",
        "testcontainers",
        "hypothesis",
        "transformers",
        "ruff",
        "mypy",
        "grpcio-tools",
        "import-linter",
        "accelerate",
        "psycopg",
    ):
        assert tool not in runtime, tool


def test_the_client_imports_without_the_server_dependencies() -> None:
    # A meta path finder that refuses the server's modules stands in for `pip install
    # .[client]` (which this suite cannot run offline in a fresh venv on every CI run).
    script = f"""
import importlib, importlib.abc, sys
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in {SERVER_ONLY!r}:
            raise ImportError("not in the client install: " + name)
sys.meta_path.insert(0, Refuse())
for module in ("strata.client.sdk", "strata.client.cli", "strata.client.replay",
               "strata.client.healthcheck"):
    importlib.import_module(module)
from strata.client.cli import main
sys.exit(main(["--help"]))
"""
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "generate" in done.stdout
