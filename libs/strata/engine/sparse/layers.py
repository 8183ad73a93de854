"""Per-layer choice of the sparse budget, or of dense attention, learned from the trust check.

A model's layers differ: in some, a few blocks hold nearly all of a query's attention and the
trust check passes at the smallest budget; in others the attention is spread out and it fails at
every budget, so the sparse path there costs its selection and then full attention on top. The
engine learns per layer which of these it is, from the outcomes of the trust check it runs
anyway, and runs each layer at the option that has cost least.

Options per layer: the budget ladder's levels (fractions of a row's blocks, smallest first: see
`ladder`) and dense. The cost of an option is in units of one dense read of a pair's keys and
values (pair: one row's KV head group):

    dense        1
    level k      SCORE_COST + f_k + p_k   (scoring the block index, reading f_k of the blocks,
                                           and full attention again for the fraction p_k of
                                           pairs whose trust check fails)

p_k is measured over windows of `window` pairs at that level. A level not measured yet is
assumed to pass always (its cost SCORE_COST + f_k), so each is tried once before it is judged;
after each window the layer takes the option of least cost. A layer that chose dense runs dense
for `hold` of its decode steps (doubling, up to `max_hold`, each time it chooses dense again),
then tries its best level again. Every `refresh` windows on one level, the other levels' costs
are forgotten and tried again, since a layer's attention changes as its context grows.

The trust check itself is unchanged: whatever a layer's option, every pair on the sparse path
whose estimate of the mass it leaves out exceeds the threshold is recomputed in full, so this
policy trades speed only, never fidelity. Pure Python: no torch; the decoder reports outcomes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

SCORE_COST = 0.1  # the block index read per block (3 x head_dim values) against its keys and
#                   values (2 x block_size x head_dim): 3/32 for blocks of 16 tokens
WINDOW = 48  # pairs per measurement of a level's failure rate
HOLD = 32  # decode steps a layer runs dense after choosing it, at first
MAX_HOLD = 1024
REFRESH = 16  # windows on one level before the other levels are measured again


def ladder(base: float, levels: int = 3) -> tuple[float, ...]:
    """The budget fractions a layer may use: base, then doubling, below a whole context."""
    out = [base]
    while len(out) < levels and out[-1] * 2 < 1.0:
        out.append(out[-1] * 2)
    return tuple(out)


@dataclass(slots=True)
class _Layer:
    level: int | None = 0  # None: dense
    failure: list[float | None] = field(default_factory=list)  # p_k per level, None: untried
    pairs: int = 0  # pairs in the current window
    failed: int = 0
    windows: int = 0  # windows on the current level
    hold: int = HOLD  # the next dense period's length
    dense_left: int = 0  # steps of the current dense period still to run


class LayerBudgets:
    """Which option each layer runs now (`choose`), updated from trust-check outcomes
    (`observe`). fractions: the ladder, smallest first; levels are indices into it."""

    def __init__(
        self,
        num_layers: int,
        fractions: tuple[float, ...],
        window: int = WINDOW,
        hold: int = HOLD,
        max_hold: int = MAX_HOLD,
        refresh: int = REFRESH,
    ) -> None:
        if not fractions or any(not 0.0 < f <= 1.0 for f in fractions):
            raise ValueError(f"budget fractions must be in (0, 1], got {fractions}")
        if list(fractions) != sorted(fractions):
            raise ValueError(f"budget fractions must rise, got {fractions}")
        if window < 1 or hold < 1 or max_hold < hold or refresh < 1:
            raise ValueError("window, hold and refresh must be positive, max_hold >= hold")
        self.fractions = fractions
        self.window = window
        self.first_hold = hold
        self.max_hold = max_hold
        self.refresh = refresh
        self._layers = [
            _Layer(failure=[None] * len(fractions), hold=hold) for _ in range(num_layers)
        ]

    def choose(self, layer: int) -> int | None:
        """The level layer `layer` runs at this step, or None for dense attention. Called once
        per layer per decode step that has sparse rows: a dense period counts these calls."""
        st = self._layers[layer]
        if st.level is None:
            if st.dense_left > 0:
                st.dense_left -= 1
                return None
            st.level = self._best(st, with_dense=False)
            st.pairs = st.failed = st.windows = 0
        return st.level

    def observe(self, layer: int, level: int, pairs: int, failed: int) -> None:
        """`failed` of `pairs` pairs at `level` failed the trust check in this layer."""
        st = self._layers[layer]
        if st.level != level:
            return  # a step laid out before the layer moved
        st.pairs += pairs
        st.failed += failed
        if st.pairs < self.window:
            return
        st.failure[level] = st.failed / st.pairs
        st.pairs = st.failed = 0
        st.windows += 1
        if st.windows >= self.refresh:
            st.failure = [p if k == level else None for k, p in enumerate(st.failure)]
        nxt = self._best(st, with_dense=True)
        if nxt is None:
            st.level = None
            st.dense_left = st.hold
            st.hold = min(2 * st.hold, self.max_hold)
            # what the levels cost now is measured again after the period
            st.failure = [None] * len(self.fractions)
            return
        if nxt != level:
            st.level = nxt
            st.windows = 0
        elif st.failure[level] is not None and self.cost(level, st.failure[level]) < 1.0:
            st.hold = self.first_hold  # a level that pays: dense periods start short again

    def cost(self, level: int, failure: float | None) -> float:
        """A pair's cost at `level` (dense = 1), an untried level at no failures."""
        return SCORE_COST + self.fractions[level] + (failure or 0.0)

    def levels(self) -> list[int | None]:
        """Each layer's current option (None: dense)."""
        return [st.level for st in self._layers]

    def _best(self, st: _Layer, with_dense: bool) -> int | None:
        costs = [self.cost(k, p) for k, p in enumerate(st.failure)]
        best = min(range(len(costs)), key=costs.__getitem__)
        if with_dense and costs[best] >= 1.0:
            return None
        return best
