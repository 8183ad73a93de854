"""Engine cost profiles: what one engine step costs on one machine, as `strata profile` measured it.

A step's wall time (the whole LLMEngine.step: schedule, forward, sample, detokenize) is modelled
as a straight line in five features of the step, fitted by non-negative least squares:

    seconds = step_s                                   per-step overhead (launch, Python)
            + token_s          x tokens                every computed token (weights, MLP)
            + sample_s         x sampled rows          LM head, sampler, output per sampled token
            + prefill_attend_s x prefill keys          multi-token chunks: sum over their tokens
                                                       of the positions they attend to
            + decode_attend_s  x decode keys           one-token items: their context lengths
            + group_s          x prefill groups        the attention groups a step runs its
                                                       prefill chunks in (0 without any)

The group cost is what carrying prefill chunks adds to a step beyond their tokens: each
attention group's calls, and on a CPU the products leaving the few-row kernels (a step's cost is
concave in its rows). It counts the prefill groups alone: with a cost for the decodes' group
too, every step would have one or two groups and the intercept and the group cost would be
nearly collinear; fitted so, SmolLM2's quantized engine got an intercept of -24 ms, which a
non-negative line can only drop (docs/design/scheduling.md). Format 1 counted both groups; a
profile of format 1 is refitted from its measurements on load.

Prefill keys follow the engine's attention (strata.engine.attention): the prefill chunks of a
step are attended in groups of similar size (strata.core.prefill_groups), each one padded
rectangle, chunks x longest chunk x widest context in whole blocks, and the keys are the sum of
the groups' rectangles; a chunk of N tokens after C computed ones alone costs
N x ceil((C+N)/bs) x bs keys. Decodes go through the fused decode kernel, which reads each
sequence's own context: C + 1 keys for a decode at context C. Prefill and decode attention get
separate slopes because they are different kernels. The profile keeps the raw measurements and
the fit's error, so a reader can judge the line; a profile from a GPU machine simulates that GPU.

The profile also carries the per-request costs outside steps that the real stack adds: the
engine's own `add_request` time, and (when measured through a running stack) the time the gRPC
hops gateway -> node manager -> worker add on the way in and on the way out.

Torch-free: the simulator loads profiles; strata.engine.profiler measures them.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace

import numpy as np

from strata.core.prefill_groups import padded, padded_keys

FORMAT = "strata-engine-profile/2"
FORMAT_1 = "strata-engine-profile/1"  # groups counted the decodes' group too: refitted on load
PREFILL_RATE_CHUNK = 512  # tokens: the chunk prefill throughput is quoted for
FEATURES = ("step_s", "token_s", "sample_s", "prefill_attend_s", "decode_attend_s", "group_s")


@dataclass(slots=True, frozen=True)
class StepShape:
    """What a step computes: the fit's features."""

    tokens: int = 0
    sampled: int = 0
    prefill_keys: float = 0.0
    decode_keys: float = 0.0
    groups: int = 0  # prefill groups (strata.core.prefill_groups): 0 without prefill chunks
    prefill_longest: int = 0  # tokens of the step's longest prefill chunk (0: none)
    prefill_context: int = 0  # tokens computed before the widest chunk

    def features(self) -> tuple[float, ...]:
        return (
            1.0,
            float(self.tokens),
            float(self.sampled),
            self.prefill_keys,
            self.decode_keys,
            float(self.groups),
        )


def prefill_keys(chunks: int, longest: int, widest_context: int, block_size: int) -> float:
    """Keys of the padded prefill rectangle: `chunks` chunks, the longest of `longest` tokens,
    the widest context (computed + new tokens) `widest_context` tokens, in whole blocks."""
    return float(padded(chunks, longest, widest_context, block_size))


def step_shape(items: Iterable[tuple[int, bool, int]], block_size: int) -> StepShape:
    """The shape of one engine step from its scheduled items, each given as (tokens computed
    in the step, whether it samples, the sequence's context once the step's tokens are
    computed). One definition for the simulator, which prices a step before running it, and
    the worker's step meter, which prices it after."""
    tokens = sampled = longest = widest = 0
    decode_keys = 0
    chunks: list[tuple[int, int]] = []
    for new, sample, context in items:
        tokens += new
        sampled += sample
        if new == 1:
            decode_keys += context
        else:
            chunks.append((new, context))
            longest = max(longest, new)
            widest = max(widest, context)
    if not chunks:
        return StepShape(tokens, sampled, 0.0, float(decode_keys), 0)
    keys, groups = padded_keys(chunks, block_size)
    return StepShape(
        tokens,
        sampled,
        keys,
        float(decode_keys),
        groups,
        longest,
        max(0, widest - longest),
    )


@dataclass(slots=True)
class Measurement:
    """One measured step shape: kind is prefill | decode | mixed; seconds is the median."""

    kind: str
    tokens: int
    sampled: int
    prefill_keys: float
    decode_keys: float
    seconds: float
    samples: list[float] = field(default_factory=list)
    batch: int = 0  # decode: sequences in the step
    context: int = 0  # prefill: tokens computed before the chunk; decode: mean context

    @property
    def shape(self) -> StepShape:
        groups = 0 if self.kind == "decode" else 1
        chunk = self.tokens - self.batch if self.prefill_keys else 0
        return StepShape(
            self.tokens,
            self.sampled,
            self.prefill_keys,
            self.decode_keys,
            groups,
            chunk,
            self.context if self.kind == "prefill" else 0,
        )


@dataclass(slots=True, frozen=True)
class StepCosts:
    """The fitted line (seconds per unit of each feature)."""

    step_s: float
    token_s: float
    sample_s: float
    prefill_attend_s: float
    decode_attend_s: float
    group_s: float = 0.0
    # Prefill attention is not linear in keys on a CPU (its score matrix falls out of cache as
    # chunks grow), so the prefill measurements' residuals from the line are kept on their
    # (chunk tokens x context) grid and added back by bilinear interpolation, clamped at the
    # grid's edges: exact at measured shapes, the line's slope in between.
    grid_tokens: tuple[int, ...] = ()
    grid_contexts: tuple[int, ...] = ()
    grid_residual_s: tuple[tuple[float, ...], ...] = ()
    # Decode steps are not linear in the batch on a CPU either (small matrix products get
    # cheaper per row as they grow): the decode measurements' residuals, averaged over their
    # contexts, by batch size, interpolated linearly and clamped. Context stays on the line, so
    # a batch's steps still lengthen linearly as its contexts grow (fast-forward's closed form).
    decode_batches: tuple[int, ...] = ()
    decode_residual_s: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "grid_tokens", tuple(self.grid_tokens))
        object.__setattr__(self, "grid_contexts", tuple(self.grid_contexts))
        object.__setattr__(
            self, "grid_residual_s", tuple(tuple(row) for row in self.grid_residual_s)
        )
        object.__setattr__(self, "decode_batches", tuple(self.decode_batches))
        object.__setattr__(self, "decode_residual_s", tuple(self.decode_residual_s))

    def decode_residual(self, batch: float) -> float:
        if not self.decode_batches:
            return 0.0
        lo, hi, f = _bracket(self.decode_batches, batch)
        return self.decode_residual_s[lo] * (1 - f) + self.decode_residual_s[hi] * f

    def line_seconds(self, shape: StepShape) -> float:
        return (
            self.step_s
            + self.token_s * shape.tokens
            + self.sample_s * shape.sampled
            + self.prefill_attend_s * shape.prefill_keys
            + self.decode_attend_s * shape.decode_keys
            + self.group_s * shape.groups
        )

    def prefill_tokens_per_s(self, block_size: int, chunk: int = PREFILL_RATE_CHUNK) -> float:
        """Tokens per second of a step prefilling one `chunk`-token prompt from scratch: the
        rate a worker reports as its prefill throughput (what routing divides queued prompt
        tokens by to estimate a time to first token)."""
        return chunk / self.seconds(step_shape([(chunk, True, chunk)], block_size))

    def seconds(self, shape: StepShape) -> float:
        t = self.line_seconds(shape)
        if shape.prefill_longest and self.grid_tokens:
            t += _bilinear(
                self.grid_tokens,
                self.grid_contexts,
                self.grid_residual_s,
                shape.prefill_longest,
                shape.prefill_context,
            )
        elif not shape.prefill_keys and shape.tokens == shape.sampled:
            t += self.decode_residual(shape.tokens)
        # At a measured shape t is what was measured (its residual); between and past them the
        # residuals interpolate and clamp, so the floor only guards against a negative time.
        return max(t, 0.0)

    def decode_seconds(self, batch: float, context_sum: float) -> float:
        """A step of `batch` one-token decodes whose contexts (keys attended) sum to
        context_sum: the hot path of the simulator's fast-forward; equals seconds() of that
        step. A fractional batch (the placement model's mean batch) interpolates the residual."""
        t = (
            self.step_s
            + (self.token_s + self.sample_s) * batch
            + self.decode_attend_s * context_sum
            + self.decode_residual(batch)
        )
        return max(t, 0.0)


@dataclass(slots=True, frozen=True)
class FitError:
    """Relative error of the fitted line (before the prefill residual grid) on the measured
    shapes."""

    mean_abs_rel: float  # mean of |predicted - measured| / measured
    max_abs_rel: float
    points: int


@dataclass(slots=True, frozen=True)
class RequestOverheads:
    """Per-request time outside engine steps, in seconds.

    add_s: the engine's add_request (validation, sequence, sampler) before the request can be
    scheduled. inbound_s: from the gateway's start to the worker's add (authentication, routing,
    the gRPC hops gateway -> node manager -> worker). outbound_s: a token's way from the engine
    back out of the gateway. step_extra_s: the worker's engine loop around each step (wake-up,
    handing outputs to the gRPC loop). token_send_s: the worker hands each sampled token to its
    gRPC stream on the interpreter the engine steps on, so every step takes this much longer
    per token it samples.
    All zero for a bare engine; measured on a running stack.
    """

    add_s: float = 0.0
    inbound_s: float = 0.0
    outbound_s: float = 0.0
    step_extra_s: float = 0.0
    token_send_s: float = 0.0


@dataclass(slots=True, frozen=True)
class ColocationPoint:
    """Median step of one engine alone and of each of `engines` identical engines stepping
    together on the same device (strata.engine.colocation), and the share of a neighbour's step
    that lands in each step: (together / alone - 1) / (engines - 1). kind: decode (batch
    sequences at context tokens) or prefill (batch prompts of context tokens in one step)."""

    engines: int
    batch: int
    context: int
    alone_s: float
    together_s: float
    alone_steps: int = 0
    together_steps: int = 0
    kind: str = "decode"

    @property
    def share(self) -> float:
        return (self.together_s / self.alone_s - 1.0) / (self.engines - 1)


DEFAULT_SHARE = 1.0  # not measured: engines take turns, step by step


@dataclass(slots=True)
class EngineProfile:
    model: str
    dtype: str
    device: str
    threads: int
    machine: dict
    engine: dict  # the EngineConfig measured with (block size, limits)
    kv_bytes_per_token: int  # the model's KV bytes per token in this dtype
    max_context: int  # the model's context (positions)
    costs: StepCosts
    fit_error: FitError
    measurements: list[Measurement]
    overheads: RequestOverheads = field(default_factory=RequestOverheads)
    created_unix_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    colocation: list[ColocationPoint] = field(default_factory=list)

    @property
    def colocation_share(self) -> float:
        """The share of an active neighbour's decode step that lands in each of this engine's
        steps on a shared device: the median over the measured batch sizes, within [0, 1];
        DEFAULT_SHARE (take turns) when nothing was measured."""
        return _median_share([p for p in self.colocation if p.kind == "decode"])

    @property
    def prefill_colocation_share(self) -> float:
        """The same for steps that prefill (DEFAULT_SHARE when not measured)."""
        return _median_share([p for p in self.colocation if p.kind == "prefill"])

    def to_json(self) -> dict:
        doc = asdict(self)
        doc["format"] = FORMAT
        return doc

    @classmethod
    def from_json(cls, doc: dict) -> EngineProfile:
        """A profile of format 2, or of format 1 with its line refitted from its measurements
        (format 1's group cost meant another feature)."""
        if doc.get("format") not in (FORMAT, FORMAT_1):
            raise ValueError(
                f"not an engine profile of format {FORMAT} (format is "
                f"{doc.get('format')!r}); write one with `strata profile`"
            )
        profile = cls(
            model=doc["model"],
            dtype=doc["dtype"],
            device=doc["device"],
            threads=int(doc["threads"]),
            machine=dict(doc["machine"]),
            engine=dict(doc["engine"]),
            kv_bytes_per_token=int(doc["kv_bytes_per_token"]),
            max_context=int(doc["max_context"]),
            costs=StepCosts(**doc["costs"]),
            fit_error=FitError(**doc["fit_error"]),
            measurements=[Measurement(**m) for m in doc["measurements"]],
            overheads=RequestOverheads(**doc.get("overheads", {})),
            created_unix_s=float(doc.get("created_unix_s", 0.0)),
            notes=list(doc.get("notes", [])),
            colocation=[ColocationPoint(**p) for p in doc.get("colocation", [])],
        )
        if doc["format"] == FORMAT_1:
            profile.costs, profile.fit_error = fit(profile.measurements)
        return profile

    def save(self, path: str | os.PathLike[str]) -> None:
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.to_json(), f, indent=1)
            f.write("\n")


def _median_share(points: Sequence[ColocationPoint]) -> float:
    if not points:
        return DEFAULT_SHARE
    return min(1.0, max(0.0, statistics.median(p.share for p in points)))


def load_profile(path: str | os.PathLike[str]) -> EngineProfile:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not JSON ({err.msg} at line {err.lineno})") from None
    try:
        return EngineProfile.from_json(doc)
    except (KeyError, TypeError) as err:
        raise ValueError(f"{path}: malformed engine profile ({err})") from None


def _nnls(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Least squares with every coefficient >= 0 (Lawson-Hanson active set, small n)."""
    n = a.shape[1]
    active = list(range(n))
    x = np.zeros(n)
    while active:
        sol, *_ = np.linalg.lstsq(a[:, active], b, rcond=None)
        if np.all(sol >= 0):
            x[:] = 0
            x[active] = sol
            return x
        # Drop the most negative coefficient and refit on the rest.
        active.pop(int(np.argmin(sol)))
    return x


def _bracket(axis: Sequence[int], x: float) -> tuple[int, int, float]:
    if x <= axis[0]:
        return 0, 0, 0.0
    if x >= axis[-1]:
        return len(axis) - 1, len(axis) - 1, 0.0
    hi = next(i for i, a in enumerate(axis) if a >= x)
    lo = hi - 1
    return lo, hi, (x - axis[lo]) / (axis[hi] - axis[lo])


def _bilinear(
    xs: Sequence[int], ys: Sequence[int], values: Sequence[Sequence[float]], x: float, y: float
) -> float:
    i0, i1, fx = _bracket(xs, x)
    j0, j1, fy = _bracket(ys, y)
    top = values[i0][j0] * (1 - fy) + values[i0][j1] * fy
    bottom = values[i1][j0] * (1 - fy) + values[i1][j1] * fy
    return top * (1 - fx) + bottom * fx


def _residual_grid(line: StepCosts, prefills: Sequence[Measurement]) -> StepCosts:
    tokens = sorted({m.tokens for m in prefills})
    contexts = sorted({m.context for m in prefills})
    found = {(m.tokens, m.context): m.seconds - line.line_seconds(m.shape) for m in prefills}
    rows = []
    for n in tokens:
        # A shape the model could not run (context too long) takes its nearest measured context.
        have = [c for c in contexts if (n, c) in found]
        rows.append(tuple(found[(n, min(have, key=lambda h: abs(h - c)))] for c in contexts))
    return replace(
        line, grid_tokens=tuple(tokens), grid_contexts=tuple(contexts), grid_residual_s=tuple(rows)
    )


def _decode_residuals(line: StepCosts, decodes: Sequence[Measurement]) -> StepCosts:
    by_batch: dict[int, list[float]] = {}
    for m in decodes:
        by_batch.setdefault(m.batch, []).append(m.seconds - line.line_seconds(m.shape))
    batches = sorted(by_batch)
    return replace(
        line,
        decode_batches=tuple(batches),
        decode_residual_s=tuple(math.fsum(by_batch[b]) / len(by_batch[b]) for b in batches),
    )


def fit(measurements: Sequence[Measurement]) -> tuple[StepCosts, FitError]:
    """Fit the step line to the measurements, weighting each by 1/seconds so that the fit
    minimises relative error: short decode steps matter as much as long prefills."""
    if len(measurements) < len(FEATURES):
        raise ValueError(
            f"a fit needs at least {len(FEATURES)} measurements, got {len(measurements)}"
        )
    x = np.array([m.shape.features() for m in measurements])
    y = np.array([m.seconds for m in measurements])
    if np.any(y <= 0):
        raise ValueError("every measured step must take a positive time")
    w = 1.0 / y
    coef = _nnls(x * w[:, None], y * w)
    step, token, sample, prefill_attend, decode_attend, group = (float(c) for c in coef)
    costs = StepCosts(step, token, sample, prefill_attend, decode_attend, group)
    # The error reported is the line's alone: with the residual grid the prefill shapes would
    # be exact by construction and say nothing about the shapes in between.
    rel = [abs(costs.line_seconds(m.shape) - m.seconds) / m.seconds for m in measurements]
    prefills = [m for m in measurements if m.kind == "prefill"]
    if prefills:
        costs = _residual_grid(costs, prefills)
    decodes = [m for m in measurements if m.kind == "decode"]
    if decodes:
        costs = _decode_residuals(costs, decodes)
    return costs, FitError(
        mean_abs_rel=math.fsum(rel) / len(rel), max_abs_rel=max(rel), points=len(rel)
    )
