"""What the replay client measured: one record per request, and the run's summary and table.

Definitions (the same as vLLM `bench serve` and AIPerf, so figures compare):

    TTFT  send -> first chunk carrying tokens
    ITL   gap between consecutive token-carrying chunks (a chunk with several tokens is one gap)
    TPOT  (E2E - TTFT) / (output tokens - 1), for requests with at least 2 output tokens
    E2E   send -> end of the stream

Latency figures come from successful requests only (status OK); ITLs of all of them are pooled.
Throughput divides successful requests and their tokens by the run's duration (replay start to
the last completion). A start is "late" when the sender began a request more than LATE_START_S
after its scheduled time: an open-loop replay is only as good as its sender keeps up.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass, field

from strata.core.stats import Summary, summarize

LATE_START_S = 0.010
OK = "OK"


@dataclass(slots=True)
class ClientRecord:
    """One request as the client saw it. Times are seconds; scheduled_s, sent_s and finished_s
    (end of the stream or the error) are offsets from the replay's start, latencies from sent_s."""

    index: int
    tenant: str
    scheduled_s: float
    sent_s: float
    synth_prompt_tokens: int
    max_tokens: int
    sla_class: str = ""
    finished_s: float | None = None
    status: str = OK
    error: str = ""
    ttft_s: float | None = None
    e2e_s: float | None = None
    itl_s: list[float] = field(default_factory=list)
    output_tokens: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    finish_reason: str = ""
    request_id: str = ""
    trace_id: str = ""

    @property
    def ok(self) -> bool:
        return self.status == OK

    @property
    def late_s(self) -> float:
        return max(0.0, self.sent_s - self.scheduled_s)

    @property
    def tpot_s(self) -> float | None:
        if not self.ok or self.ttft_s is None or self.e2e_s is None or self.output_tokens < 2:
            return None
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1)

    def to_json(self) -> dict:
        row = asdict(self)
        row["late_s"] = self.late_s
        row["tpot_s"] = self.tpot_s
        return row


@dataclass(slots=True)
class RunSummary:
    requests: int
    succeeded: int
    errors: dict[str, int]
    duration_s: float
    request_throughput: float
    output_throughput: float
    total_token_throughput: float
    prompt_tokens: int
    output_tokens: int
    cached_tokens: int
    late_starts: int
    max_late_s: float
    prompt_token_mismatches: int
    ttft_ms: Summary | None
    tpot_ms: Summary | None
    itl_ms: Summary | None
    e2e_ms: Summary | None

    @property
    def failed(self) -> int:
        return self.requests - self.succeeded

    def to_json(self) -> dict:
        out = asdict(self)
        out["failed"] = self.failed
        return out


def summarize_run(records: list[ClientRecord], duration_s: float) -> RunSummary:
    """The run's figures; duration_s is replay start to the last completion."""
    if duration_s < 0 or math.isnan(duration_s):
        raise ValueError(f"duration_s must be non-negative, got {duration_s}")
    ok = [r for r in records if r.ok]
    prompt = sum(r.prompt_tokens for r in ok)
    output = sum(r.output_tokens for r in ok)
    late = [r.late_s for r in records]

    def rate(amount: float) -> float:
        return amount / duration_s if duration_s > 0 else 0.0

    def ms(values: list[float]) -> Summary | None:
        return summarize([v * 1000.0 for v in values])

    return RunSummary(
        requests=len(records),
        succeeded=len(ok),
        errors=dict(sorted(Counter(r.status for r in records if not r.ok).items())),
        duration_s=duration_s,
        request_throughput=rate(len(ok)),
        output_throughput=rate(output),
        total_token_throughput=rate(prompt + output),
        prompt_tokens=prompt,
        output_tokens=output,
        cached_tokens=sum(r.cached_tokens for r in ok),
        late_starts=sum(1 for v in late if v > LATE_START_S),
        max_late_s=max(late, default=0.0),
        # the server counts the prompt with its own tokenizer: a mismatch means the synthesized
        # text was not N tokens for this model (see strata.eval.workload)
        prompt_token_mismatches=sum(1 for r in ok if r.prompt_tokens != r.synth_prompt_tokens),
        ttft_ms=ms([r.ttft_s for r in ok if r.ttft_s is not None]),
        tpot_ms=ms([t for r in ok if (t := r.tpot_s) is not None]),
        itl_ms=ms([gap for r in ok for gap in r.itl_s]),
        e2e_ms=ms([r.e2e_s for r in ok if r.e2e_s is not None]),
    )


def format_summary(summary: RunSummary) -> str:
    """The table `strata replay` prints at the end."""
    errors = ", ".join(f"{code} {n}" for code, n in summary.errors.items())
    lines = [
        f"requests    {summary.requests} sent, {summary.succeeded} ok, {summary.failed} failed"
        + (f" ({errors})" if errors else ""),
        f"duration    {summary.duration_s:.2f} s",
        f"throughput  {summary.request_throughput:.2f} req/s, {summary.output_throughput:.1f} "
        f"output tok/s, {summary.total_token_throughput:.1f} total tok/s",
        f"tokens      {summary.prompt_tokens} prompt ({summary.cached_tokens} cached), "
        f"{summary.output_tokens} output"
        + (
            f"; the server counted {summary.prompt_token_mismatches} prompt(s) at another length "
            f"than synthesized"
            if summary.prompt_token_mismatches
            else ""
        ),
        f"late starts {summary.late_starts} (> {LATE_START_S * 1000:.0f} ms; max "
        f"{summary.max_late_s * 1000:.1f} ms)",
        "",
        f"{'ms':<6}{'p50':>10}{'p95':>10}{'p99':>10}{'mean':>10}{'n':>8}",
    ]
    for name in ("ttft", "tpot", "itl", "e2e"):
        s: Summary | None = getattr(summary, f"{name}_ms")
        if s is None:
            lines.append(f"{name:<6}{'-':>10}{'-':>10}{'-':>10}{'-':>10}{0:>8}")
        else:
            lines.append(
                f"{name:<6}{s.p50:>10.1f}{s.p95:>10.1f}{s.p99:>10.1f}{s.mean:>10.1f}{s.count:>8}"
            )
    return "\n".join(lines)
