"""docs/benchmarks/sparse.md: fidelity, needle retrieval and decode latency of the sparse path
against dense attention, and issue 8's targets with PASS/FAIL as measured."""

from __future__ import annotations

from dataclasses import dataclass, field

from benchmarks.common.tables import cell as _cell
from benchmarks.common.tables import pct as _pct
from benchmarks.common.targets import Verdict, target_table
from benchmarks.sparse.results import (
    FidelityRun,
    LatencyRun,
    NeedleCell,
    SparseCounters,
    accuracy,
    floor_note,
    p50_reduction,
    p99_reduction,
)


@dataclass(slots=True)
class SparseBenchReport:
    command: str
    date: str
    machine: str
    setup: list[str]  # one line each: models, dtype, threads, sparse settings
    fidelity: list[FidelityRun]
    needles: list[NeedleCell]
    needle_setup: str  # needle, question, haystack
    latency: list[LatencyRun]
    targets: list[Verdict]
    phases: list[tuple[str, float]]  # (phase, wall seconds)
    notes: list[str] = field(default_factory=list)
    busy: str | None = None  # a warning when other work competed for the CPU


def _counters(c: SparseCounters) -> str:
    if not c.layer_steps and not c.dense_layer_steps:
        return "no sparse layer steps"
    policy = (
        f" ({c.dense_layer_steps} more run dense by the layer policy, {c.partly_dense} with a "
        f"KV head group run dense; {_pct(c.kept_share)} of all stayed sparse, "
        f"{_pct(c.group_share)} of KV head groups)"
        if c.dense_layer_steps or c.partly_dense
        else ""
    )
    return (
        f"{c.layer_steps} layer steps, {_pct(c.fallback_rate)} fell back{policy}, "
        f"{_pct(c.read_share)} of dense blocks read"
    )


def render(r: SparseBenchReport) -> str:
    total = sum(s for _, s in r.phases)
    lines = [
        "# Sparse long-context decode benchmark",
        "",
        f"Run {r.date} with `{r.command}`; {total / 60:.1f} min in all "
        f"({', '.join(f'{name} {s / 60:.1f} min' for name, s in r.phases)}).",
        "",
        f"Machine: {r.machine}",
        "",
        *([r.busy, ""] if r.busy else []),
        *[f"- {line}" for line in r.setup],
        "",
        "## Targets (issues 8 and 24)",
        "",
        *target_table(r.targets),
        "",
    ]
    note = floor_note(r.fidelity)
    if note:
        lines += [note, ""]
    lines += _fidelity(r.fidelity) + _needles(r.needles, r.needle_setup) + _latency(r.latency)
    if r.notes:
        lines += ["## Notes", "", *[f"- {n}" for n in r.notes], ""]
    return "\n".join(lines)


def _fidelity(runs: list[FidelityRun]) -> list[str]:
    out = [
        "## Fidelity per decode step",
        "",
        "The engine generates the continuation greedily on the dense path; the engine's "
        "side-by-side tool (`strata.engine.sparse.fidelity.teacher_forced`) then feeds it "
        "one token per decode step through the dense and the sparse path from the same "
        "prefilled prompt. Top-1 agreement counts the steps whose greedy tokens match; the "
        "first disagreement is where free-running outputs would part. Cosine: each sparse "
        "layer step's attention output (after the trust check) against full attention on the "
        'same query and cache; "selection" is the selected blocks\' output before '
        "fallbacks. Dense replay: the tool's dense top-1 against the engine's own tokens "
        "(a check of the harness). Lead: the dense top-1 logit minus the runner-up's, the "
        "median over steps and the widest among steps where the paths disagreed (a "
        "disagreement at a lead near 0 is a near-tie flipped by rounding). Dense floor: "
        "the top-1 agreement of the dense path with itself, its decode attention computed "
        "by the fused CPU kernel and again by the pure-torch path (the same attention, the "
        "same dtype and cache, different float rounding): how often rounding alone flips "
        'the top token; "-" where the engine had no kernel.',
        "",
        "| model | prompt tokens | steps | top-1 agreement | dense floor | first disagreement "
        "| lead median / widest disagreeing | cosine mean | cosine P1 | cosine min | "
        "selection mean / min | dense replay | sparse path |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for f in runs:
        c, s = f.cosine, f.cosine_selected
        cos = f"{c.mean:.4f} | {c.p1:.4f} | {c.min:.4f}" if c else "- | - | -"
        sel = f"{s.mean:.4f} / {s.min:.4f}" if s else "-"
        first = "none" if f.first_disagreement is None else str(f.first_disagreement)
        widest = "-" if f.disagree_margin_max is None else f"{f.disagree_margin_max:.3f}"
        floor = (
            "-"
            if f.dense_floor is None
            else f"{_pct(f.dense_floor)} ({f.dense_floor_agree}/{f.steps})"
        )
        out.append(
            f"| {f.model} | {f.context} | {f.steps} | {_pct(f.agreement)} | {floor} | "
            f"{first} | {f.margin_median:.3f} / {widest} | {cos} | {sel} | "
            f"{_pct(f.dense_replay)} | {_counters(f.counters)} |"
        )
    return out + [""]


def _needles(cells: list[NeedleCell], setup: str) -> list[str]:
    out = ["## Needle in a haystack", "", setup, ""]
    if not cells:
        return out + ["Not run.", ""]
    lengths = sorted({c.length for c in cells})
    depths = sorted({c.depth for c in cells})
    out += [
        "Retrieval accuracy, dense / sparse (cells: correct of trials):",
        "",
        "| prompt tokens | " + " | ".join(f"depth {d:g}%" for d in depths) + " | all |",
        "|---|" + "---|" * (len(depths) + 1),
    ]
    for n in lengths:
        row = [c for c in cells if c.length == n]
        parts = []
        for d in depths:
            at = [c for c in row if c.depth == d]
            parts.append(
                f"{sum(c.dense_ok for c in at)}/{len(at)} / "
                f"{sum(c.sparse_ok for c in at)}/{len(at)}"
            )
        out.append(
            f"| {n} | "
            + " | ".join(parts)
            + f" | {_pct(accuracy(row, False))} / {_pct(accuracy(row, True))} |"
        )
    out.append(
        "| all | "
        + " | ".join("" for _ in depths)
        + f" | {_pct(accuracy(cells, False))} / {_pct(accuracy(cells, True))} |"
    )
    total = SparseCounters()
    for c in cells:
        total = total.plus(c.counters)
    out += ["", f"Sparse requests' decode steps: {_counters(total)}.", ""]
    differ = [c for c in cells if c.dense_ok != c.sparse_ok or c.dense_answer != c.sparse_answer]
    if differ:
        out += [
            "Cells where the answers differ:",
            "",
            "| prompt tokens | depth | trial | expected | dense answer | sparse answer |",
            "|---|---|---|---|---|---|",
        ]
        out += [
            f"| {c.length} | {c.depth:g}% | {c.trial} | {c.expected} | "
            f"`{_cell(c.dense_answer)}` | `{_cell(c.sparse_answer)}` |"
            for c in differ
        ]
    else:
        out.append("Sparse answers are identical to dense answers in every cell.")
    wrong = [c for c in cells if not c.dense_ok]
    if wrong:
        out += [
            "",
            "Dense misses: "
            + "; ".join(
                f"{c.length} tokens at {c.depth:g}% (trial {c.trial}): expected {c.expected}, "
                f"answered `{_cell(c.dense_answer)}`"
                for c in wrong
            )
            + ".",
        ]
    return out + [""]


def _latency(runs: list[LatencyRun], long_model: str = "dummy-long") -> list[str]:
    out = [
        "## Decode step latency",
        "",
        "Decode-only steps (every row generating one token), timed around the engine's whole "
        "step; dense and sparse rounds alternate in one process over the same cached prompts.",
        "",
        "| model | context | prompt tokens | batch | path | steps | P50 ms | P99 ms | mean ms | "
        "P50 vs dense | P99 vs dense | sparse path |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    dense = {(r.model, r.context, r.batch): r for r in runs if not r.sparse}
    for r in sorted(runs, key=lambda x: (x.model, x.context, x.batch, x.sparse)):
        base = dense.get((r.model, r.context, r.batch))
        p50 = f"{-p50_reduction(base, r):+.1%}" if r.sparse and base else ""
        p99 = f"{-p99_reduction(base, r):+.1%}" if r.sparse and base else ""
        out.append(
            f"| {r.model or long_model} | {r.context // 1024}k | {r.prompt_tokens} | {r.batch} | "
            f"{'sparse' if r.sparse else 'dense'} | {r.steps} | {r.p50_s * 1000:.2f} | "
            f"{r.p99_s * 1000:.2f} | {r.mean_s * 1000:.2f} | {p50} | {p99} | "
            f"{_counters(r.counters) if r.sparse else ''} |"
        )
    return out + [""]
