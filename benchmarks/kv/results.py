"""What one configuration's replays measured, summarized, and the issue's targets checked on it.

A configuration may replay the window several times (rounds, interleaved with the other
configurations so that a slow spell of this shared machine lands on both sides): its figures
pool every round's requests, and each round's own latencies are kept beside them.

Hit figures are in engine blocks, over the blocks the engine looks up (each prompt's full blocks
minus its always-recomputed last token): the same denominator as the infinite-cache bound.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from benchmarks.common.targets import Target, Verdict
from benchmarks.kv.replay import ReplayResult
from benchmarks.kv.store_process import StoreFigures
from strata.core.stats import percentiles

MIB = 1024 * 1024

# Issue 5's targets for the tiered configuration against device-only and the trace's bound.
TARGETS = {
    "memory": Target("device-tier KV memory (peak) vs device-only", ">=", 0.65, "{:.0%}", " less"),
    "latency": Target("P50 E2E latency vs device-only", "<=", 0.05, "{:.0%}", " higher"),
    "bound": Target(
        "block-hit ratio vs infinite-cache bound", ">=", 0.95, "{:.0%}", " of the bound"
    ),
}


@dataclass(slots=True, frozen=True)
class RoundFigures:
    """One replay of the window by one configuration."""

    round: int
    position: int  # 0: ran first in its round, 1: second
    ttft_p50_s: float
    ttft_p99_s: float
    e2e_p50_s: float
    e2e_p99_s: float
    own_cores: float = 0.0
    other_cores: float = 0.0


@dataclass(slots=True)
class ConfigResult:
    name: str
    description: str
    pool_blocks: int
    block_bytes: int
    requests: int
    completed: int
    peak_blocks: int
    mean_blocks: float
    prompt_blocks: int
    device_hit_blocks: int
    tier_hit_blocks: int
    ttft_p50_s: float
    ttft_p99_s: float
    e2e_p50_s: float
    e2e_p99_s: float
    wall_s: float
    steps: int
    preemptions: int
    evictions: int
    own_cores: float = 0.0
    other_cores: float = 0.0
    store: StoreFigures | None = None
    notes: list[str] = field(default_factory=list)
    rounds: list[RoundFigures] = field(default_factory=list)

    @property
    def pool_mib(self) -> float:
        return self.pool_blocks * self.block_bytes / MIB

    @property
    def peak_mib(self) -> float:
        return self.peak_blocks * self.block_bytes / MIB

    @property
    def mean_mib(self) -> float:
        return self.mean_blocks * self.block_bytes / MIB

    def share(self, blocks: int) -> float:
        return blocks / self.prompt_blocks if self.prompt_blocks else 0.0

    @property
    def hit_ratio(self) -> float:
        return self.share(self.device_hit_blocks + self.tier_hit_blocks)


def round_figures(
    result: ReplayResult, round_index: int, position: int, own_cores: float, other_cores: float
) -> RoundFigures:
    ttft, e2e = _latencies(_finished(result))
    return RoundFigures(
        round_index, position, ttft[0], ttft[1], e2e[0], e2e[1], own_cores, other_cores
    )


def summarize(
    name: str,
    description: str,
    results: Sequence[ReplayResult],
    pool_blocks: int,
    block_bytes: int,
    block_size: int,
) -> ConfigResult:
    """Pool the rounds: every round's requests in one set of percentiles and hit counts; the
    peak is the highest of the rounds, the mean their average."""
    done = [r for result in results for r in _finished(result)]
    if not done:
        raise RuntimeError(f"{name}: no request finished; nothing to summarize")
    ttft, e2e = _latencies(done)
    return ConfigResult(
        name=name,
        description=description,
        pool_blocks=pool_blocks,
        block_bytes=block_bytes,
        requests=sum(len(r.records) for r in results),
        completed=len(done),
        peak_blocks=max(r.memory.peak_blocks for r in results),
        mean_blocks=sum(r.memory.mean_blocks for r in results) / len(results),
        prompt_blocks=sum((r.prompt_tokens - 1) // block_size for r in done),
        device_hit_blocks=sum(r.cached_tokens // block_size for r in done),
        tier_hit_blocks=sum(r.tier_tokens // block_size for r in done),
        ttft_p50_s=ttft[0],
        ttft_p99_s=ttft[1],
        e2e_p50_s=e2e[0],
        e2e_p99_s=e2e[1],
        wall_s=sum(r.wall_s for r in results),
        steps=sum(r.steps for r in results),
        preemptions=sum(r.preemptions for r in results),
        evictions=sum(r.evictions for r in results),
    )


def _finished(result: ReplayResult) -> list:
    return [r for r in result.records if r.finish_s is not None]


def _latencies(done: list) -> tuple[list[float], list[float]]:
    """TTFT and E2E, each as (P50, P99)."""
    return (
        percentiles([r.ttft_s for r in done], (50, 99)),
        percentiles([r.e2e_s for r in done], (50, 99)),
    )


def pair_ratios(device_only: ConfigResult, tiered: ConfigResult) -> list[float]:
    """Tiered P50 E2E over device-only's, round by round (the two ran back to back)."""
    base = {r.round: r.e2e_p50_s for r in device_only.rounds}
    return [r.e2e_p50_s / base[r.round] - 1 for r in tiered.rounds if r.round in base]


def noise_floor(result: ConfigResult) -> float | None:
    """How far one configuration's own P50 E2E moved between rounds: highest over lowest - 1."""
    p50 = [r.e2e_p50_s for r in result.rounds]
    return max(p50) / min(p50) - 1 if len(p50) > 1 else None


def check_targets(device_only: ConfigResult, tiered: ConfigResult, bound: float) -> list[Verdict]:
    saving = 1 - tiered.peak_blocks * tiered.block_bytes / (
        device_only.peak_blocks * device_only.block_bytes
    )
    increase = tiered.e2e_p50_s / device_only.e2e_p50_s - 1
    of_bound = tiered.hit_ratio / bound if bound > 0 else 1.0
    return [
        TARGETS["memory"].judge(
            saving,
            f"{saving:.1%} less ({tiered.peak_mib:.1f} vs {device_only.peak_mib:.1f} MiB)",
        ),
        TARGETS["latency"].judge(
            increase,
            f"{increase:+.1%} ({tiered.e2e_p50_s * 1000:.0f} vs "
            f"{device_only.e2e_p50_s * 1000:.0f} ms)",
        ),
        TARGETS["bound"].judge(
            of_bound, f"{of_bound:.1%} of it ({tiered.hit_ratio:.1%} vs {bound:.1%})"
        ),
    ]
