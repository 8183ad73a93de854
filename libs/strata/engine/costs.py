"""The engine's own measured costs, for choosing between loading KV blocks and recomputing them.

A prefix that lives in the KV tier store (evicted, or swapped out when its sequence was
preempted) can be loaded back or recomputed; whichever is cheaper by these running estimates
wins. Until a load has been measured, loading is assumed cheaper, so the first one measures it.
"""

from __future__ import annotations

from dataclasses import dataclass

_ALPHA = 0.2  # EMA weight of a new observation
_MIN_PREFILL_TOKENS = 64  # smaller steps are dominated by weight reads, not per-token work


@dataclass(slots=True)
class CostModel:
    prefill_s_per_token: float | None = None
    load_s_per_byte: float | None = None
    loads_chosen: int = 0
    recomputes_chosen: int = 0

    def observe_step(self, tokens: int, seconds: float) -> None:
        if tokens >= _MIN_PREFILL_TOKENS and seconds > 0:
            self.prefill_s_per_token = _ema(self.prefill_s_per_token, seconds / tokens)

    def observe_load(self, nbytes: int, seconds: float) -> None:
        if nbytes > 0 and seconds > 0:
            self.load_s_per_byte = _ema(self.load_s_per_byte, seconds / nbytes)

    def prefer_load(self, tokens: int, nbytes: int) -> bool:
        if self.load_s_per_byte is None or self.prefill_s_per_token is None:
            choice = True
        else:
            choice = nbytes * self.load_s_per_byte < tokens * self.prefill_s_per_token
        if choice:
            self.loads_chosen += 1
        else:
            self.recomputes_chosen += 1
        return choice


def _ema(old: float | None, new: float) -> float:
    return new if old is None else (1 - _ALPHA) * old + _ALPHA * new
