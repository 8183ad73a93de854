"""Per-layer choice of the sparse budget, or of dense attention, learned from measured time.

A model's layers differ: in some, a few blocks hold nearly all of a query's attention and the
trust check passes at the smallest budget; in others the attention is spread out and it fails at
every budget, so the sparse path there costs its selection and then full attention on top. How
much each costs also depends on the machine: a fallback of one KV head group recomputes one
(row, KV head) pair, which on a CPU runs on one thread while the others wait. So the engine
does not model the cost; it measures it. Per layer, each option (the budget ladder's levels,
smallest first, then dense attention) is run for a window of `window` calls, its cost is the
median of those calls' seconds per row, and the layer then runs the option that measured
cheapest. Every `refresh` windows the other options' figures are forgotten and measured again,
since a layer's attention changes as its context grows and the machine's load changes.

Within a layer the KV head groups differ too: at a level where most groups hold, one or two may
fail the trust check on nearly every row, so they pay their selection and then full attention.
Per layer and level, a group that fell back on at least `DENSE_SHARE` of a window's rows runs
dense outright at that level from then on (no selection; full attention over its context), and
the level is timed again with that choice; the groups' choices are forgotten at each refresh.

The trust check itself is unchanged: whatever a layer's option, every pair on the sparse path
whose estimate of the mass it leaves out exceeds the threshold is recomputed in full, so this
policy trades speed only, never fidelity. Pure Python: no torch and no clock; the decoder times
each layer's call and reports it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

WINDOW = 8  # calls of one layer that measure an option
REFRESH = 32  # windows on the chosen option before the others are measured again
DENSE_SHARE = 0.75  # a group that fell back on this share of a window's rows goes dense


def ladder(base: float, levels: int = 3) -> tuple[float, ...]:
    """The budget fractions a layer may use: base, then doubling, below a whole context."""
    out = [base]
    while len(out) < levels and out[-1] * 2 < 1.0:
        out.append(out[-1] * 2)
    return tuple(out)


@dataclass(slots=True)
class _Layer:
    option: int = 0  # a level, or len(levels): dense
    cost: list[float | None] = field(default_factory=list)  # seconds per row, None: unmeasured
    samples: list[float] = field(default_factory=list)  # this window's seconds per row
    windows: int = 0  # windows on the current option since it was chosen
    dense: list[tuple[bool, ...]] = field(default_factory=list)  # per level: groups run dense
    fails: list[int] = field(default_factory=list)  # this window's fallbacks per group
    rows: int = 0  # this window's rows


class LayerBudgets:
    """Which option each layer runs now (`choose`), updated from measured calls (`observe`).
    fractions: the ladder, smallest first; options 0..K-1 are its levels, K is dense;
    kv_heads: the KV head groups of a layer, each of which may run dense outright at a level
    (`dense_groups`)."""

    def __init__(
        self,
        num_layers: int,
        fractions: tuple[float, ...],
        kv_heads: int = 1,
        window: int = WINDOW,
        refresh: int = REFRESH,
    ) -> None:
        if not fractions or any(not 0.0 < f <= 1.0 for f in fractions):
            raise ValueError(f"budget fractions must be in (0, 1], got {fractions}")
        if list(fractions) != sorted(fractions):
            raise ValueError(f"budget fractions must rise, got {fractions}")
        if window < 1 or refresh < 1 or kv_heads < 1:
            raise ValueError(
                f"window, refresh and kv_heads must be positive, got {window}, {refresh}, "
                f"{kv_heads}"
            )
        self.fractions = fractions
        self.dense = len(fractions)  # the option index of dense attention
        self.window = window
        self.refresh = refresh
        self.kv_heads = kv_heads
        self._none = (False,) * kv_heads
        self._layers = [
            _Layer(
                cost=[None] * (self.dense + 1),
                dense=[self._none] * self.dense,
                fails=[0] * kv_heads,
            )
            for _ in range(num_layers)
        ]

    def choose(self, layer: int) -> int | None:
        """The level layer `layer` runs at this step, or None for dense attention."""
        option = self._layers[layer].option
        return None if option == self.dense else option

    def dense_groups(self, layer: int, level: int) -> tuple[bool, ...]:
        """Which KV head groups of layer `layer` run dense outright at `level`."""
        return self._layers[layer].dense[level]

    def observe(
        self,
        layer: int,
        level: int | None,
        rows: int,
        seconds: float,
        fails: tuple[int, ...] | list[int] = (),
    ) -> None:
        """Layer `layer` ran `rows` sparse rows at `level` (None: dense) in `seconds`;
        fails[g]: the rows whose KV head group g fell back (empty: none did)."""
        st = self._layers[layer]
        option = self.dense if level is None else level
        if option != st.option or rows < 1:
            return  # a call laid out before the layer moved
        st.samples.append(seconds / rows)
        st.rows += rows
        for g, n in enumerate(fails):
            st.fails[g] += n
        if len(st.samples) < self.window:
            return
        window_rows, window_fails = st.rows, st.fails
        st.rows, st.fails = 0, [0] * self.kv_heads
        if option != self.dense:
            was = st.dense[option]
            now = tuple(d or n >= DENSE_SHARE * window_rows for d, n in zip(was, window_fails))
            if now != was:
                # the level changed: its window measured the old choice, so time it again
                st.dense[option] = now
                st.samples.clear()
                return
        ordered = sorted(st.samples)
        st.cost[option] = ordered[len(ordered) // 2]
        st.samples.clear()
        st.windows += 1
        if st.windows >= self.refresh:
            st.cost = [c if k == option else None for k, c in enumerate(st.cost)]
            st.dense = [self._none] * self.dense
        untried = [k for k, c in enumerate(st.cost) if c is None]
        if untried:
            nxt = untried[0]
        else:
            nxt = min(range(len(st.cost)), key=lambda k: st.cost[k] or 0.0)
        if nxt != option:
            st.option = nxt
            st.windows = 0

    def levels(self) -> list[int | None]:
        """Each layer's current option (None: dense)."""
        return [self.choose(layer) for layer in range(len(self._layers))]
