"""The command line every offline runner shares (ours, transformers, vLLM): which prompts, how
long, which dtype, how many threads, where the results go.

Standard library only: the vLLM runner imports it from its own virtual environment.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass

from benchmarks.engine.results import OfflineResult, read_json, write_json

AGREEMENT_TOKENS = 16  # greedy tokens kept per request to compare systems' outputs
WARMUP_OUTPUT = 8  # tokens generated per warm-up prompt


def parser(description: str) -> argparse.ArgumentParser:
    """The shared options; a runner adds its own before calling `parse`."""
    p = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--prompts", required=True, help="JSON prompts file (see Prompts)")
    p.add_argument("--output-len", type=int, required=True, help="tokens generated per prompt")
    p.add_argument("--dtype", choices=("bfloat16", "float32"), required=True)
    p.add_argument("--threads", type=int, required=True, help="torch intra-op threads")
    p.add_argument("--out", required=True, help="where to write the JSON results")
    return p


def parse(p: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> argparse.Namespace:
    args = p.parse_args(argv)
    if args.output_len < 1 or args.threads < 1:
        p.error("--output-len and --threads must be at least 1")
    return args


@dataclass(slots=True)
class Prompts:
    """The prompts file: {"warmup": [[ids]], "batch": [[ids]], "single": [ids]}."""

    warmup: list[list[int]]
    batch: list[list[int]]
    single: list[int]


def load_prompts(path: str) -> Prompts:
    data = read_json(path)
    try:
        prompts = Prompts(warmup=data["warmup"], batch=data["batch"], single=data["single"])
    except (KeyError, TypeError):
        raise ValueError(
            f"{path} must hold a JSON object with warmup, batch and single prompts"
        ) from None
    if not prompts.batch or not prompts.single or not all(prompts.batch + prompts.warmup):
        raise ValueError(f"{path}: every prompt must have at least one token")
    return prompts


def write_results(path: str, results: list[OfflineResult]) -> None:
    write_json(path, [r.to_dict() for r in results])


def check_lengths(system: str, outputs: list[list[int]], want: int) -> None:
    """Every benchmark request ignores EOS; a shorter output would inflate tokens/s unfairly."""
    short = [i for i, ids in enumerate(outputs) if len(ids) != want]
    if short:
        raise RuntimeError(
            f"{system}: {len(short)} requests did not produce exactly {want} "
            f"tokens (first: request {short[0]} with {len(outputs[short[0]])})"
        )
