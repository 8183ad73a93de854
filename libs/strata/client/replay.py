"""Open-loop replay: send a workload to a server at its scheduled times and measure it. The
server is Strata's gateway over gRPC (the default target) or any OpenAI-compatible HTTP server
(strata.client.openai_target: vLLM, SGLang, llama.cpp, Strata's own HTTP port), measured by the
same client-side layer.

Open loop means each request starts at its offset from the replay's start whether or not earlier
ones have finished, as real users do; a closed loop (wait, then send) would hide queueing by
slowing the load down exactly when the server falls behind. If the sender itself falls behind
(too many requests due at once for the event loop), the request still goes out and its record
shows how late it started.

A replay against Strata is one evaluation run: Metrics.StartRun before the first request, every
request tagged with `x-strata-run-id: <id>` and its tenant's `authorization: Bearer <key>`,
Metrics.FinishRun after the last with the client's own summary, which the server keeps for
comparison with its span-derived figures. The run's directory gets requests.jsonl (one ClientRecord
a line) and summary.json; both are written before FinishRun, so a metrics outage at the end loses
nothing.

Refusals (opt-in, ReplayConfig.retry): a RESOURCE_EXHAUSTED answer with a retry-after-ms hint
(a tenant over its share or its rate) is sent again after the hint, as a tenant's client would,
until RetryPolicy.give_up_s after the first attempt; then the refusal stands. The record's
sent_s is the first attempt, so TTFT and E2E include the waiting a user would see, and
ReplayResult.attempts keeps when each attempt of a refused request went out. Without a policy a
refusal is final, like any other status.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TextIO

import grpc

from strata.client.openai_target import OpenAITarget
from strata.client.sdk import build_request
from strata.eval.client_metrics import OK, ClientRecord, RunSummary, summarize_run
from strata.eval.workload import WorkloadRequest
from strata.rpc.channels import public_channel
from strata.telemetry.names import RETRY_AFTER_METADATA, RUN_ID_METADATA
from strata.v1 import (
    common_pb2,
    gateway_pb2,
    gateway_pb2_grpc,
    metrics_pb2,
    metrics_pb2_grpc,
)

RUN_KIND = "replay"
TTY_PROGRESS_INTERVAL_S = 0.25
PLAIN_PROGRESS_INTERVAL_S = 5.0
METRICS_TIMEOUT_S = 10.0
DEFAULT_REQUEST_TIMEOUT_S = 300.0
TARGETS = ("grpc", "openai")


@dataclass(slots=True, frozen=True)
class RetryPolicy:
    """Send a refused request (RESOURCE_EXHAUSTED carrying retry-after-ms) again after the hint,
    or after min_wait_s if that is longer, while the next attempt would go out at most give_up_s
    after the first one. A floor keeps many refused requests given the same short hint from
    coming back all at once, again and again."""

    give_up_s: float = 30.0
    min_wait_s: float = 0.0

    def __post_init__(self) -> None:
        if not self.give_up_s >= 0:
            raise ValueError(f"give_up_s must not be negative, got {self.give_up_s}")
        if not self.min_wait_s >= 0:
            raise ValueError(f"min_wait_s must not be negative, got {self.min_wait_s}")


class ReplayError(RuntimeError):
    """The run could not be opened or closed on the metrics service; the message says what
    happened to the requests and where any results are."""


@dataclass(slots=True, frozen=True)
class ReplayConfig:
    """gateway/metrics are host:port (the Metrics API: the gateway's, scoped to `run_key`);
    max_duration_s stops *sending* after that much wall time (requests in flight still
    finish, each within request_timeout_s). `run_key` opens and closes the run: a tenant key
    (the run is that tenant's) or the admin key; `tls_ca` (PEM) when the gateway serves TLS."""

    model: str
    gateway: str
    metrics: str
    out_dir: str
    name: str = ""
    params: Mapping[str, object] = field(default_factory=dict)
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S
    max_requests: int | None = None
    max_duration_s: float | None = None
    ignore_eos: bool = True
    prefix_public: bool = False
    retry: RetryPolicy | None = None  # None: a refusal is final
    run_key: str = ""
    tls_ca: bytes | None = None
    # "grpc": Strata's gateway (`gateway`); "openai": any OpenAI-compatible server at `url`
    # (strata.client.openai_target). With `metrics` empty no run is opened: the client's own
    # layer is the whole result (a server that is not Strata has no layered report).
    target: str = "grpc"
    url: str = ""

    def __post_init__(self) -> None:
        if not self.request_timeout_s > 0:
            raise ValueError(f"request_timeout_s must be positive, got {self.request_timeout_s}")
        if self.max_requests is not None and self.max_requests < 1:
            raise ValueError(f"max_requests must be at least 1, got {self.max_requests}")
        if self.max_duration_s is not None and not self.max_duration_s > 0:
            raise ValueError(f"max_duration_s must be positive, got {self.max_duration_s}")
        if self.target not in TARGETS:
            raise ValueError(f"target must be one of {', '.join(TARGETS)}, got {self.target!r}")
        if self.target == "openai" and not self.url:
            raise ValueError("the openai target needs the server's base URL (--url)")


@dataclass(slots=True)
class ReplayResult:
    run_id: int
    records: list[ClientRecord]
    summary: RunSummary
    not_sent: int
    run_dir: str
    summary_json: dict
    # request index -> send offsets (s from the replay's start) of every attempt, for each
    # request refused at least once: len - 1 refusals if it was served in the end, else len
    attempts: dict[int, list[float]] = field(default_factory=dict)


async def replay(
    workload: Sequence[WorkloadRequest],
    config: ReplayConfig,
    *,
    progress_stream: TextIO | None = None,
) -> ReplayResult:
    """Run the workload as one evaluation run; progress goes to progress_stream when given.

    Raises ReplayError when the metrics service cannot open or close the run; a request's own
    failure (any gRPC status) is recorded in its ClientRecord, never raised.
    """
    metrics_channel = public_channel(config.metrics, config.tls_ca) if config.metrics else None
    target: GrpcTarget | OpenAITarget
    if config.target == "openai":
        target = OpenAITarget(config.url, config.model, config.request_timeout_s, config.ignore_eos)
    else:
        target = GrpcTarget(public_channel(config.gateway, config.tls_ca), config)
    key = (("authorization", f"Bearer {config.run_key}"),) if config.run_key else ()
    try:
        metrics = metrics_pb2_grpc.MetricsStub(metrics_channel) if metrics_channel else None
        run_id = 0
        if metrics is not None:
            try:
                run = await metrics.StartRun(
                    metrics_pb2.StartRunRequest(
                        name=config.name, kind=RUN_KIND, params_json=json.dumps(dict(config.params))
                    ),
                    metadata=key,
                    timeout=METRICS_TIMEOUT_S,
                )
            except grpc.aio.AioRpcError as err:
                raise ReplayError(
                    f"the metrics service at {config.metrics} did not open a run "
                    f"({err.code().name}: {err.details()}); nothing was sent. Start the stack "
                    f"(make run) or point --metrics at the metrics service"
                ) from err
            run_id = run.run_id
        started_unix_ms = int(time.time() * 1000)
        attempts: dict[int, list[float]] = {}
        records, not_sent, duration_s = await _send_all(
            target, workload, config, run_id, progress_stream, time.perf_counter, attempts
        )
        summary = summarize_run(records, duration_s)
        summary_json = {
            "run_id": run_id,
            "name": config.name,
            "model": config.model,
            "target": config.target,
            "url": config.url,
            "started_unix_ms": started_unix_ms,
            "not_sent": not_sent,
            "params": dict(config.params),
            **summary.to_json(),
        }
        run_dir = _write_results(
            config.out_dir, f"run-{run_id}" if run_id else f"local-{started_unix_ms}", records,
            summary_json,
        )  # fmt: skip
        if metrics is not None:
            try:
                await metrics.FinishRun(
                    metrics_pb2.FinishRunRequest(
                        run_id=run_id, client_summary_json=json.dumps(summary_json)
                    ),
                    metadata=key,
                    timeout=METRICS_TIMEOUT_S,
                )
            except grpc.aio.AioRpcError as err:
                raise ReplayError(
                    f"run {run_id} ran, but the metrics service at {config.metrics} did not "
                    f"close it ({err.code().name}: {err.details()}); the client's results are "
                    f"in {run_dir}"
                ) from err
        return ReplayResult(run_id, records, summary, not_sent, run_dir, summary_json, attempts)
    finally:
        await target.close()
        if metrics_channel is not None:
            await metrics_channel.close()


class GrpcTarget:
    """Strata's gateway over gRPC Generate (the replay's default target)."""

    def __init__(self, channel: grpc.aio.Channel, config: ReplayConfig) -> None:
        self.channel = channel
        self.stub = gateway_pb2_grpc.GatewayStub(channel)
        self.config = config

    async def attempt(
        self,
        request: WorkloadRequest,
        run_id: int,
        record: ClientRecord,
        sent: float,
        clock: Callable[[], float],
    ) -> tuple[int, bool, float | None]:
        config = self.config
        message = build_request(
            config.model,
            request.prompt,
            max_tokens=request.max_tokens,
            ignore_eos=config.ignore_eos,
            prefix_public=config.prefix_public,
        )
        metadata = (("authorization", f"Bearer {request.api_key}"), (RUN_ID_METADATA, str(run_id)))
        return await _attempt(self.stub, message, metadata, config, record, sent, clock)

    async def close(self) -> None:
        await self.channel.close()


async def _send_all(
    target: GrpcTarget | OpenAITarget,
    workload: Sequence[WorkloadRequest],
    config: ReplayConfig,
    run_id: int,
    progress_stream: TextIO | None,
    clock: Callable[[], float],
    attempts: dict[int, list[float]],
) -> tuple[list[ClientRecord], int, float]:
    due = list(workload)[: config.max_requests]
    progress = Progress(len(due), progress_stream, clock)
    tasks: list[asyncio.Task[ClientRecord]] = []
    start = clock()
    ticker = asyncio.create_task(progress.run())
    try:
        for request in due:
            delay = start + request.send_at_s - clock()
            if delay > 0:
                await asyncio.sleep(delay)
            if config.max_duration_s is not None and clock() - start > config.max_duration_s:
                break
            tasks.append(
                asyncio.create_task(
                    _send_one(target, request, config, run_id, start, progress, clock, attempts)
                )
            )
        records = list(await asyncio.gather(*tasks))
    finally:
        ticker.cancel()
        for task in tasks:
            task.cancel()
    end = max((r.finished_s for r in records if r.finished_s is not None), default=0.0)
    progress.finish()
    return records, len(due) - len(tasks), end


async def _send_one(
    target: GrpcTarget | OpenAITarget,
    request: WorkloadRequest,
    config: ReplayConfig,
    run_id: int,
    start: float,
    progress: Progress,
    clock: Callable[[], float],
    attempts: dict[int, list[float]],
) -> ClientRecord:
    sent = clock()
    record = ClientRecord(
        index=request.index,
        tenant=request.tenant,
        scheduled_s=request.send_at_s,
        sent_s=sent - start,
        synth_prompt_tokens=request.prompt_tokens,
        max_tokens=request.max_tokens,
        sla_class=request.sla_class,
    )
    progress.sent()
    sent_at = [sent - start]
    while True:
        received, refused, retry_after_s = await target.attempt(
            request, run_id, record, sent, clock
        )
        if not refused:
            break
        attempts[request.index] = sent_at
        if config.retry is None or retry_after_s is None:
            break
        wait_s = max(retry_after_s, config.retry.min_wait_s)
        if clock() + wait_s - sent > config.retry.give_up_s:
            break
        await asyncio.sleep(wait_s)
        record.status, record.error = OK, ""
        sent_at.append(clock() - start)
    record.finished_s = clock() - start
    record.output_tokens = received
    progress.done(record.ok)
    return record


async def _attempt(
    stub: gateway_pb2_grpc.GatewayStub,
    message: gateway_pb2.GenerateRequest,
    metadata: tuple[tuple[str, str], ...],
    config: ReplayConfig,
    record: ClientRecord,
    sent: float,
    clock: Callable[[], float],
) -> tuple[int, bool, float | None]:
    """One call, streamed into `record` (latencies from `sent`, the first attempt); returns the
    tokens received, whether it was refused before any token, and the refusal's retry-after
    hint in seconds (None without one)."""
    received = 0
    last_token_at = sent
    call = stub.Generate(message, metadata=metadata, timeout=config.request_timeout_s)
    try:
        async for chunk in call:
            now = clock()
            if chunk.token_ids or chunk.text:
                if record.ttft_s is None:
                    record.ttft_s = now - sent
                else:
                    record.itl_s.append(now - last_token_at)
                last_token_at = now
                received += len(chunk.token_ids)
            record.request_id = chunk.request_id or record.request_id
            record.trace_id = chunk.trace_id or record.trace_id
            if chunk.finish_reason:
                record.finish_reason = common_pb2.FinishReason.Name(chunk.finish_reason)
            if chunk.HasField("usage"):
                record.prompt_tokens = chunk.usage.prompt_tokens
                record.cached_tokens = chunk.usage.cached_prompt_tokens
                received = chunk.usage.completion_tokens
        record.e2e_s = clock() - sent
    except grpc.aio.AioRpcError as err:
        record.status = err.code().name
        record.error = err.details() or ""
        # Only a refusal before any token: sending again after output would duplicate it.
        if err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and record.ttft_s is None:
            return received, True, _retry_after_s(err)
    finally:
        call.cancel()
    return received, False, None


def _retry_after_s(err: grpc.aio.AioRpcError) -> float | None:
    for key, value in err.trailing_metadata() or ():
        if key == RETRY_AFTER_METADATA:
            text = value.decode() if isinstance(value, bytes) else value
            try:
                ms = float(text)
            except ValueError:
                return None
            return ms / 1000.0 if math.isfinite(ms) and ms >= 0 else None
    return None


def _write_results(
    out_dir: str, name: str, records: Sequence[ClientRecord], summary_json: dict
) -> str:
    run_dir = os.path.join(out_dir, name)
    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, "requests.jsonl"), "w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record.to_json()) + "\n")
    with open(os.path.join(run_dir, "summary.json"), "w", encoding="utf-8") as f:
        json.dump(summary_json, f, indent=2)
        f.write("\n")
    return run_dir


class Progress:
    """Live counters (sent, in flight, done, errors, completion rate) for a person watching.

    On a terminal one line is rewritten in place at most every TTY_PROGRESS_INTERVAL_S; into a
    file or pipe a plain line is appended every PLAIN_PROGRESS_INTERVAL_S, so logs stay readable.
    """

    def __init__(
        self,
        total: int,
        stream: TextIO | None,
        clock: Callable[[], float],
        interval_s: float | None = None,
    ) -> None:
        self.total = total
        self.stream = stream
        self.clock = clock
        self.tty = stream is not None and stream.isatty()
        self.interval_s = interval_s or (
            TTY_PROGRESS_INTERVAL_S if self.tty else PLAIN_PROGRESS_INTERVAL_S
        )
        self.n_sent = self.n_done = self.n_errors = 0
        self._start = clock()
        self._last_at = self._start
        self._last_done = 0

    def sent(self) -> None:
        self.n_sent += 1

    def done(self, ok: bool) -> None:
        self.n_done += 1
        self.n_errors += 0 if ok else 1

    def line(self) -> str:
        now = self.clock()
        span = now - self._last_at
        rate = (self.n_done - self._last_done) / span if span > 0 else 0.0
        self._last_at, self._last_done = now, self.n_done
        return (
            f"[{now - self._start:7.1f}s] sent {self.n_sent}/{self.total}  in flight "
            f"{self.n_sent - self.n_done}  done {self.n_done}  errors {self.n_errors}  "
            f"{rate:.1f} req/s"
        )

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            self._emit()

    def finish(self) -> None:
        self._emit()
        if self.tty and self.stream is not None:  # tty implies a stream
            self.stream.write("\n")
            self.stream.flush()

    def _emit(self) -> None:
        if self.stream is None:
            return
        if self.tty:
            self.stream.write("\r\x1b[2K" + self.line())
        else:
            self.stream.write(self.line() + "\n")
        self.stream.flush()
