"""Logging that a caller cannot turn into a flood: one line per key per interval, with a count.

A service logs what a bad request did so that an operator can see it, but a client sending the
same bad request in a loop must not fill the disk with tracebacks. `LogThrottle.allow(key)`
answers True at most once per `interval_s` for each key and reports how many calls it swallowed
since the last True, so the line that is logged carries the count.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass

DEFAULT_INTERVAL_S = 60.0
MAX_KEYS = 1024  # keys are method names and exception types: a bounded set in practice


@dataclass(slots=True)
class _Window:
    logged_at: float
    suppressed: int = 0


class LogThrottle:
    """Thread-safe; `clock` is any monotonic seconds source."""

    def __init__(self, clock: Callable[[], float], interval_s: float = DEFAULT_INTERVAL_S):
        if interval_s <= 0:
            raise ValueError(f"interval_s must be positive, got {interval_s}")
        self._clock = clock
        self.interval_s = interval_s
        self._windows: dict[Hashable, _Window] = {}
        self._lock = threading.Lock()

    def allow(self, key: Hashable) -> tuple[bool, int]:
        """(log now?, calls swallowed for this key since it was last logged)."""
        now = self._clock()
        with self._lock:
            w = self._windows.get(key)
            if w is None or now - w.logged_at >= self.interval_s:
                swallowed = w.suppressed if w is not None else 0
                if w is None and len(self._windows) >= MAX_KEYS:
                    self._windows.pop(next(iter(self._windows)))
                self._windows[key] = _Window(now)
                return True, swallowed
            w.suppressed += 1
            return False, w.suppressed
