"""`make bench-prefill`: a burst of prompts of mixed sizes through one engine, its prefill chunks
attended in groups of similar size (strata.core.prefill_groups, the engine's way) against the
baseline of every chunk of a step padded into one group (the engine's way before), in one
process, rounds alternating; then docs/benchmarks/prefill-groups.md and .json.

    python -m benchmarks.engine.mixed_prefill [--requests 48] [--rounds 4] [--threads 1]
                                              [--out docs/benchmarks/prefill-groups.md]

Model: the default model (SmolLM2-135M-Instruct) as a checkpoint in the dtype the serving
benchmark computes in (bfloat16 where this CPU multiplies it natively, else float32), written
once into a temporary folder. Requests: sizes drawn from the Azure conversation trace
(../shared/data/traces), prompt = clip(ceil(ContextTokens / 4), 1, 1024), output =
clip(ceil(GeneratedTokens / 4), 1, 64), random token ids (no prefix-cache hits), all submitted
at once, greedy, EOS ignored; each round draws its own sizes and both ways run the same draw.
Torch runs on --threads threads (1 by default: the worker's count beside the services on this
2-core machine).
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from benchmarks.common.machine import host_line, machine_facts
from benchmarks.engine.workload import LengthMapping
from benchmarks.serving.sweep import sweep_dtype, write_checkpoint
from strata.core import prefill_groups as grouping
from strata.engine import attention
from strata.engine.engine import EngineConfig, EngineRequest, LLMEngine
from strata.engine.registry import load_model
from strata.engine.sequence import SamplingParams
from strata.eval.trace_lengths import read_azure_lengths

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT.parent / "shared/data/traces/AzureLLMInferenceTrace_conv_2023.csv"
OUT = ROOT / "docs/benchmarks/prefill-groups.md"
WAYS = ("one padded group", "groups")
MAPPING = LengthMapping(divisor=4, max_prompt=1024, max_output=64)


@dataclass(slots=True, frozen=True)
class Round:
    way: str
    round: int
    requests: int
    prompt_tokens: int
    output_tokens: int
    seconds: float
    ttft_mean_s: float
    ttft_p90_s: float


def one_group(chunks, block_size: int) -> list[list[int]]:
    """The baseline: every prefill chunk of a step in one padded group."""
    return [list(range(len(chunks)))] if chunks else []


def trace_sizes(path: Path) -> list[tuple[int, int]]:
    """(prompt, output) tokens of every trace row, scaled and clipped by MAPPING."""
    return [
        (s.prompt_tokens, s.output_tokens) for s in map(MAPPING.apply, read_azure_lengths(path))
    ]


def burst(
    engine: LLMEngine, requests: list[tuple[list[int], int]], tag: str
) -> tuple[float, list[float]]:
    """Every request at once, stepped to the end: (seconds, each request's time to first token)."""
    first: dict[str, float] = {}
    start = time.perf_counter()
    for i, (ids, out) in enumerate(requests):
        params = SamplingParams(temperature=0.0, max_tokens=out, ignore_eos=True)
        engine.add_request(EngineRequest(request_id=f"{tag}-{i}", prompt_ids=ids, params=params))
    while engine.has_work():
        for o in engine.step():
            if o.token_ids and o.request_id not in first:
                first[o.request_id] = time.perf_counter() - start
    return time.perf_counter() - start, sorted(first.values())


def run(args: argparse.Namespace, log: Callable[[str], None] = print) -> dict:
    torch.set_num_threads(args.threads)
    dtype = sweep_dtype()
    sizes = trace_sizes(Path(args.trace))
    with tempfile.TemporaryDirectory(prefix="strata-prefill-") as tmp:
        loaded = load_model(str(write_checkpoint(Path(tmp), dtype)))
    engine = LLMEngine(loaded, EngineConfig(dtype=dtype, max_seqs=32, max_batched_tokens=2048))
    vocab = loaded.config.vocab_size
    real = attention.prefill_groups
    rounds: list[Round] = []
    try:
        burst(engine, [([7] * 16, 4)] * 4, "warmup")
        for r in range(args.rounds):
            rng = random.Random(1000 + r)
            draw = [sizes[rng.randrange(len(sizes))] for _ in range(args.requests)]
            requests = [([rng.randrange(100, vocab) for _ in range(p)], o) for p, o in draw]
            for way in WAYS if r % 2 == 0 else WAYS[::-1]:
                attention.prefill_groups = one_group if way == WAYS[0] else real
                seconds, ttft = burst(engine, requests, f"{way}-{r}")
                rounds.append(
                    Round(
                        way,
                        r,
                        len(requests),
                        sum(len(ids) for ids, _ in requests),
                        sum(o for _, o in requests),
                        seconds,
                        sum(ttft) / len(ttft),
                        ttft[int(0.9 * (len(ttft) - 1))],
                    )
                )
                log(
                    f"round {r} {way}: {seconds:.2f} s, TTFT mean {rounds[-1].ttft_mean_s:.2f} s,"
                    f" P90 {rounds[-1].ttft_p90_s:.2f} s"
                )
    finally:
        attention.prefill_groups = real
    return {
        "command": args.command,
        "machine": machine_facts(),
        "dtype": dtype,
        "threads": args.threads,
        "group_overhead_keys": grouping.GROUP_OVERHEAD_KEYS,
        "rounds": [asdict(x) for x in rounds],
    }


def _mean(rounds: list[dict], way: str, key: str) -> float:
    vals = [x[key] for x in rounds if x["way"] == way]
    return sum(vals) / len(vals)


def render(data: dict) -> str:
    rounds = data["rounds"]
    lines = [
        "# Prefill chunks in groups of similar size",
        "",
        f"Command: `{data['command']}`. Machine: {host_line(data['machine'])}. "
        f"{data['dtype']}, {data['threads']} torch thread(s).",
        "",
        "A burst of requests of mixed sizes through one LLMEngine (SmolLM2-135M-Instruct), all "
        "submitted at once: its prefill chunks attended in groups of similar size "
        "(strata.core.prefill_groups; a group's fixed cost counted as "
        f"{data['group_overhead_keys']} query-key pairs) against the baseline of every chunk "
        "of a step padded into one group, in one process, rounds alternating which goes first; "
        "both ways run each round's same requests. Sizes from the Azure conversation trace: "
        f"{MAPPING.describe()}; random token ids, greedy, EOS ignored. TTFT: from the "
        "burst's submission to each request's first token.",
        "",
        "| round | way | requests | prompt tokens | output tokens | seconds | TTFT mean s "
        "| TTFT P90 s |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for x in rounds:
        lines.append(
            f"| {x['round']} | {x['way']} | {x['requests']} | {x['prompt_tokens']} | "
            f"{x['output_tokens']} | {x['seconds']:.2f} | {x['ttft_mean_s']:.2f} | "
            f"{x['ttft_p90_s']:.2f} |"
        )
    base, new = WAYS
    lines += [
        "",
        "| mean over rounds | seconds | TTFT mean s | TTFT P90 s |",
        "|---|---:|---:|---:|",
    ]
    for way in WAYS:
        lines.append(
            f"| {way} | {_mean(rounds, way, 'seconds'):.2f} | "
            f"{_mean(rounds, way, 'ttft_mean_s'):.2f} | {_mean(rounds, way, 'ttft_p90_s'):.2f} |"
        )
    speed = _mean(rounds, base, "seconds") / _mean(rounds, new, "seconds")
    ttft = _mean(rounds, base, "ttft_mean_s") / _mean(rounds, new, "ttft_mean_s")
    lines += [
        "",
        f"Groups against one padded group: the burst {speed:.2f}x as fast, mean TTFT "
        f"{ttft:.2f}x lower.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--requests", type=int, default=48)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--trace", default=str(TRACE))
    p.add_argument("--out", default=str(OUT))
    p.add_argument("--command", default="python -m benchmarks.engine.mixed_prefill")
    args = p.parse_args()
    if not Path(args.trace).exists():
        raise SystemExit(f"the benchmark draws request sizes from {args.trace}; it is not there")
    data = run(args)
    out = Path(args.out)
    out.write_text(render(data))
    out.with_suffix(".json").write_text(json.dumps(data, indent=1, sort_keys=True))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
