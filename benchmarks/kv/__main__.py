"""`make bench-kv`: the Mooncake synthetic trace, scaled to the default model, replayed three ways
in one process (device-only, tiered over a real KV tier store, recompute); then
docs/benchmarks/kv.md.

    python -m benchmarks.kv [--requests 100] [--start N] [--rate 0.8] [--rounds 4]
                            [--out docs/benchmarks/kv.md] [--command "make bench-kv"]

Device-only and tiered, the two the latency target compares, replay the window --rounds times
each, back to back and in alternating order (device-only first, then tiered first, ...; an even
number of rounds gives each the first place equally often), and their figures pool the rounds:
one replay's P50 of 100 requests on this shared 2-core machine moved by more than the 5% the
target allows between runs with nothing changed (a slow spell lands on whichever configuration
is running). Recompute, a reference, runs once at the end.

The window is the trace's last --requests requests unless --start says otherwise: the Mooncake
synthetic trace reuses prefixes mostly across long distances, so its opening requests share
almost nothing among themselves (the first 100, scaled: 4.7% of prompt blocks) while its last 100
share 62.7%: a window there is a workload a KV tier can matter for.

Defaults fit a 2-core CPU in about 20 minutes: 100 requests at 0.8 requests/s (about 2 minutes
a replay, nine replays, the engine busy about half the time when prefixes are cached), prompts of
at most 512 tokens (a 512-token prefill takes about 0.8 s here; 2048 tokens, 8 s), 16 output tokens.
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
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime

import torch

from benchmarks.common import cpu
from benchmarks.common.cpu import CpuMeter, CpuShare
from benchmarks.common.machine import host_line
from benchmarks.kv.replay import ReplayResult, replay
from benchmarks.kv.report import KVBenchReport, render
from benchmarks.kv.results import (
    ConfigResult,
    RoundFigures,
    check_targets,
    round_figures,
    summarize,
)
from benchmarks.kv.sizing import Sizing, size_configs
from benchmarks.kv.store_process import StoreFigures, StoreProcess
from benchmarks.kv.trace_scale import (
    ScaledRequest,
    Scaling,
    cache_figures,
    scale,
    select_window,
)
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


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--requests", type=int, default=100, help="requests in the window")
    p.add_argument(
        "--start",
        type=int,
        default=None,
        help="index of the window's first request (default: the last --requests)",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=4,
        help="replays of device-only and of tiered, interleaved (recompute: one)",
    )
    p.add_argument(
        "--rate",
        type=float,
        default=0.8,
        help="mean requests/s after time compression (0 = the trace's own times)",
    )
    p.add_argument(
        "--tokens-per-hash",
        type=int,
        default=16,
        help="tokens one trace hash id (512 tokens) becomes",
    )
    p.add_argument("--max-hash-blocks", type=int, default=32, help="hash blocks a prompt keeps")
    p.add_argument("--max-output", type=int, default=16, help="cap on output tokens")
    p.add_argument("--max-seqs", type=int, default=8)
    p.add_argument("--max-batched-tokens", type=int, default=512)
    p.add_argument(
        "--device-share",
        type=float,
        default=0.35,
        help="tiered device pool as a share of the working set",
    )
    p.add_argument(
        "--host-share",
        type=float,
        default=0.5,
        help="share of the rest of the working set held in host DRAM (rest: disk)",
    )
    p.add_argument(
        "--store-cpu",
        choices=("idle", "normal"),
        default="idle",
        help="the KV tier store's CPU class (STRATA_KVSTORE_CPU_PRIORITY): idle runs "
        "it on time the engine leaves unused",
    )
    p.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16")
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--trace", default=TRACE, help="Mooncake JSONL trace")
    p.add_argument("--out", default=OUT, help="where the markdown report goes")
    p.add_argument("--raw", default=RAW, help="folder for per-request data and the store log")
    p.add_argument("--command", default="", help="how this run was invoked, for the report")
    return p.parse_args()


def new_engine(
    loaded: LoadedModel, args: argparse.Namespace, num_blocks: int, tier: TierLink | None = None
) -> LLMEngine:
    return LLMEngine(
        loaded,
        EngineConfig(
            block_size=BLOCK_SIZE,
            num_blocks=num_blocks,
            max_batched_tokens=args.max_batched_tokens,
            max_seqs=args.max_seqs,
            dtype=args.dtype,
        ),
        tier=tier,
    )


@dataclass(slots=True)
class Runs:
    """One configuration's replays so far."""

    name: str
    description: str = ""
    pool_blocks: int = 0
    block_bytes: int = 0
    replays: list[ReplayResult] = field(default_factory=list)
    rounds: list[RoundFigures] = field(default_factory=list)
    store: StoreFigures | None = None
    counters: dict[str, int] = field(default_factory=dict)

    def add(
        self,
        engine: LLMEngine,
        description: str,
        result: ReplayResult,
        cores: CpuShare,
        round_index: int,
        position: int,
        raw: list[dict],
    ) -> None:
        self.description, self.pool_blocks = description, engine.pool.num_blocks
        self.block_bytes = block_bytes(engine)
        self.replays.append(result)
        fig = round_figures(result, round_index, position, cores.ours, cores.other)
        self.rounds.append(fig)
        raw.extend({"config": self.name, "round": round_index, **asdict(r)} for r in result.records)
        print(
            f"   {self.name} (round {round_index + 1}): E2E P50 {fig.e2e_p50_s * 1000:.0f} ms "
            f"P99 {fig.e2e_p99_s * 1000:.0f} ms, TTFT P50 {fig.ttft_p50_s * 1000:.0f} ms, "
            f"{result.wall_s:.0f} s, other work {cores.other:.2f} cores",
            flush=True,
        )

    def summary(self) -> ConfigResult:
        s = summarize(
            self.name,
            self.description,
            self.replays,
            self.pool_blocks,
            self.block_bytes,
            BLOCK_SIZE,
        )
        walls = [r.wall_s for r in self.replays]
        s.own_cores = sum(f.own_cores * w for f, w in zip(self.rounds, walls)) / sum(walls)
        s.other_cores = sum(f.other_cores * w for f, w in zip(self.rounds, walls)) / sum(walls)
        s.rounds, s.store = list(self.rounds), self.store
        s.notes += tier_notes(self.counters, len(self.replays))
        return s


def run_once(
    runs: Runs,
    description: str,
    engine: LLMEngine,
    reqs: list[ScaledRequest],
    tenant_of: Callable[[ScaledRequest], str],
    round_index: int,
    position: int,
    raw: list[dict],
    helper_pid: int | None = None,
) -> None:
    print(
        f"== {runs.name} (round {round_index + 1}): {engine.pool.num_blocks} device blocks",
        flush=True,
    )
    meter = CpuMeter(() if helper_pid is None else (helper_pid,))  # stopped while it runs
    result = replay(engine, reqs, tenant_of)
    runs.add(engine, description, result, meter.stop(), round_index, position, raw)


def block_bytes(engine: LLMEngine) -> int:
    return engine.kv[:, :, :, 0].numel() * engine.kv.element_size()


def run_tiered(
    runs: Runs,
    loaded: LoadedModel,
    args: argparse.Namespace,
    sizing: Sizing,
    reqs: list[ScaledRequest],
    round_index: int,
    position: int,
    raw: list[dict],
) -> None:
    disk_dir = tempfile.mkdtemp(prefix="strata-bench-kv-")
    store = StoreProcess(
        sizing.host_bytes,
        sizing.disk_bytes,
        disk_dir,
        os.path.join(args.raw, "kv-store.log"),
        sizing.slab_bytes,
        cpu_priority=args.store_cpu,
    )
    mib = 1024 * 1024
    description = (
        f"device pool {sizing.tiered_blocks} blocks ({args.device_share:.0%} of the "
        f"working set); below it a KV tier store process (`python -m "
        f"services.kvstore`, host tier {sizing.host_bytes / mib:.1f} MiB, disk tier "
        f"{sizing.disk_bytes / mib:.1f} MiB in a fresh temporary folder, a new store "
        f"each round, CPU class {args.store_cpu}: STRATA_KVSTORE_CPU_PRIORITY) "
        f"holding the other {sizing.tier_rest_blocks} working-set blocks; evicted "
        f"blocks are offloaded to it and prefix hits there loaded back; the store's "
        f"CPU time counts as own cores"
    )
    try:
        store.start()
        client = TierClient(store.address, identity=store.identity)
        engine = new_engine(loaded, args, sizing.tiered_blocks, TierLink(client))
        run_once(
            runs,
            description,
            engine,
            reqs,
            lambda r: SHARED_TENANT,
            round_index,
            position,
            raw,
            store.pid,
        )
        client.flush()
        runs.store = store.stats()
        count_tier_work(runs.counters, client, engine)
        client.close()
    finally:
        store.stop()
        shutil.rmtree(disk_dir, ignore_errors=True)


def count_tier_work(counters: dict[str, int], client: TierClient, engine: LLMEngine) -> None:
    costs = engine.costs
    for key, value in (
        ("offloaded", client.offloaded),
        ("dropped", client.dropped),
        ("failed", client.failed),
        ("loads", costs.loads_chosen),
        ("recomputes", costs.recomputes_chosen),
    ):
        counters[key] = counters.get(key, 0) + value


def tier_notes(counters: dict[str, int], rounds: int) -> list[str]:
    if not counters:
        return []
    c = counters
    over = f" over {rounds} rounds" if rounds > 1 else ""
    return [
        f"tiered: the tier client handed {c['offloaded']} evicted blocks to the store and "
        f"dropped {c['dropped']}{over} (no reserved host slot free, or its queue full: each "
        f"costs a recompute if the block is wanted again); {c['failed']} blocks failed to "
        f"deliver.",
        f"tiered: when the store held a prefix the engine loaded it {c['loads']} times and "
        f"chose to recompute it {c['recomputes']} times{over} (its measured load vs prefill "
        f"cost).",
    ]


def window_note(
    requests: Sequence[TraceRequest], start: int, count: int, scaling: Scaling, bound: float
) -> str:
    if start == 0:
        return (
            f"The window is the trace's opening {count} requests (--start 0); the "
            f"infinite-cache bound is {bound:.1%}."
        )
    head = cache_figures(scale(select_window(requests, count, 0), scaling), BLOCK_SIZE)
    return (
        f"Why this window: the trace's first {count} requests, scaled the same way, would "
        f"share only {head.bound:.1%} of their prompt blocks (the trace reuses prefixes "
        f"mostly across long distances); requests {start} to {start + count - 1} share "
        f"{bound:.1%}. Each configuration starts with empty caches."
    )


def busy_note(results: list[ConfigResult]) -> str | None:
    return cpu.busy_note(
        [(r.name, r.wall_s, r.other_cores) for r in results],
        os.cpu_count(),
        "while the configurations ran",
        "latencies are noisy: compare them across configurations with care and rerun on an "
        "idle machine before quoting them.",
    )


def machine_line() -> str:
    return (
        f"{host_line()}. One process, {THREADS} torch threads; the configurations run one "
        f"after another; the KV tier store is a second process."
    )


def main() -> None:
    args = parse_args()
    if args.rounds < 1:
        sys.exit(f"bench-kv: --rounds must be at least 1, got {args.rounds}")
    torch.set_num_threads(THREADS)
    if not os.path.exists(args.trace):
        sys.exit(
            f"bench-kv: the Mooncake trace is not at {args.trace} (relative to "
            f"{os.getcwd()}); see ../shared/data/traces/README.md"
        )
    exe = sys.executable
    if exe.startswith(os.getcwd() + os.sep):
        exe = os.path.relpath(exe)  # the repository's .venv/bin/python, as typed
    command = args.command or shlex.join([exe, "-m", "benchmarks.kv", *sys.argv[1:]])
    date = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    os.makedirs(args.raw, exist_ok=True)
    trace = read_mooncake(args.trace)
    window = select_window(trace.requests, args.requests, args.start)
    start = args.start if args.start is not None else len(trace.requests) - len(window)
    loaded = load_model(args.model)
    scaling = Scaling(
        tokens_per_hash=args.tokens_per_hash,
        max_hash_blocks=args.max_hash_blocks,
        max_output=args.max_output,
        rate=args.rate or None,
        vocab_size=loaded.config.vocab_size,
    )
    reqs = scale(window, scaling)
    figures = cache_figures(reqs, BLOCK_SIZE)
    dtype_bytes = torch.finfo(getattr(torch, args.dtype)).bits // 8
    sizing = size_configs(
        figures,
        args.max_seqs,
        loaded.config.kv_bytes_per_token(dtype_bytes) * BLOCK_SIZE,
        args.device_share,
        args.host_share,
    )
    print(
        f"window: requests {start}..{start + len(reqs) - 1} of {len(trace.requests)}; "
        f"{figures.prompt_blocks} prompt blocks, bound {figures.bound:.1%}, working set "
        f"{sizing.working_set_blocks} blocks",
        flush=True,
    )
    # Kernel shapes are picked once per process: warm them on a throwaway engine so that no
    # configuration starts cold and no warm-up prompt occupies a measured pool.
    warm = new_engine(loaded, args, sizing.recompute_blocks)
    print(f"warm-up: {warm.warm_up():.1f} s", flush=True)
    del warm
    raw: list[dict] = []
    device_only, tiered = Runs("device-only"), Runs("tiered")
    device_description = (
        f"device pool {sizing.device_only_blocks} blocks: the working set "
        f"({sizing.working_set_blocks}) plus room for {args.max_seqs} requests of the largest "
        f"size ({figures.max_request_blocks} blocks), so nothing is ever evicted; no tier"
    )
    for i in range(args.rounds):
        order = ("device-only", "tiered") if i % 2 == 0 else ("tiered", "device-only")
        for position, name in enumerate(order):
            if name == "tiered":
                run_tiered(tiered, loaded, args, sizing, reqs, i, position, raw)
            else:
                run_once(
                    device_only,
                    device_description,
                    new_engine(loaded, args, sizing.device_only_blocks),
                    reqs,
                    lambda r: SHARED_TENANT,
                    i,
                    position,
                    raw,
                )
    recompute = Runs("recompute")
    run_once(
        recompute,
        f"device pool {sizing.recompute_blocks} blocks, just enough for {args.max_seqs} "
        f"concurrent requests of the largest size; every request is its own tenant, so no "
        f"block hash ever matches (tenants never share prefixes) and every prompt is "
        f"computed in full; no tier; one round",
        new_engine(loaded, args, sizing.recompute_blocks),
        reqs,
        lambda r: f"request-{r.index}",
        0,
        0,
        raw,
    )
    results = [device_only.summary(), tiered.summary(), recompute.summary()]
    targets = check_targets(results[0], results[1], figures.bound)
    notes = [window_note(trace.requests, start, len(reqs), scaling, figures.bound)]
    c = loaded.config
    report = KVBenchReport(
        command=command,
        date=date,
        machine=machine_line(),
        setup=(
            f"`{args.model}` ({c.num_layers} layers, {c.num_kv_heads} KV heads of "
            f"{c.head_dim}, context {c.max_position_embeddings}) in {args.dtype}; LLMEngine "
            f"stepped in a loop, block size {BLOCK_SIZE}, max_seqs {args.max_seqs}, "
            f"max_batched_tokens {args.max_batched_tokens}, the engine's default attention "
            f"kernel."
        ),
        trace=(
            f"`{args.trace}` ({len(trace.requests)} requests), window: requests {start} to "
            f"{start + len(reqs) - 1} ({len(reqs)})."
        ),
        scaling=scaling,
        figures=figures,
        sizing=sizing,
        results=results,
        targets=targets,
        notes=notes,
        busy=busy_note(results),
        raw_dir=args.raw,
    )
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(render(report))
    with open(os.path.join(args.raw, "kv-requests.jsonl"), "w", encoding="utf-8") as f:
        f.writelines(json.dumps(row) + "\n" for row in raw)
    with open(os.path.join(args.raw, "kv.json"), "w", encoding="utf-8") as f:
        json.dump(
            {
                "command": command,
                "date": date,
                "figures": asdict(figures),
                "sizing": asdict(sizing),
                "results": [asdict(r) for r in results],
                "targets": [asdict(t) for t in targets],
            },
            f,
            indent=1,
        )
    for t in targets:
        print(t.line())
    print(f"wrote {args.out}", flush=True)


if __name__ == "__main__":
    main()
