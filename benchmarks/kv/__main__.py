"""`make bench-kv`: the Mooncake synthetic trace, scaled to the default model, replayed three ways
in one process (device-only, tiered over a real KV tier store, recompute); then
docs/benchmarks/kv.md.

    python -m benchmarks.kv [--requests 100] [--start N] [--rate 0.8] [--out docs/benchmarks/kv.md]
                            [--command "make bench-kv"]

The window is the trace's last --requests requests unless --start says otherwise: the Mooncake
synthetic trace reuses prefixes mostly across long distances, so its opening requests share
almost nothing among themselves (the first 100, scaled: 4.7% of prompt blocks) while its last 100
share 62.7%: a window there is a workload a KV tier can matter for.

Defaults fit a 2-core CPU in about 7 minutes: 100 requests at 0.8 requests/s (about 2 minutes a
configuration, the engine busy about half the time when prefixes are cached), prompts of at most
512 tokens (a 512-token prefill takes about 0.8 s here; 2048 tokens, 8 s), 16 output tokens.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict
from datetime import datetime, timezone

import torch

from benchmarks.engine.machine import machine_facts
from benchmarks.kv.cpu_meter import CpuMeter
from benchmarks.kv.replay import replay
from benchmarks.kv.report import KVBenchReport, render
from benchmarks.kv.results import ConfigResult, check_targets, summarize
from benchmarks.kv.sizing import Sizing, size_configs
from benchmarks.kv.store_process import StoreProcess
from benchmarks.kv.trace_scale import ScaledRequest, Scaling, cache_figures, scale, select_window
from strata.engine.engine import EngineConfig, LLMEngine
from strata.engine.loaded import LoadedModel
from strata.engine.registry import DEFAULT_MODEL, load_model
from strata.engine.tier_link import TierLink
from strata.eval.traces import TraceRequest, read_mooncake
from strata.kvtier.client import TierClient

TRACE = "../shared/data/traces/mooncake_synthetic_trace.jsonl"
OUT = "docs/benchmarks/kv.md"
RAW = "docs/benchmarks/raw"
BLOCK_SIZE = 16
THREADS = 2
SHARED_TENANT = "bench"
BUSY_CORES = 0.25      # other work above this, in cores, makes latency comparisons noisy


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--requests", type=int, default=100, help="requests in the window")
    p.add_argument("--start", type=int, default=None,
                   help="index of the window's first request (default: the last --requests)")
    p.add_argument("--rate", type=float, default=0.8,
                   help="mean requests/s after time compression (0 = the trace's own times)")
    p.add_argument("--tokens-per-hash", type=int, default=16,
                   help="tokens one trace hash id (512 tokens) becomes")
    p.add_argument("--max-hash-blocks", type=int, default=32, help="hash blocks a prompt keeps")
    p.add_argument("--max-output", type=int, default=16, help="cap on output tokens")
    p.add_argument("--max-seqs", type=int, default=8)
    p.add_argument("--max-batched-tokens", type=int, default=512)
    p.add_argument("--device-share", type=float, default=0.35,
                   help="tiered device pool as a share of the working set")
    p.add_argument("--host-share", type=float, default=0.5,
                   help="share of the rest of the working set held in host DRAM (rest: disk)")
    p.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16")
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--trace", default=TRACE, help="Mooncake JSONL trace")
    p.add_argument("--out", default=OUT, help="where the markdown report goes")
    p.add_argument("--raw", default=RAW, help="folder for per-request data and the store log")
    p.add_argument("--command", default="", help="how this run was invoked, for the report")
    return p.parse_args()


def new_engine(loaded: LoadedModel, args: argparse.Namespace, num_blocks: int,
               tier: TierLink | None = None) -> LLMEngine:
    return LLMEngine(loaded, EngineConfig(
        block_size=BLOCK_SIZE, num_blocks=num_blocks, max_batched_tokens=args.max_batched_tokens,
        max_seqs=args.max_seqs, dtype=args.dtype), tier=tier)


def run_config(name: str, description: str, engine: LLMEngine, reqs: list[ScaledRequest],
               tenant_of: Callable[[ScaledRequest], str], raw: list[dict]) -> ConfigResult:
    print(f"== {name}: {engine.pool.num_blocks} device blocks", flush=True)
    meter = CpuMeter()
    result = replay(engine, reqs, tenant_of)
    cores = meter.stop()
    summary = summarize(name, description, result, engine.pool.num_blocks,
                        block_bytes(engine), BLOCK_SIZE)
    summary.own_cores, summary.other_cores = cores.own, cores.other
    raw.extend({"config": name, **asdict(r)} for r in result.records)
    print(f"   {name}: peak {summary.peak_mib:.1f} MiB, mean {summary.mean_mib:.1f} MiB, "
          f"hits device {summary.share(summary.device_hit_blocks):.1%} tier "
          f"{summary.share(summary.tier_hit_blocks):.1%}, E2E P50 {summary.e2e_p50_s * 1000:.0f} "
          f"ms P99 {summary.e2e_p99_s * 1000:.0f} ms, {summary.wall_s:.0f} s", flush=True)
    return summary


def block_bytes(engine: LLMEngine) -> int:
    return engine.kv[:, :, :, 0].numel() * engine.kv.element_size()


def run_tiered(loaded: LoadedModel, args: argparse.Namespace, sizing: Sizing,
               reqs: list[ScaledRequest], raw: list[dict]) -> ConfigResult:
    disk_dir = tempfile.mkdtemp(prefix="strata-bench-kv-")
    store = StoreProcess(sizing.host_bytes, sizing.disk_bytes, disk_dir,
                         os.path.join(args.raw, "kv-store.log"), sizing.slab_bytes)
    mib = 1024 * 1024
    description = (f"device pool {sizing.tiered_blocks} blocks ({args.device_share:.0%} of the "
                   f"working set); below it a KV tier store process (`python -m "
                   f"services.kvstore`, host tier {sizing.host_bytes / mib:.1f} MiB, disk tier "
                   f"{sizing.disk_bytes / mib:.1f} MiB in a fresh temporary folder) holding the "
                   f"other {sizing.tier_rest_blocks} working-set blocks; evicted blocks are "
                   f"offloaded to it and prefix hits there loaded back")
    try:
        store.start()
        client = TierClient(store.address)
        engine = new_engine(loaded, args, sizing.tiered_blocks, TierLink(client))
        summary = run_config("tiered", description, engine, reqs, lambda r: SHARED_TENANT, raw)
        client.flush()
        summary.store = store.stats()
        summary.notes += tier_notes(client, engine)
        client.close()
    finally:
        store.stop()
        shutil.rmtree(disk_dir, ignore_errors=True)
    return summary


def tier_notes(client: TierClient, engine: LLMEngine) -> list[str]:
    notes = []
    dropped = getattr(client, "dropped", None)
    offloaded = getattr(client, "offloaded", None)
    if dropped is not None and offloaded is not None:
        notes.append(f"tiered: the tier client handed {offloaded} evicted blocks to the store "
                     f"and dropped {dropped} (no reserved host slot free, or its queue full: "
                     f"each costs a recompute if the block is wanted again); "
                     f"{getattr(client, 'failed', 0)} blocks failed to deliver.")
    costs = getattr(engine, "costs", None)
    if costs is not None and hasattr(costs, "loads_chosen"):
        notes.append(f"tiered: when the store held a prefix the engine loaded it "
                     f"{costs.loads_chosen} times and chose to recompute it "
                     f"{costs.recomputes_chosen} times (its measured load vs prefill cost).")
    return notes


def window_note(requests: Sequence[TraceRequest], start: int, count: int, scaling: Scaling, bound: float) -> str:
    if start == 0:
        return (f"The window is the trace's opening {count} requests (--start 0); the "
                f"infinite-cache bound is {bound:.1%}.")
    head = cache_figures(scale(select_window(requests, count, 0), scaling), BLOCK_SIZE)
    return (f"Why this window: the trace's first {count} requests, scaled the same way, would "
            f"share only {head.bound:.1%} of their prompt blocks (the trace reuses prefixes "
            f"mostly across long distances); requests {start} to {start + count - 1} share "
            f"{bound:.1%}. Each configuration starts with empty caches.")


def busy_note(results: list[ConfigResult]) -> str | None:
    worst = max(results, key=lambda r: r.other_cores)
    if worst.other_cores <= BUSY_CORES:
        return None
    mean = sum(r.other_cores * r.wall_s for r in results) / sum(r.wall_s for r in results)
    return (f"**Busy machine:** other work used {mean:.2f} cores on average while the "
            f"configurations ran (up to {worst.other_cores:.2f} during {worst.name}) of the "
            f"machine's {os.cpu_count()}; latencies are noisy: compare them across "
            f"configurations with care and rerun on an idle machine before quoting them.")


def machine_line() -> str:
    m = machine_facts()
    return (f"{m['cpu_model']}, {m['cores']} cores ({', '.join(m['cpu_flags']) or 'no AVX-512'}),"
            f" {m['memory_gib']} GiB; Python {m['python']}, torch {m['torch']}, Linux "
            f"{m['kernel']}. One process, {THREADS} torch threads; the configurations run one "
            f"after another; the KV tier store is a second process.")


def main() -> None:
    args = parse_args()
    torch.set_num_threads(THREADS)
    if not os.path.exists(args.trace):
        sys.exit(f"bench-kv: the Mooncake trace is not at {args.trace} (relative to "
                 f"{os.getcwd()}); see ../shared/data/traces/README.md")
    exe = sys.executable
    if exe.startswith(os.getcwd() + os.sep):
        exe = os.path.relpath(exe)     # the repository's .venv/bin/python, as typed
    command = args.command or shlex.join([exe, "-m", "benchmarks.kv", *sys.argv[1:]])
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    os.makedirs(args.raw, exist_ok=True)
    trace = read_mooncake(args.trace)
    window = select_window(trace.requests, args.requests, args.start)
    start = args.start if args.start is not None else len(trace.requests) - len(window)
    loaded = load_model(args.model)
    scaling = Scaling(tokens_per_hash=args.tokens_per_hash, max_hash_blocks=args.max_hash_blocks,
                      max_output=args.max_output, rate=args.rate or None,
                      vocab_size=loaded.config.vocab_size)
    reqs = scale(window, scaling)
    figures = cache_figures(reqs, BLOCK_SIZE)
    dtype_bytes = torch.finfo(getattr(torch, args.dtype)).bits // 8
    sizing = size_configs(figures, args.max_seqs,
                          loaded.config.kv_bytes_per_token(dtype_bytes) * BLOCK_SIZE,
                          args.device_share, args.host_share)
    print(f"window: requests {start}..{start + len(reqs) - 1} of {len(trace.requests)}; "
          f"{figures.prompt_blocks} prompt blocks, bound {figures.bound:.1%}, working set "
          f"{sizing.working_set_blocks} blocks", flush=True)
    # Kernel shapes are picked once per process: warm them on a throwaway engine so that no
    # configuration starts cold and no warm-up prompt occupies a measured pool.
    warm = new_engine(loaded, args, sizing.recompute_blocks)
    print(f"warm-up: {warm.warm_up():.1f} s", flush=True)
    del warm
    raw: list[dict] = []
    results = [run_config(
        "device-only",
        f"device pool {sizing.device_only_blocks} blocks: the working set "
        f"({sizing.working_set_blocks}) plus room for {args.max_seqs} requests of the largest "
        f"size ({figures.max_request_blocks} blocks), so nothing is ever evicted; no tier",
        new_engine(loaded, args, sizing.device_only_blocks), reqs,
        lambda r: SHARED_TENANT, raw)]
    results.append(run_tiered(loaded, args, sizing, reqs, raw))
    results.append(run_config(
        "recompute",
        f"device pool {sizing.recompute_blocks} blocks, just enough for {args.max_seqs} "
        f"concurrent requests of the largest size; every request is its own tenant, so no "
        f"block hash ever matches (tenants never share prefixes) and every prompt is computed "
        f"in full; no tier",
        new_engine(loaded, args, sizing.recompute_blocks), reqs,
        lambda r: f"request-{r.index}", raw))
    targets = check_targets(results[0], results[1], figures.bound)
    notes = [window_note(trace.requests, start, len(reqs), scaling, figures.bound)]
    c = loaded.config
    report = KVBenchReport(
        command=command, date=date, machine=machine_line(),
        setup=(f"`{args.model}` ({c.num_layers} layers, {c.num_kv_heads} KV heads of "
               f"{c.head_dim}, context {c.max_position_embeddings}) in {args.dtype}; LLMEngine "
               f"stepped in a loop, block size {BLOCK_SIZE}, max_seqs {args.max_seqs}, "
               f"max_batched_tokens {args.max_batched_tokens}, the engine's default attention "
               f"kernel."),
        trace=(f"`{args.trace}` ({len(trace.requests)} requests), window: requests {start} to "
               f"{start + len(reqs) - 1} ({len(reqs)})."),
        scaling=scaling, figures=figures, sizing=sizing, results=results, targets=targets,
        notes=notes, busy=busy_note(results), raw_dir=args.raw)
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(render(report))
    with open(os.path.join(args.raw, "kv-requests.jsonl"), "w", encoding="utf-8") as f:
        f.writelines(json.dumps(row) + "\n" for row in raw)
    with open(os.path.join(args.raw, "kv.json"), "w", encoding="utf-8") as f:
        json.dump({"command": command, "date": date, "figures": asdict(figures),
                   "sizing": asdict(sizing), "results": [asdict(r) for r in results],
                   "targets": [asdict(t) for t in targets]}, f, indent=1)
    for t in targets:
        print(f"{'PASS' if t.passed else 'FAIL'}  {t.name}: {t.measured} (wanted {t.want})")
    print(f"wrote {args.out}", flush=True)


if __name__ == "__main__":
    main()
