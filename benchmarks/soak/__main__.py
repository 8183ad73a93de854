"""`make soak`: the stack `make run` starts, under ~70% of its measured capacity for 30 minutes.

First the stack's capacity is measured (closed loop, CAPACITY_CLIENTS clients for CAPACITY_S
seconds: completed requests per second); then requests arrive open-loop (Poisson) at
LOAD_SHARE of it. Every minute the stack's processes (resident memory, open files, threads),
the worker's referenced KV blocks and the KV store's blocks and pins are sampled, with the
minute's requests, errors and latency. Every request is judged against its prompt's greedy
reference tokens. At the end the load stops, in-flight requests finish, and the KV blocks still
referenced are the leak.

Targets (TARGETS, printed with the result): the stack's RSS grows less than 10% from the end of
the warm-up (WARMUP_MIN minutes) to the end; no KV block leaked; no request failed.
Writes docs/benchmarks/soak.{md,json}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import grpc

from benchmarks.common.machine import host_line
from benchmarks.common.procs import figures
from benchmarks.common.supervised import MODEL, Load, SupervisedStack
from benchmarks.common.targets import Target, Verdict, all_met, target_table
from strata.client.sdk import AsyncClient
from strata.core.stats import percentile
from strata.rpc.channels import sync_channel
from strata.v1 import kvstore_pb2, kvstore_pb2_grpc

DURATION_S = 1800.0
SAMPLE_S = 60.0
WARMUP_MIN = 5
LOAD_SHARE = 0.7
CAPACITY_S = 60.0
CAPACITY_CLIENTS = 8
MAX_TOKENS = 16
KV_BLOCKS = 160
PROMPTS = [
    f"soak prompt {i}: " + "a shared system preamble for every request. " * (1 + i % 4)
    for i in range(24)
]
TARGETS = {
    "rss": Target(
        f"stack RSS growth after warm-up (minute {WARMUP_MIN} to the end)", "<", 0.10, "{:.0%}"
    ),
    "leak": Target("leaked KV blocks", "==", 0, "{:.0f}"),
    "errors": Target("failed requests", "==", 0, "{:.0f}"),
}
OUT = Path(__file__).resolve().parents[2] / "docs" / "benchmarks"


@dataclass(slots=True)
class Minute:
    minute: int
    requests: int
    errors: int
    p50_ms: float | None
    p99_ms: float | None
    rss_mb: float  # the whole stack: supervisor and every descendant
    rss_by_service_mb: dict[str, float]
    open_files: int
    threads: int
    processes: int
    device_blocks_referenced: int  # KV blocks a sequence holds, over the node's workers
    store_blocks: int
    store_pinned: int


@dataclass
class Tally:
    sent: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def kv_figures(stack: SupervisedStack) -> tuple[int, int, int]:
    """(device blocks referenced, store blocks, store pinned blocks)."""
    info = stack.node_status()
    referenced = sum(
        r.kv_blocks_total - r.kv_blocks_free for r in info.replicas if r.model == stack.model
    )
    with sync_channel(f"127.0.0.1:{stack.base + 3}", stack.identity) as ch:
        s = kvstore_pb2_grpc.KVStoreStub(ch).GetStats(kvstore_pb2.KVStatsRequest(), timeout=10)
    return referenced, s.blocks, s.pinned_blocks


def sample(stack: SupervisedStack, minute: int, tally: Tally, since: int) -> Minute:
    procs = [f for f in (figures(p) for p in [stack.proc.pid, *stack.descendants()]) if f]
    by_service: dict[str, float] = {}
    for f in procs:
        by_service[f.name] = by_service.get(f.name, 0.0) + f.rss_kb / 1024
    lat = tally.latencies_ms[since:]
    referenced, blocks, pinned = kv_figures(stack)
    return Minute(
        minute,
        len(lat),
        len(tally.errors),
        percentile(lat, 50) if lat else None,
        percentile(lat, 99) if lat else None,
        sum(by_service.values()),
        {k: round(v, 1) for k, v in sorted(by_service.items())},
        sum(f.open_files for f in procs),
        sum(f.threads for f in procs),
        len(procs),
        referenced,
        blocks,
        pinned,
    )


async def one(
    client: AsyncClient, model: str, i: int, reference: list[list[int]], tally: Tally
) -> None:
    started = time.perf_counter()
    tokens: list[int] = []
    try:
        async for chunk in client.generate(
            model, prompt=PROMPTS[i], max_tokens=MAX_TOKENS, ignore_eos=True, timeout=120
        ):
            tokens.extend(chunk.token_ids)
    except grpc.aio.AioRpcError as err:
        tally.errors.append(f"{err.code().name}: {err.details()}")
        return
    if tokens != reference[i]:
        tally.errors.append(f"prompt {i}: tokens differ from the reference")
        return
    tally.latencies_ms.append((time.perf_counter() - started) * 1000)


async def soak(
    stack: SupervisedStack, rate: float, duration_s: float, reference: list[list[int]], progress
) -> tuple[list[Minute], Minute, Tally]:
    tally = Tally()
    minutes: list[Minute] = []
    rng = random.Random(7)
    pending: set[asyncio.Task] = set()
    async with AsyncClient(stack.gateway, stack.key) as client:
        start = time.monotonic()
        next_sample, since = start + SAMPLE_S, 0
        next_send = start
        while time.monotonic() - start < duration_s:
            now = time.monotonic()
            if now >= next_sample:
                m = await asyncio.to_thread(sample, stack, len(minutes) + 1, tally, since)
                since = len(tally.latencies_ms)
                minutes.append(m)
                progress(m)
                next_sample += SAMPLE_S
            if now >= next_send:
                task = asyncio.create_task(
                    one(client, stack.model, rng.randrange(len(PROMPTS)), reference, tally)
                )
                pending.add(task)
                task.add_done_callback(pending.discard)
                tally.sent += 1
                next_send += rng.expovariate(rate)
            await asyncio.sleep(max(0.0, min(next_send, next_sample) - time.monotonic()))
        await asyncio.gather(*pending)
    await asyncio.sleep(5.0)  # the workers' last steps and the store's releases settle
    final = await asyncio.to_thread(sample, stack, len(minutes) + 1, tally, since)
    return minutes, final, tally


def capacity(stack: SupervisedStack, seconds: float, clients: int) -> float:
    load = Load(stack, PROMPTS, clients=clients, max_tokens=MAX_TOKENS)
    start = time.monotonic()
    load.start()
    time.sleep(seconds)
    outcomes = load.stop()
    done = [o for o in outcomes if o.code is None and o.ended_at - start <= seconds]
    return len(done) / seconds


def render(result: dict) -> str:
    r = result
    lines = [
        "# Soak: the `make run` stack for 30 minutes at ~70% of its capacity",
        "",
        f"Command: `{r['command']}`  ",
        f"Run: {r['started_utc']} UTC, model {r['model']}, {r['duration_s'] / 60:.0f} minutes  ",
        f"Machine: {r['machine']}",
        "",
        f"Capacity (closed loop, {CAPACITY_CLIENTS} clients, {CAPACITY_S:.0f} s): "
        f"{r['capacity_rps']:.2f} requests/s of {MAX_TOKENS} tokens; offered "
        f"{r['rate_rps']:.2f} requests/s open-loop (Poisson, {LOAD_SHARE:.0%}).",
        "",
        *target_table(Verdict(**v) for v in r["targets"]),
        "",
        "Each minute (stack = the supervisor and every process under it):",
        "",
        "| min | requests | errors (total) | P50 ms | P99 ms | stack RSS MB | worker RSS MB | "
        "open files | threads | device blocks held | store blocks | store pins |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for m in [*r["minutes"], r["final"]]:
        p50 = f"{m['p50_ms']:.0f}" if m["p50_ms"] is not None else "-"
        p99 = f"{m['p99_ms']:.0f}" if m["p99_ms"] is not None else "-"
        worker = m["rss_by_service_mb"].get("services.worker", 0.0)
        label = m["minute"] if m is not r["final"] else "end"
        lines.append(
            f"| {label} | {m['requests']} | {m['errors']} | {p50} | {p99} | "
            f"{m['rss_mb']:.0f} | {worker:.0f} | {m['open_files']} | {m['threads']} | "
            f"{m['device_blocks_referenced']} | {m['store_blocks']} | "
            f"{m['store_pinned']} |"
        )
    lines += [
        "",
        "The `end` row is taken after the load stopped and every request finished: "
        "device blocks still held there are leaked.",
        "",
    ]
    if r["error_samples"]:
        lines += ["First errors:", "", *[f"- {e}" for e in r["error_samples"]], ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__)
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--duration", type=float, default=DURATION_S, help="seconds of load")
    ap.add_argument("--share", type=float, default=LOAD_SHARE)
    ap.add_argument(
        "--kv-blocks",
        type=int,
        default=KV_BLOCKS,
        help="device KV blocks per worker (default %(default)s)",
    )
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--command", default="make soak")
    args = ap.parse_args(argv)
    started = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    with tempfile.TemporaryDirectory(prefix="strata-soak-") as tmp:
        # A device pool smaller than the prompts' working set: blocks are evicted to the KV
        # store and loaded back all along, so its slots and pins are soaked too.
        stack = SupervisedStack(
            Path(tmp),
            env={"STRATA_TORCH_THREADS": "1", "STRATA_KV_BLOCKS": str(args.kv_blocks)},
            model=args.model,
        )
        try:
            stack.start()
            stack.wait_whole()
            probe = Load(stack, PROMPTS, max_tokens=MAX_TOKENS)
            reference = [probe.one(i).tokens for i in range(len(PROMPTS))]
            cap = capacity(stack, CAPACITY_S, CAPACITY_CLIENTS)
            rate = args.share * cap
            print(
                f"capacity {cap:.2f} requests/s; offering {rate:.2f}/s for "
                f"{args.duration / 60:.0f} min",
                file=sys.stderr,
            )

            def progress(m: Minute) -> None:
                print(
                    f"minute {m.minute}: {m.requests} requests, {m.errors} errors, stack RSS "
                    f"{m.rss_mb:.0f} MB, {m.open_files} files, {m.threads} threads, "
                    f"{m.device_blocks_referenced} device blocks held",
                    file=sys.stderr,
                )

            minutes, final, tally = asyncio.run(
                soak(stack, rate, args.duration, reference, progress)
            )
        finally:
            stack.stop()
    base = minutes[min(WARMUP_MIN, len(minutes)) - 1].rss_mb if minutes else final.rss_mb
    growth = (final.rss_mb - base) / base if base else math.nan
    leaked = final.device_blocks_referenced + final.store_pinned
    verdicts = {
        "rss": TARGETS["rss"].judge(growth, f"{growth:+.1%}"),
        "leak": TARGETS["leak"].judge(leaked),
        "errors": TARGETS["errors"].judge(
            len(tally.errors), f"{len(tally.errors)} of {tally.sent}"
        ),
    }
    result = {
        "command": args.command,
        "started_utc": started,
        "model": args.model,
        "machine": host_line(),
        "duration_s": args.duration,
        "capacity_rps": cap,
        "rate_rps": rate,
        "sent": tally.sent,
        "failed": len(tally.errors),
        "rss_growth": growth,
        "leaked_blocks": leaked,
        "targets": [asdict(v) for v in verdicts.values()],
        "met": {k: v.passed for k, v in verdicts.items()},
        "minutes": [asdict(m) for m in minutes],
        "final": asdict(final),
        "error_samples": tally.errors[:10],
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "soak.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "soak.md").write_text(render(result))
    print(render(result))
    return 0 if all_met(verdicts.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
