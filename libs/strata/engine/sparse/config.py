"""Settings of the sparse long-context decode path, validated on construction (no torch)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from strata.engine.sparse.layers import ladder

DEFAULT_BUDGET_FRACTION = 0.125
ESTIMATES = ("moment", "bound")


@dataclass(slots=True, frozen=True)
class SparseConfig:
    """When a decode row goes sparse, how many KV blocks it reads, and when it is not trusted.

    A decode row (one sequence's new token) takes the sparse path when its request asks for it
    (or leaves it to `enabled`) and its context holds at least `min_context` tokens. It then
    reads `sink_blocks` leading blocks (attention sinks), the `window_blocks` most recent ones
    (the last, partly filled block among them) and the best-scored blocks in between, up to a
    total of `budget_blocks` blocks, or, when that is 0, `budget_fraction` of its blocks. A
    layer's KV head group whose estimate of the attention mass left out exceeds `threshold` is
    recomputed with full attention (the trust check). The estimate is `moment` (close to the
    true mass, occasionally below it) or `bound` (never below it, and on real keys so far above
    that nearly every layer falls back): see select.py. With `compensate` (the default), the
    mass left out, by compensation's own estimate (select.py's `comp`, from each block's exact
    key variance), is given to the left-out tokens' mean value instead of being dropped
    (compensate.py); off, the selection's output is used as it is. The trust check decides the
    same either way. What compensation does to fidelity, measured: docs/design/sparse.md.

    With `adaptive` (the default) and a budget given as a fraction, each layer runs at the
    level of the budget ladder (budget_fraction, doubled, doubled again: `at_level`) or with
    dense attention, whichever measured fastest in that layer (layers.py; on the CPU); off,
    with budget_blocks, or on another device, every layer reads the configured budget.
    """

    enabled: bool = False  # the default for requests that do not choose
    min_context: int = 4096  # tokens in the context before a row may go sparse
    budget_blocks: int = 0  # blocks read per row and KV head; 0 = use budget_fraction
    budget_fraction: float = DEFAULT_BUDGET_FRACTION
    sink_blocks: int = 1
    window_blocks: int = 4  # includes the last block, the one being written
    threshold: float = 0.1  # largest estimate of left-out attention mass still trusted
    estimate: str = "moment"  # moment: calibrated estimate; bound: never below the truth
    compensate: bool = True  # the left-out mass goes to the left-out tokens' mean value
    adaptive: bool = True  # per layer, the budget level or dense that measured fastest

    def __post_init__(self) -> None:
        if self.min_context < 1:
            raise ValueError(f"min_context must be at least 1 token, got {self.min_context}")
        if self.budget_blocks < 0:
            raise ValueError(
                f"budget_blocks must be 0 (use budget_fraction) or positive, got "
                f"{self.budget_blocks}"
            )
        if not 0.0 < self.budget_fraction <= 1.0:
            raise ValueError(f"budget_fraction must be in (0, 1], got {self.budget_fraction}")
        if self.sink_blocks < 0:
            raise ValueError(f"sink_blocks must not be negative, got {self.sink_blocks}")
        if self.window_blocks < 1:
            raise ValueError(
                f"window_blocks must be at least 1 (the block being written), got "
                f"{self.window_blocks}"
            )
        if self.budget_blocks and self.budget_blocks <= self.sink_blocks + self.window_blocks:
            raise ValueError(
                f"budget_blocks ({self.budget_blocks}) must exceed sink_blocks + "
                f"window_blocks ({self.sink_blocks + self.window_blocks}): the "
                f"budget also pays for the blocks chosen by score"
            )
        if self.estimate not in ESTIMATES:
            raise ValueError(
                f"estimate must be one of {', '.join(ESTIMATES)}, got {self.estimate!r}"
            )
        if not isinstance(self.compensate, bool):
            raise ValueError(f"compensate must be True or False, got {self.compensate!r}")
        if not isinstance(self.adaptive, bool):
            raise ValueError(f"adaptive must be True or False, got {self.adaptive!r}")
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(
                f"threshold must be a fraction of attention mass in [0, 1], got {self.threshold}"
            )

    @property
    def logit_threshold(self) -> float:
        """log(t / (1 - t)) of the threshold t: E / (Z_in + E) > t exactly when
        log E - log Z_in exceeds it, one comparison of the logs the kernels return."""
        if self.threshold <= 0.0:
            return -math.inf
        if self.threshold >= 1.0:
            return math.inf
        return math.log(self.threshold / (1.0 - self.threshold))

    @property
    def levels(self) -> tuple[float, ...]:
        """The budget fractions the adaptive path may use per layer; (budget_fraction,) when it
        does not adapt."""
        if not self.adaptive or self.budget_blocks:
            return (self.budget_fraction,)
        return ladder(self.budget_fraction)

    def at_level(self, level: int) -> SparseConfig:
        """This configuration reading `levels[level]` of a row's blocks."""
        if level == 0:
            return self
        return replace(self, budget_fraction=self.levels[level])

    def budget_for(self, num_blocks: int) -> int:
        """Blocks a row with `num_blocks` blocks of context reads: never fewer than the sinks,
        the window and one scored block."""
        if self.budget_blocks:
            want = self.budget_blocks
        else:
            want = math.ceil(self.budget_fraction * num_blocks)
        return max(want, self.sink_blocks + self.window_blocks + 1)

    def applies(self, context_len: int, block_size: int) -> bool:
        """Whether a row with this context length goes sparse (its request having asked): the
        context is long enough and the budget leaves some of its blocks out."""
        if context_len < self.min_context:
            return False
        blocks = -(-context_len // block_size)
        return self.budget_for(blocks) < blocks


def parse_budget(text: str) -> tuple[int, float]:
    """'256' -> 256 blocks; '0.125' or '12.5%' -> that fraction of a row's blocks.

    Returns (budget_blocks, budget_fraction), one of them the default; ValueError says what a
    valid budget looks like."""
    raw = text.strip()
    try:
        if raw.endswith("%"):
            return 0, float(raw[:-1]) / 100.0
        if "." in raw or "e" in raw.lower():
            return 0, float(raw)
        return int(raw), DEFAULT_BUDGET_FRACTION
    except ValueError:
        raise ValueError(
            f"a sparse budget is a block count (256) or a fraction of the context "
            f"(0.125 or 12.5%), got {text!r}"
        ) from None
