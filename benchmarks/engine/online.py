"""Online latency: an open-loop client streaming Worker.Generate from a decode worker subprocess
at a sweep of Poisson rates, with request sizes from the Azure conversation trace (scaled, see
workload.py). Per request, the replay client's record (strata.eval.client_metrics.ClientRecord):
TTFT (send -> first token chunk), TPOT ((E2E - TTFT) / (tokens - 1)), E2E (send -> final chunk).

Each rate is bounded twice: at most `max_requests` arrivals within `max_seconds`, then at most
`drain_seconds` for stragglers; whatever is still streaming is cancelled (the worker aborts it
and frees its blocks) and counted, never silently dropped. The worker is idle again before the
next rate starts.

    python -m benchmarks.engine.online --trace T.csv --rates 1,2,4,8,12,16 --out R.json \
        --raw R.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
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
from strata.eval.client_metrics import OK, ClientRecord
from strata.eval.trace_lengths import RequestLengths, read_azure_lengths
from strata.rpc.server import channel
from strata.v1 import common_pb2, worker_pb2, worker_pb2_grpc

SEED = 20231116


TENANT = "bench"
# A request's status besides OK and the gRPC code of a failure: still streaming when the drain
# ended (its task cancelled, the worker aborts it), or never sent.
CANCELLED = "CANCELLED"
NOT_SENT = "NOT_SENT"


@dataclass(slots=True, frozen=True)
class SweepConfig:
    rates: tuple[float, ...]
    max_requests: int = 60
    max_seconds: float = 40.0
    drain_seconds: float = 30.0
    mapping: LengthMapping = LengthMapping()


async def one_request(
    stub: worker_pb2_grpc.WorkerStub, record: ClientRecord, text: str, start: float, rate: float
) -> None:
    """Stream one generation into `record`; a cancellation leaves it CANCELLED."""
    spec = common_pb2.GenerationSpec(
        model=BENCH_MODEL,
        prompt=text,
        max_tokens=record.max_tokens,
        sampling=common_pb2.SamplingParams(ignore_eos=True),
    )
    sent = time.perf_counter()
    record.sent_s = sent - start
    record.status = CANCELLED
    record.request_id = f"r{rate:g}-{record.index}"
    last_token_at = sent
    try:
        call = stub.Generate(
            worker_pb2.WorkerGenerateRequest(
                request_id=record.request_id, tenant=record.tenant, spec=spec
            )
        )
        async for chunk in call:
            now = time.perf_counter()
            if chunk.token_ids:
                if record.ttft_s is None:
                    record.ttft_s = now - sent
                else:
                    record.itl_s.append(now - last_token_at)
                last_token_at = now
                record.output_tokens += len(chunk.token_ids)
            if chunk.HasField("usage"):
                record.prompt_tokens = chunk.usage.prompt_tokens
                record.cached_tokens = chunk.usage.cached_prompt_tokens
            if chunk.finish_reason:
                record.e2e_s = now - sent
                record.finish_reason = common_pb2.FinishReason.Name(chunk.finish_reason)
                record.status = OK
    except grpc.aio.AioRpcError as err:
        record.status = err.code().name
        record.error = err.details() or ""
    finally:
        record.finished_s = time.perf_counter() - start


def _unsent(index: int, lengths: RequestLengths, offset: float) -> ClientRecord:
    return ClientRecord(
        index=index,
        tenant=TENANT,
        scheduled_s=offset,
        sent_s=offset,
        synth_prompt_tokens=lengths.prompt_tokens,
        max_tokens=lengths.output_tokens,
        status=NOT_SENT,
    )


async def run_rate(
    stub: worker_pb2_grpc.WorkerStub,
    rate: float,
    sizes: list[RequestLengths],
    cfg: SweepConfig,
    seed: int,
) -> tuple[RateResult, list[ClientRecord]]:
    rng = random.Random(seed)
    offsets = poisson_offsets(rate, min(cfg.max_requests, len(sizes)), cfg.max_seconds, rng)
    # fresh text at every rate: the worker's prefix cache must not serve one rate from another
    texts = [prompt_text(s.prompt_tokens, rng) for s in sizes[: len(offsets)]]
    records = [_unsent(i, s, o) for i, (s, o) in enumerate(zip(sizes, offsets))]
    start = time.perf_counter()
    tasks = []
    for rec, offset in zip(records, offsets):
        await asyncio.sleep(max(0.0, start + offset - time.perf_counter()))
        tasks.append(asyncio.create_task(one_request(stub, rec, texts[rec.index], start, rate)))
    drain_until = start + (offsets[-1] if offsets else 0.0) + cfg.drain_seconds
    _, pending = await asyncio.wait(tasks, timeout=max(0.0, drain_until - time.perf_counter()))
    for task in pending:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    seconds = time.perf_counter() - start
    return summarize_rate(rate, records, seconds), records


def summarize_rate(rate: float, records: list[ClientRecord], seconds: float) -> RateResult:
    """Latencies of the requests that completed; the others counted as cancelled (still
    streaming when the drain ended) or failed (an error status)."""
    done = [r for r in records if r.ok]

    def ms(values: list[float]) -> LatencySummary | None:
        s = summarize([v * 1000.0 for v in values])
        return None if s is None else LatencySummary(s.p50, s.p95, s.p99, s.mean, s.count)

    return RateResult(
        rate=rate,
        sent=len(records),
        completed=len(done),
        cancelled=sum(r.status == CANCELLED for r in records),
        failed=sum(r.status not in (OK, CANCELLED, NOT_SENT) for r in records),
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
) -> tuple[dict, list[RateResult], list[tuple[float, ClientRecord]]]:
    """The sweep's metadata, each rate's result, and every request with the rate it ran at."""
    rng = random.Random(SEED)
    pool = [cfg.mapping.apply(r) for r in read_azure_lengths(trace_path)]
    # the same request sizes, in the same order, at every rate
    sizes = pick_lengths(pool, cfg.max_requests, rng)
    results: list[RateResult] = []
    records: list[tuple[float, ClientRecord]] = []
    data_dir = os.path.join(os.path.dirname(log_path) or ".", "online-worker-data")
    async with (
        WorkerProcess(settings, log_path, data_dir) as worker,
        channel(worker.address, worker.identity) as ch,
    ):
        stub = worker_pb2_grpc.WorkerStub(ch)
        for i in range(2):  # warm-up: first-call allocations and kernel selection
            warm = _unsent(i, RequestLengths(64, 8), 0.0)
            await one_request(stub, warm, prompt_text(64, rng), time.perf_counter(), 0.0)
        for i, rate in enumerate(cfg.rates):
            await wait_idle(stub)
            result, recs = await run_rate(stub, rate, sizes, cfg, SEED + 1 + i)
            print(
                f"online {rate:g} req/s: {result.completed}/{result.sent} completed, "
                f"{result.output_tok_s:.1f} output tok/s",
                flush=True,
            )
            results.append(result)
            records.extend((rate, r) for r in recs)
        done = [r for _, r in records if r.ok]
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
    p.add_argument("--rates", default="1,2,4,8,12,16", help="offered req/s, comma-separated")
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
        for rate, rec in records:
            f.write(json.dumps({"rate": rate, **rec.to_json()}) + "\n")


if __name__ == "__main__":
    main()
