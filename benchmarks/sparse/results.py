"""What each part of the sparse benchmark measured, and issue 8's targets checked on it.

Targets (issue 8), each judged on every run it applies to, so one bad run fails it:

- decode-step P99 at 32k context at least 40% lower than dense (every batch size measured);
- attention-output cosine, sparse against dense on the same query and cache, at least 0.99
  (the mean over a run's sparse layer steps of what each layer used: fallen-back layers are
  full attention);
- top-1 agreement at least 99% over the generated tokens (teacher-forced: both paths decode the
  dense path's tokens, so one early disagreement cannot drag every later step with it);
- needle accuracy with the sparse path equal to dense, over the same prompts.

Issue 24's, on the default model (SmolLM2) at its longest latency context, every batch size:

- at least half of the sparse rows' layer steps stay sparse (neither recomputed by the trust
  check nor run dense by the adaptive layer policy);
- decode-step P50 at least 20% lower than dense in the same run.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from benchmarks.common.targets import Target, Verdict

P99_CONTEXT = 32768  # the context the P99 target names (the longest latency context measured)
TARGETS = {
    "p99": Target("decode-step P99", ">=", 0.40, "{:.0%}", " lower than dense"),
    "cosine": Target("attention-output cosine", ">=", 0.99),
    "agreement": Target("top-1 agreement", ">=", 0.99, "{:.0%}"),
    # the difference of the two accuracies
    "needles": Target("needle accuracy, sparse vs dense", "==", 0.0, want="equal"),
    "kept": Target("layer steps that stay sparse", ">=", 0.50, "{:.0%}"),
    "p50": Target("decode-step P50", ">=", 0.20, "{:.0%}", " lower than dense"),
}


@dataclass(slots=True)
class SparseCounters:
    """The engine's cumulative sparse counters over one measured stretch (differences)."""

    rows: int = 0  # decode rows that took the sparse path
    layer_steps: int = 0  # layer computations on the sparse path
    fallbacks: int = 0  # of those, recomputed with full attention by the trust check
    blocks_read: int = 0  # KV blocks the sparse layers read
    blocks_dense: int = 0  # blocks a dense read would have taken
    dense_layer_steps: int = 0  # sparse rows' layer steps the adaptive policy ran dense
    partly_dense: int = 0  # layer steps with a KV head group run dense outright, no fallback
    group_steps: int = 0  # (layer step, KV head group) units, dense layers' too
    groups_kept: int = 0  # of those, read their budget and passed the trust check

    @property
    def fallback_rate(self) -> float:
        return self.fallbacks / self.layer_steps if self.layer_steps else 0.0

    @property
    def kept(self) -> int:
        """Layer steps in which every KV head group read its budget and passed the check."""
        return self.layer_steps - self.fallbacks - self.partly_dense

    @property
    def kept_share(self) -> float:
        """Of every layer step of the sparse rows, the share that stayed sparse in every KV
        head group."""
        total = self.layer_steps + self.dense_layer_steps
        return self.kept / total if total else 0.0

    @property
    def group_share(self) -> float:
        """Of every (layer step, KV head group) of the sparse rows, the share that stayed
        sparse."""
        return self.groups_kept / self.group_steps if self.group_steps else 0.0

    @property
    def read_share(self) -> float:
        return self.blocks_read / self.blocks_dense if self.blocks_dense else 1.0

    def plus(self, other: SparseCounters) -> SparseCounters:
        return SparseCounters(*(a + b for a, b in zip(_values(self), _values(other))))

    def minus(self, before: SparseCounters) -> SparseCounters:
        return SparseCounters(*(a - b for a, b in zip(_values(self), _values(before))))


def _values(c: SparseCounters) -> list[int]:
    return [getattr(c, f.name) for f in fields(c)]


@dataclass(slots=True)
class CosineStats:
    """Attention-output cosines of one run, one value per (step, layer) of the sparse row."""

    count: int
    mean: float
    p1: float  # 1st percentile: the bad tail
    min: float


@dataclass(slots=True)
class FidelityRun:
    model: str
    context: int  # prompt tokens
    steps: int  # generated tokens compared
    agree: int  # steps whose sparse top-1 token equals dense's
    first_disagreement: int | None  # step index; before it, free-running outputs are equal
    cosine: CosineStats | None  # what the layers used (after fallbacks)
    cosine_selected: CosineStats | None  # the selection alone, before fallbacks
    counters: SparseCounters
    dense_replay: float = 1.0  # teacher-forced dense top-1 equal to the engine's own tokens
    margin_median: float = 0.0  # dense top-1 logit minus the runner-up's, median over steps
    disagree_margin_max: float | None = None  # the widest such lead where the paths disagreed
    # steps whose dense top-1 is the same through the fused CPU attention kernel and through the
    # pure-torch path (same dtype and cache: rounding is the only difference); None: no kernel
    dense_floor_agree: int | None = None
    wall_s: float = 0.0

    @property
    def agreement(self) -> float:
        return self.agree / self.steps if self.steps else 0.0

    @property
    def dense_floor(self) -> float | None:
        """Top-1 agreement of dense with itself computed another exact way: the noise floor."""
        if self.dense_floor_agree is None:
            return None
        return self.dense_floor_agree / self.steps if self.steps else 0.0


@dataclass(slots=True)
class NeedleCell:
    length: int  # prompt tokens
    depth: float  # requested, percent
    placed_depth: float  # where the needle landed, percent
    trial: int
    expected: str
    dense_answer: str
    sparse_answer: str
    dense_ok: bool
    sparse_ok: bool
    counters: SparseCounters = field(default_factory=SparseCounters)


@dataclass(slots=True)
class LatencyRun:
    context: int  # nominal context (8k, 16k, 32k): what the targets name
    prompt_tokens: int  # the prompts' real length (the model's limit may cut it)
    batch: int
    sparse: bool
    steps: int  # decode-only steps timed
    p50_s: float
    p99_s: float
    mean_s: float
    counters: SparseCounters = field(default_factory=SparseCounters)
    model: str = ""  # "": the long-context dummy model


def accuracy(cells: list[NeedleCell], sparse: bool) -> float:
    if not cells:
        return 0.0
    return sum(c.sparse_ok if sparse else c.dense_ok for c in cells) / len(cells)


def p99_reduction(dense: LatencyRun, sparse: LatencyRun) -> float:
    return 1.0 - sparse.p99_s / dense.p99_s


def p50_reduction(dense: LatencyRun, sparse: LatencyRun) -> float:
    return 1.0 - sparse.p50_s / dense.p50_s


def check_targets(
    fidelity: list[FidelityRun],
    needles: list[NeedleCell],
    latency: list[LatencyRun],
    p99_context: int = P99_CONTEXT,
    default_model: str = "",
) -> list[Verdict]:
    """One row per issue-8 target (the P99 one per batch size), then issue 24's on
    `default_model`'s latency runs (when named); a target with nothing measured fails and says
    so."""
    out: list[Verdict] = []
    p99 = TARGETS["p99"]
    pairs = _latency_pairs(latency, p99_context, "")
    for batch, (dense, sparse) in sorted(pairs.items()):
        cut = p99_reduction(dense, sparse)
        out.append(
            p99.judge(
                cut,
                _cut_line(cut, sparse.p99_s, dense.p99_s),
                name=f"{p99.name} at {_k(p99_context)} context, batch {batch}",
            )
        )
    if not pairs:
        out.append(p99.judge(None, name=f"{p99.name} at {_k(p99_context)} context"))
    cosine = TARGETS["cosine"]
    with_cos = [f for f in fidelity if f.cosine is not None]
    if with_cos:
        worst = min(with_cos, key=lambda f: f.cosine.mean)
        out.append(
            cosine.judge(
                worst.cosine.mean,
                f"{worst.cosine.mean:.4f} ({worst.model} at {_k(worst.context)}; "
                f"min over all steps {min(f.cosine.min for f in with_cos):.4f})",
                name=f"{cosine.name} (mean per run, worst run)",
            )
        )
    else:
        out.append(cosine.judge(None))
    agreement = TARGETS["agreement"]
    if fidelity:
        worst = worst_agreement(fidelity)
        out.append(
            agreement.judge(
                worst.agreement,
                f"{worst.agreement:.1%} ({worst.agree}/{worst.steps}, {worst.model} "
                f"at {_k(worst.context)})",
                name=f"{agreement.name} (teacher-forced, worst run)",
            )
        )
    else:
        out.append(agreement.judge(None))
    if needles:
        dense, sparse = accuracy(needles, False), accuracy(needles, True)
        same = sum(c.dense_ok == c.sparse_ok for c in needles)
        out.append(
            TARGETS["needles"].judge(
                sparse - dense,
                f"{sparse:.1%} vs {dense:.1%} ({same}/{len(needles)} cells scored alike)",
            )
        )
    else:
        out.append(TARGETS["needles"].judge(None))
    if default_model:
        out += _default_model_targets(latency, default_model)
    return out


def _default_model_targets(latency: list[LatencyRun], model: str) -> list[Verdict]:
    kept, p50 = TARGETS["kept"], TARGETS["p50"]
    mine = [r for r in latency if r.model == model]
    if not mine:
        return [kept.judge(None, name=f"{kept.name} ({model})"), p50.judge(None)]
    context = max(r.context for r in mine)
    where = f"{model} at {_k(context)}"
    out = []
    for batch, (dense, sparse) in sorted(_latency_pairs(mine, context, model).items()):
        c = sparse.counters
        out.append(
            kept.judge(
                c.kept_share,
                f"{c.kept_share:.1%} ({c.kept} of {c.layer_steps + c.dense_layer_steps}; "
                f"KV head groups: {c.group_share:.1%})",
                name=f"{kept.name}, {where}, batch {batch}",
            )
        )
        cut = p50_reduction(dense, sparse)
        out.append(
            p50.judge(
                cut,
                _cut_line(cut, sparse.p50_s, dense.p50_s),
                name=f"{p50.name}, {where}, batch {batch}",
            )
        )
    return out


def worst_agreement(fidelity: list[FidelityRun]) -> FidelityRun:
    """The run the top-1 target is judged on."""
    return min(fidelity, key=lambda f: f.agreement)


def floor_note(fidelity: list[FidelityRun]) -> str | None:
    """A sentence for under the top-1 target: the dense noise floor of the run it is judged on,
    so a reader can tell how much of the gap float rounding alone explains."""
    if not fidelity:
        return None
    worst = worst_agreement(fidelity)
    where = f"{worst.model} at {_k(worst.context)}"
    floor = worst.dense_floor
    if floor is None:
        return (
            f"Top-1 noise floor: not measured on the top-1 target's worst run ({where}): "
            f"the engine had no fused CPU attention kernel to set against the torch path."
        )
    return (
        f"Top-1 noise floor: on the top-1 target's worst run ({where}), the dense path "
        f"computed two exact ways that differ only in float rounding (the fused CPU decode "
        f"kernel and the pure-torch attention path, same dtype, same prefilled cache) "
        f"agrees with itself on {floor:.1%} of steps ({worst.dense_floor_agree}/"
        f"{worst.steps}): rounding alone flips {1 - floor:.1%} of the top tokens, the "
        f"sparse path {1 - worst.agreement:.1%}."
    )


def _latency_pairs(
    runs: list[LatencyRun], context: int, model: str
) -> dict[int, tuple[LatencyRun, LatencyRun]]:
    at = [r for r in runs if r.context == context and r.model == model]
    dense = {r.batch: r for r in at if not r.sparse}
    sparse = {r.batch: r for r in at if r.sparse}
    return {b: (dense[b], sparse[b]) for b in dense if b in sparse}


def _cut_line(cut: float, sparse_s: float, dense_s: float) -> str:
    """How a latency target's measurement reads: the change, then both times in ms."""
    return f"{_change(cut)} ({sparse_s * 1000:.1f} vs {dense_s * 1000:.1f} ms)"


def _change(cut: float) -> str:
    return f"{cut:.1%} lower" if cut >= 0 else f"{-cut:.1%} higher"


def _k(tokens: int) -> str:
    return f"{tokens // 1024}k" if tokens % 1024 == 0 else f"{tokens}"
