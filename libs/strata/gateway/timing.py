"""A request's latency as the gateway sees it, recorded on its span when the last chunk passes.

TTFT and E2E count from the request's arrival at the gateway; ITL is the gap between
token-carrying chunks, as replay clients count it; TPOT is (last - first) / (tokens - 1).
"""

from __future__ import annotations

import time

from opentelemetry import trace

from strata.core.stats import REPORT_PERCENTILES, percentiles
from strata.telemetry import names
from strata.v1 import common_pb2

FINISH_NAMES = {
    v: k.removeprefix("FINISH_REASON_").lower() for k, v in common_pb2.FinishReason.items()
}


class Timing:
    __slots__ = ("start", "first", "last", "tokens", "last_token", "gaps")

    def __init__(self, start: float):
        self.start, self.last, self.tokens = start, start, 0
        self.first: float | None = None
        self.last_token: float | None = None
        self.gaps: list[float] = []  # between token-carrying chunks

    def chunk(self, n_tokens: int) -> None:
        now = time.perf_counter()
        if n_tokens and self.first is None:
            self.first = now
        if n_tokens:
            if self.last_token is not None:
                self.gaps.append(now - self.last_token)
            self.last_token = now
        self.last = now
        self.tokens += n_tokens


def finish_attributes(span: trace.Span, chunk: common_pb2.GenerationChunk, t: Timing) -> None:
    first = t.first if t.first is not None else t.last
    ttft = (first - t.start) * 1000
    tpot = (t.last - first) * 1000 / (t.tokens - 1) if t.tokens > 1 else 0.0
    span.set_attributes(
        {
            names.TTFT_MS: ttft,
            names.TPOT_MS: tpot,
            names.E2E_MS: (t.last - t.start) * 1000,
            names.GEN_AI_USAGE_INPUT_TOKENS: chunk.usage.prompt_tokens,
            names.GEN_AI_USAGE_OUTPUT_TOKENS: chunk.usage.completion_tokens,
            names.CACHED_TOKENS: chunk.usage.cached_prompt_tokens,
            names.QUEUE_MS: chunk.usage.queue_ms,
            names.GEN_AI_RESPONSE_FINISH_REASONS: [FINISH_NAMES[chunk.finish_reason]],
        }
    )
    if t.gaps:
        p50, p95, p99 = percentiles([g * 1000 for g in t.gaps], REPORT_PERCENTILES)
        span.set_attributes({names.ITL_P50_MS: p50, names.ITL_P95_MS: p95, names.ITL_P99_MS: p99})
