"""Plain-text rendering of what the CLI prints: model lists, tenant reports, span trees, usage.

Pure functions over the protobuf replies, so the exact output is tested without a server.
"""

from __future__ import annotations

from collections.abc import Sequence

from strata.eval.tables import table
from strata.v1 import common_pb2, metrics_pb2

STATUS_CODE_ERROR = 2  # OpenTelemetry Status.code for an error


def format_models(models: Sequence[common_pb2.ModelInfo]) -> str:
    if not models:
        return "no models are loaded (the placement planner loads them; see STRATA_MODELS)"
    rows = [[m.name, str(m.context_length), f"{m.memory_bytes / 2**20:.1f}"] for m in models]
    return table(["model", "context", "memory_mib"], rows)


def _ms(value: float) -> str:
    return f"{value:.1f}"


def format_report(report: metrics_pb2.Report) -> str:
    footer = (
        f"latencies in ms; spans received {report.spans_received}, dropped {report.spans_dropped}"
    )
    if not report.tenants:
        return f"no finished requests recorded\n{footer}"
    headers = ["tenant", "requests", "errors"]
    for metric in ("ttft", "tpot", "e2e"):
        headers += [f"{metric}_p50", f"{metric}_p95", f"{metric}_p99"]
    rows = []
    for t in report.tenants:
        row = [t.tenant, str(t.requests), str(t.errors)]
        for p in (t.ttft_ms, t.tpot_ms, t.e2e_ms):
            row += [_ms(p.p50), _ms(p.p95), _ms(p.p99)]
        rows.append(row)
    return f"{table(headers, rows)}\n{footer}"


def format_trace(trace: metrics_pb2.Trace) -> str:
    """An indented tree of spans by parent, children in start order, with offsets and durations.

    A span whose parent was not recorded (the caller's client span, or one lost in a dropped
    batch) is shown as a root rather than hidden.
    """
    spans = sorted(trace.spans, key=lambda s: (s.start_unix_nano, s.name))
    if not spans:
        return "no spans"
    known = {s.span_id for s in spans}
    children: dict[str, list[metrics_pb2.SpanRecord]] = {}
    roots = []
    for s in spans:
        if s.parent_span_id and s.parent_span_id in known and s.parent_span_id != s.span_id:
            children.setdefault(s.parent_span_id, []).append(s)
        else:
            roots.append(s)
    t0 = spans[0].start_unix_nano
    t1 = max(s.end_unix_nano for s in spans)
    rows: list[tuple[str, str, str]] = []
    seen: set[str] = set()

    def walk(span: metrics_pb2.SpanRecord, depth: int) -> None:
        if span.span_id in seen:  # a corrupt parent cycle must not loop forever
            return
        seen.add(span.span_id)
        label = f"{'  ' * depth}{span.name} [{span.service}]"
        if span.status_code == STATUS_CODE_ERROR:
            label += " ERROR"
        rows.append(
            (
                _ms((span.start_unix_nano - t0) / 1e6) + " ms",
                _ms((span.end_unix_nano - span.start_unix_nano) / 1e6) + " ms",
                label,
            )
        )
        for child in children.get(span.span_id, []):
            walk(child, depth + 1)

    for root in roots:
        walk(root, 0)
    for span in spans:  # spans only reachable through a cycle
        walk(span, 0)
    width_start = max(len("start"), *(len(r[0]) for r in rows))
    width_dur = max(len("duration"), *(len(r[1]) for r in rows))
    lines = [
        f"trace {spans[0].trace_id}: {len(spans)} spans, {_ms((t1 - t0) / 1e6)} ms",
        f"{'start'.rjust(width_start)}  {'duration'.rjust(width_dur)}  span",
    ]
    lines += [f"{a.rjust(width_start)}  {b.rjust(width_dur)}  {c}" for a, b, c in rows]
    return "\n".join(lines)


def format_summary(usage: common_pb2.Usage, finish_reason: int, trace_id: str) -> str:
    """What `strata generate` prints to stderr once the stream ends."""
    finish = common_pb2.FinishReason.Name(finish_reason).removeprefix("FINISH_REASON_").lower()
    return (
        f"usage: prompt_tokens={usage.prompt_tokens} "
        f"cached_prompt_tokens={usage.cached_prompt_tokens} "
        f"completion_tokens={usage.completion_tokens} finish_reason={finish}\n"
        f"trace_id: {trace_id or 'none'}"
    )
