"""Online latency: an open-loop client streaming Worker.Generate from a decode worker subprocess
at a sweep of Poisson rates, with request sizes from the Azure conversation trace (scaled, see
workload.py). Per request: TTFT (send -> first token chunk), TPOT ((E2E - TTFT) / (tokens - 1)),
E2E (send -> final chunk).

Each rate is bounded twice: at most `max_requests` arrivals within `max_seconds`, then at most
`drain_seconds` for stragglers; whatever is still streaming is cancelled (the worker aborts it
and frees its blocks) and counted, never silently dropped. The worker is idle again before the
next rate starts.

    python -m benchmarks.engine.online --trace T.csv --rates 1,2,4,8 --out R.json --raw R.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from dataclasses import asdict, dataclass

import grpc
import uvloop

from benchmarks.engine.bench_model import BENCH_MODEL
from benchmarks.engine.results import LatencySummary, RateResult, write_json
from benchmarks.engine.worker_process import WorkerProcess, WorkerSettings
from benchmarks.engine.workload import (
    LengthMapping,
    pick_lengths,
    poisson_offsets,
    prompt_text,
)
from strata.core.stats import summarize
from strata.eval.trace_lengths import RequestLengths, read_azure_lengths
from strata.rpc.server import channel
from strata.v1 import common_pb2, worker_pb2, worker_pb2_grpc

SEED = 20231116


@dataclass(slots=True)
class RequestRecord:
    rate: float
    index: int
    prompt_tokens: int
    max_tokens: int
    sent_at_s: float  # offset from the rate's start
    status: str  # "completed", "cancelled", "failed"
    output_tokens: int = 0
    ttft_s: float | None = None
    e2e_s: float | None = None
    finish_reason: str = ""
    error: str = ""

    @property
    def tpot_s(self) -> float | None:
        if self.status != "completed" or self.output_tokens < 2:
            return None
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1)


@dataclass(slots=True, frozen=True)
class SweepConfig:
    rates: tuple[float, ...]
    max_requests: int = 60
    max_seconds: float = 40.0
    drain_seconds: float = 30.0
    mapping: LengthMapping = LengthMapping()


async def one_request(
    stub: worker_pb2_grpc.WorkerStub, record: RequestRecord, text: str, start: float
) -> None:
    """Stream one generation into `record`; a cancellation leaves it marked "cancelled"."""
    spec = common_pb2.GenerationSpec(
        model=BENCH_MODEL,
        prompt=text,
        max_tokens=record.max_tokens,
        sampling=common_pb2.SamplingParams(ignore_eos=True),
    )
    sent = time.perf_counter()
    record.sent_at_s = sent - start
    record.status = "cancelled"
    try:
        call = stub.Generate(
            worker_pb2.WorkerGenerateRequest(
                request_id=f"r{record.rate:g}-{record.index}", tenant="bench", spec=spec
            )
        )
        async for chunk in call:
            if chunk.token_ids:
                if record.ttft_s is None:
                    record.ttft_s = time.perf_counter() - sent
                record.output_tokens += len(chunk.token_ids)
            if chunk.finish_reason:
                record.e2e_s = time.perf_counter() - sent
                record.finish_reason = common_pb2.FinishReason.Name(chunk.finish_reason)
                record.status = "completed"
    except grpc.aio.AioRpcError as err:
        record.status = "failed"
        record.error = f"{err.code().name}: {err.details()}"


async def run_rate(
    stub: worker_pb2_grpc.WorkerStub,
    rate: float,
    sizes: list[RequestLengths],
    cfg: SweepConfig,
    seed: int,
) -> tuple[RateResult, list[RequestRecord]]:
    rng = random.Random(seed)
    offsets = poisson_offsets(rate, min(cfg.max_requests, len(sizes)), cfg.max_seconds, rng)
    # fresh text at every rate: the worker's prefix cache must not serve one rate from another
    texts = [prompt_text(s.prompt_tokens, rng) for s in sizes[: len(offsets)]]
    records = [
        RequestRecord(
            rate=rate,
            index=i,
            prompt_tokens=s.prompt_tokens,
            max_tokens=s.output_tokens,
            sent_at_s=o,
            status="pending",
        )
        for i, (s, o) in enumerate(zip(sizes, offsets))
    ]
    start = time.perf_counter()
    tasks = []
    for rec, offset in zip(records, offsets):
        await asyncio.sleep(max(0.0, start + offset - time.perf_counter()))
        tasks.append(asyncio.create_task(one_request(stub, rec, texts[rec.index], start)))
    drain_until = start + (offsets[-1] if offsets else 0.0) + cfg.drain_seconds
    _, pending = await asyncio.wait(tasks, timeout=max(0.0, drain_until - time.perf_counter()))
    for task in pending:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    seconds = time.perf_counter() - start
    return summarize_rate(rate, records, seconds), records


def summarize_rate(rate: float, records: list[RequestRecord], seconds: float) -> RateResult:
    done = [r for r in records if r.status == "completed"]

    def ms(values: list[float]) -> LatencySummary | None:
        s = summarize([v * 1000.0 for v in values])
        return None if s is None else LatencySummary(s.p50, s.p95, s.p99, s.mean, s.count)

    return RateResult(
        rate=rate,
        sent=len(records),
        completed=len(done),
        cancelled=sum(r.status == "cancelled" for r in records),
        failed=sum(r.status == "failed" for r in records),
        seconds=seconds,
        output_tokens=sum(r.output_tokens for r in records),
        ttft_ms=ms([r.ttft_s for r in done]),
        tpot_ms=ms([r.tpot_s for r in done if r.tpot_s is not None]),
        e2e_ms=ms([r.e2e_s for r in done]),
    )


async def wait_idle(stub: worker_pb2_grpc.WorkerStub, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        stats = await stub.GetStats(worker_pb2.GetStatsRequest(), timeout=5.0)
        if stats.running_requests == 0 and stats.waiting_requests == 0:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"the worker still has {stats.running_requests} running and "
                f"{stats.waiting_requests} waiting requests after the cancels"
            )
        await asyncio.sleep(0.2)


async def sweep(
    trace_path: str, cfg: SweepConfig, settings: WorkerSettings, log_path: str
) -> tuple[dict, list[RateResult], list[RequestRecord]]:
    rng = random.Random(SEED)
    pool = [cfg.mapping.apply(r) for r in read_azure_lengths(trace_path)]
    # the same request sizes, in the same order, at every rate
    sizes = pick_lengths(pool, cfg.max_requests, rng)
    results: list[RateResult] = []
    records: list[RequestRecord] = []
    async with WorkerProcess(settings, log_path) as worker, channel(worker.address) as ch:
        stub = worker_pb2_grpc.WorkerStub(ch)
        for i in range(2):  # warm-up: first-call allocations and kernel selection
            warm = RequestRecord(
                rate=0, index=i, prompt_tokens=64, max_tokens=8, sent_at_s=0, status="pending"
            )
            await one_request(stub, warm, prompt_text(64, rng), time.perf_counter())
        for i, rate in enumerate(cfg.rates):
            await wait_idle(stub)
            result, recs = await run_rate(stub, rate, sizes, cfg, SEED + 1 + i)
            print(
                f"online {rate:g} req/s: {result.completed}/{result.sent} completed, "
                f"{result.output_tok_s:.1f} output tok/s",
                flush=True,
            )
            results.append(result)
            records.extend(recs)
        done = [r for r in records if r.status == "completed"]
        meta = {
            "worker_load_seconds": worker.load_seconds,
            # requests ignore EOS; this counts any that still stopped short
            "completed": len(done),
            "ran_to_length": sum(r.output_tokens == r.max_tokens for r in done),
            "trace": trace_path,
            "trace_rows": len(pool),
            "mapping": cfg.mapping.describe(),
            "settings": asdict(settings),
            "max_requests": cfg.max_requests,
            "max_seconds": cfg.max_seconds,
            "drain_seconds": cfg.drain_seconds,
        }
    return meta, results, records


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--trace", required=True, help="Azure LLM inference trace CSV")
    p.add_argument("--rates", default="1,2,4,8", help="offered req/s, comma-separated")
    p.add_argument("--max-requests", type=int, default=60)
    p.add_argument("--max-seconds", type=float, default=40.0)
    p.add_argument("--drain-seconds", type=float, default=30.0)
    p.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    p.add_argument("--threads", type=int, default=2, help="the worker's torch threads")
    p.add_argument("--out", required=True, help="JSON summary per rate")
    p.add_argument("--raw", required=True, help="JSON lines, one per request")
    p.add_argument("--worker-log", required=True)
    args = p.parse_args()
    cfg = SweepConfig(
        rates=tuple(float(r) for r in args.rates.split(",")),
        max_requests=args.max_requests,
        max_seconds=args.max_seconds,
        drain_seconds=args.drain_seconds,
    )
    settings = WorkerSettings(model=BENCH_MODEL, dtype=args.dtype, torch_threads=args.threads)
    # uvloop, as the services use: a slow client loop would inflate TTFT, not the worker's
    meta, results, records = uvloop.run(sweep(args.trace, cfg, settings, args.worker_log))
    write_json(args.out, {"meta": meta, "rates": [r.to_dict() for r in results]})
    with open(args.raw, "w", encoding="utf-8") as f:
        for rec in records:
            f.write(json.dumps({**asdict(rec), "tpot_s": rec.tpot_s}) + "\n")


if __name__ == "__main__":
    main()
