"""Where a request's time goes before its first token: the spans of sequential requests, each
span's start after the gateway's span started and its duration, medians over the requests
(strata's own spans and the gRPC instrumentation's client and server spans of every hop)."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

from benchmarks.common.stack import ComposeStack
from strata.client.sdk import Client
from strata.rpc.channels import sync_channel
from strata.telemetry import names
from strata.v1 import metrics_pb2, metrics_pb2_grpc

TRACE_WAIT_S = 30.0


@dataclass(slots=True, frozen=True)
class SpanTiming:
    name: str
    start_ms: float  # median offset from the gateway span's start
    duration_ms: float  # median
    count: int


def span_breakdown(
    stack: ComposeStack, key: str, model: str, requests: int = 30, max_tokens: int = 4
) -> tuple[list[SpanTiming], float]:
    """The median span timings of `requests` sequential requests (after 5 to warm up), and
    their median client-side TTFT in ms."""
    traces, ttfts = [], []
    with Client(stack.addr("gateway"), key) as client:
        for i in range(requests + 5):
            t0, first, trace_id = time.perf_counter(), None, ""
            for chunk in client.generate(
                model, "the path of a request", max_tokens=max_tokens, ignore_eos=True
            ):
                if chunk.token_ids and first is None:
                    first = time.perf_counter()
                trace_id = chunk.trace_id or trace_id
            if i >= 5 and first is not None:
                traces.append(trace_id)
                ttfts.append((first - t0) * 1000)
    rows: dict[str, list[tuple[float, float]]] = {}
    with sync_channel(stack.addr("metrics"), stack.identity) as ch:
        stub = metrics_pb2_grpc.MetricsStub(ch)
        for trace_id in traces:
            deadline = time.monotonic() + TRACE_WAIT_S
            while True:
                spans = stub.GetTrace(metrics_pb2.GetTraceRequest(trace_id=trace_id)).spans
                names_seen = {s.name for s in spans}
                if {names.SPAN_GATEWAY_GENERATE, names.SPAN_WORKER_GENERATE} <= names_seen:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the spans of trace {trace_id} never all arrived")
                time.sleep(0.2)
            root = next(s for s in spans if s.name == names.SPAN_GATEWAY_GENERATE)
            for s in spans:
                rows.setdefault(s.name, []).append(
                    (
                        (s.start_unix_nano - root.start_unix_nano) / 1e6,
                        (s.end_unix_nano - s.start_unix_nano) / 1e6,
                    )
                )
    timings = [
        SpanTiming(
            name,
            statistics.median(a for a, _ in v),
            statistics.median(b for _, b in v),
            len(v),
        )
        for name, v in rows.items()
    ]
    return sorted(timings, key=lambda t: t.start_ms), statistics.median(ttfts)
