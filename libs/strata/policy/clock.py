"""Clocks injected into policies: the wall clock for services, a manual one for tests and the
simulator."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """A monotonic source of seconds.

    Invariant: now() never decreases. The origin is arbitrary, so only differences mean anything;
    never compare it with Unix time.
    """

    def now(self) -> float: ...


class WallClock:
    """time.monotonic: immune to NTP steps, which would otherwise expire every node at once."""

    def now(self) -> float:
        return time.monotonic()


class ManualClock:
    """A clock that moves only when told to; tests and the discrete-event simulator advance it."""

    __slots__ = ("_now",)

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError(f"a clock cannot go back: advance({seconds})")
        self._now += seconds
        return self._now

    def set(self, t: float) -> None:
        if t < self._now:
            raise ValueError(f"a clock cannot go back: set({t}) is before now ({self._now})")
        self._now = float(t)
