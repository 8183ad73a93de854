"""engine.md and engine.json from the phases' results: every system side by side, ratios to
the transformers baseline of the same run, online percentiles per rate, and how busy the machine
was. Pure: no clock, no file access; the orchestrator passes everything in.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field

from benchmarks.common import cpu
from benchmarks.common.machine import host_line
from benchmarks.engine.results import LatencySummary, OfflineResult, RateResult

BASELINE = "transformers"
SYSTEM_ORDER = ("strata", "transformers", "vllm", "llamacpp")
SYSTEM_LABELS = {
    "strata": "strata LLMEngine",
    "transformers": "transformers generate",
    "vllm": "vLLM CPU (peer)",
    "llamacpp": "llama.cpp (peer)",
}
MISSING = "—"


@dataclass(slots=True)
class Phase:
    name: str
    wall_s: float
    own_cores: float
    other_cores: float
    status: str = "ok"  # "ok", "skipped: <why>", "failed: <why>"


@dataclass(slots=True)
class BenchReport:
    command: str
    date: str
    machine: dict
    model: str
    offline: list[OfflineResult]
    online: list[RateResult]
    online_meta: dict
    phases: list[Phase]
    notes: list[str] = field(default_factory=list)
    # (strata, llama.cpp) bf16 single-stream output tok/s of each alternating round
    single_rounds: list[tuple[float, float]] = field(default_factory=list)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["offline"] = [r.to_dict() for r in self.offline]
        d["online"] = [r.to_dict() for r in self.online]
        return d


def fmt_rate(value: float | None) -> str:
    return MISSING if value is None else f"{value:.1f}"


def fmt_ratio(value: float | None, base: float | None) -> str:
    if value is None or not base:
        return ""
    return f"{value / base:.2f}x"


def throughput_cell(value: float | None, base: float | None) -> str:
    """'354.1 (0.77x)': tokens/s and the ratio to the baseline; just the number when no base."""
    ratio = fmt_ratio(value, base)
    return fmt_rate(value) + (f" ({ratio})" if ratio else "")


def percentile_cell(summary: LatencySummary | None) -> str:
    """'P50 / P95 / P99' in milliseconds, one decimal."""
    if summary is None:
        return MISSING
    return f"{summary.p50:.1f} / {summary.p95:.1f} / {summary.p99:.1f}"


def lookup(
    results: list[OfflineResult], system: str, dtype: str, mode: str
) -> OfflineResult | None:
    for r in results:
        if (r.system, r.dtype, r.mode) == (system, dtype, mode):
            return r
    return None


OFFLINE_COLUMNS = (
    ("bfloat16", "batch"),
    ("float32", "batch"),
    ("bfloat16", "single"),
    ("float32", "single"),
)


def offline_table(results: list[OfflineResult]) -> list[str]:
    lines = [
        "| system | 64x128 bf16 | 64x128 fp32 | single stream bf16 | single stream fp32 |",
        "|---|---:|---:|---:|---:|",
    ]
    systems = [s for s in SYSTEM_ORDER if any(r.system == s for r in results)]
    for system in systems:
        cells = []
        for dtype, mode in OFFLINE_COLUMNS:
            mine = lookup(results, system, dtype, mode)
            base = lookup(results, BASELINE, dtype, mode)
            cells.append(
                throughput_cell(
                    mine.output_tok_s if mine else None,
                    base.output_tok_s if base and system != BASELINE else None,
                )
            )
        lines.append(f"| {SYSTEM_LABELS.get(system, system)} | " + " | ".join(cells) + " |")
    return lines


def agreement(results: list[OfflineResult]) -> list[str]:
    """Per system and dtype: how many requests' greedy tokens equal the baseline's."""
    lines = []
    for r in results:
        base = lookup(results, BASELINE, r.dtype, r.mode)
        if r.system == BASELINE or r.mode != "batch" or base is None:
            continue
        same = sum(a == b for a, b in zip(r.token_ids, base.token_ids))
        n = len(r.token_ids[0]) if r.token_ids else 0
        lines.append(
            f"{SYSTEM_LABELS.get(r.system, r.system)} {r.dtype}: {same}/"
            f"{len(r.token_ids)} requests have the same first {n} greedy tokens as "
            f"transformers"
        )
    return lines


def online_table(rates: list[RateResult]) -> list[str]:
    lines = [
        "| offered req/s | sent | completed | cancelled | failed | achieved req/s | "
        "output tok/s | TTFT ms P50 / P95 / P99 | TPOT ms P50 / P95 / P99 | "
        "E2E ms P50 / P95 / P99 |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rates:
        lines.append(
            f"| {r.rate:g} | {r.sent} | {r.completed} | {r.cancelled} | {r.failed} | "
            f"{r.achieved_req_s:.2f} | {r.output_tok_s:.1f} | "
            f"{percentile_cell(r.ttft_ms)} | {percentile_cell(r.tpot_ms)} | "
            f"{percentile_cell(r.e2e_ms)} |"
        )
    return lines


ONLINE_TTFT_P99_MS = 2000.0  # issue 24's online target: the highest load with P99 TTFT under it


def highest_rate_within(
    rates: list[RateResult], ttft_p99_ms: float = ONLINE_TTFT_P99_MS
) -> float | None:
    """The highest offered rate up to which every rate of the sweep (in increasing order)
    completed every request it sent with P99 TTFT under `ttft_p99_ms`; None when the lowest
    did not."""
    best: float | None = None
    for r in sorted(rates, key=lambda r: r.rate):
        if r.cancelled or r.failed or r.ttft_ms is None or r.ttft_ms.p99 >= ttft_p99_ms:
            break
        best = r.rate
    return best


def knee_sentence(rates: list[RateResult]) -> str:
    top = highest_rate_within(rates)
    limit = f"P99 TTFT under {ONLINE_TTFT_P99_MS / 1000:g} s with every request completed"
    if top is None:
        return f"No offered rate of the sweep kept {limit}."
    if top == max(r.rate for r in rates):
        return f"Every offered rate of the sweep, up to {top:g} req/s, kept {limit}."
    return f"The highest offered rate that kept {limit} (and every rate below it): {top:g} req/s."


def single_rounds_section(rounds: list[tuple[float, float]]) -> list[str]:
    """The alternating single-stream rounds against llama.cpp: a row per round, then the
    medians and the median of the rounds' ratios."""
    if not rounds:
        return []
    lines = [
        "## Single stream against llama.cpp, alternating",
        "",
        f"{len(rounds)} rounds, each a fresh process of either system on the same prompt (bf16, "
        "128 tokens after a 128-token prompt, prefill included), the two one after the other "
        "and the first of them swapped from round to round: this machine's memory bandwidth "
        "moves by minutes, so each round's ratio compares the two within seconds.",
        "",
        "| round | strata tok/s | llama.cpp tok/s | strata / llama.cpp |",
        "|---:|---:|---:|---:|",
    ]
    for i, (ours, peer) in enumerate(rounds, 1):
        lines.append(f"| {i} | {ours:.1f} | {peer:.1f} | {ours / peer:.2f}x |")
    ratios = [ours / peer for ours, peer in rounds]
    lines += [
        "",
        f"Median: strata {statistics.median(r[0] for r in rounds):.1f} tok/s, llama.cpp "
        f"{statistics.median(r[1] for r in rounds):.1f} tok/s; median ratio "
        f"{statistics.median(ratios):.2f}x (rounds {min(ratios):.2f}x-{max(ratios):.2f}x).",
        "",
    ]
    return lines


def phase_table(phases: list[Phase]) -> list[str]:
    lines = [
        "| phase | wall s | own cores | other work, cores | status |",
        "|---|---:|---:|---:|---|",
    ]
    for p in phases:
        lines.append(
            f"| {p.name} | {p.wall_s:.0f} | {p.own_cores:.2f} | {p.other_cores:.2f} | {p.status} |"
        )
    return lines


def busy_note(phases: list[Phase], cores: int) -> str | None:
    return cpu.busy_note(
        [(p.name, p.wall_s, p.other_cores) for p in phases if p.status == "ok"],
        cores,
        "during the measured phases",
        "these numbers are noisy: rerun on an idle machine before quoting them.",
    )


def render(report: BenchReport) -> str:
    m = report.machine
    lines = [
        "# Decode engine benchmark",
        "",
        f"Run {report.date} with `{report.command}`.",
        "",
        f"Machine: {host_line(m)}. Every measured process uses 2 torch threads; phases run one "
        f"after another.",
        "",
    ]
    note = busy_note(report.phases, m.get("cores") or 0)
    if note:
        lines += [note, ""]
    lines += [
        f"Model: {report.model}, the same seeded weights in every system. Greedy "
        f"sampling, EOS ignored.",
        "",
        "## Offline: output tokens/s",
        "",
        "64 prompts of 128 random tokens, 128 new tokens each, all submitted at once; "
        "single stream = one more prompt of 128 tokens alone. Time from submission to the "
        "last token, after a warm-up on 4 other short prompts; model load and compilation "
        "excluded. Warm-up, batch and single prompts are separate random draws, so no "
        "prefix cache can help. In parentheses: the ratio to transformers measured in this "
        "run.",
        "",
    ]
    lines += offline_table(report.offline)
    setups = sorted({(r.system, r.setup) for r in report.offline if r.mode == "batch"})
    lines += [""] + [f"- {SYSTEM_LABELS.get(s, s)}: {setup}" for s, setup in setups]
    lines += [f"- {line}" for line in agreement(report.offline)]
    lines += ["", "## Online: decode worker over gRPC", ""]
    if report.online:
        meta = report.online_meta
        s = meta.get("settings", {})
        lines += [
            f"`python -m services.worker` ({s.get('dtype')}, {s.get('torch_threads')} torch "
            f"threads, max_seqs {s.get('max_seqs')}, max_batched_tokens "
            f"{s.get('max_batched_tokens')}) streaming Worker.Generate to an open-loop "
            f"client on the same machine. Poisson arrivals, at most "
            f"{meta.get('max_requests')} requests within {meta.get('max_seconds'):g} s per "
            f"rate, then {meta.get('drain_seconds'):g} s to finish before the rest is "
            f"cancelled. Sizes drawn from `{meta.get('trace')}` "
            f"({meta.get('trace_rows')} rows): {meta.get('mapping')}; fresh random "
            f"text at each rate, so no prefix-cache hits. Requests ignore EOS: "
            f"{meta.get('ran_to_length')} of {meta.get('completed')} completed "
            f"requests ran to their trace length. Percentiles over completed requests; "
            f"achieved req/s and output tok/s (every streamed token) are over first send "
            f"to last completion.",
            "",
        ]
        lines += online_table(report.online) + ["", knee_sentence(report.online)]
    else:
        lines.append(report.online_meta.get("skipped", "not run"))
    lines += [""] + single_rounds_section(report.single_rounds)
    lines += ["## Phases", ""] + phase_table(report.phases)
    if report.notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in report.notes]
    lines += [
        "",
        "Raw per-request data: `docs/benchmarks/raw/` (not in git). JSON: "
        "`docs/benchmarks/engine.json`.",
        "",
    ]
    return "\n".join(lines)
