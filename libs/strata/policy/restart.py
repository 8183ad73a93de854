"""When a supervisor restarts a crashed service, and when it gives up: pure, on an injected clock.

A service that exits is restarted after a backoff that doubles with each quick failure
(`initial_backoff_s`, then x2 up to `max_backoff_s`); a run that lasted `stable_after_s` counts as
healthy and resets the backoff. More than `max_restarts` restarts of one service within
`window_s` is a crash loop: the supervisor stops, since restarting again would only hide the
fault. Compose (`restart: unless-stopped`) and Kubernetes (CrashLoopBackOff) behave alike.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(slots=True)
class RestartPolicy:
    clock: Callable[[], float]
    initial_backoff_s: float = 0.5
    max_backoff_s: float = 30.0
    stable_after_s: float = 60.0
    max_restarts: int = 5
    window_s: float = 120.0
    _restarts: dict[str, deque[float]] = field(default_factory=dict)
    _quick: dict[str, int] = field(default_factory=dict)

    def after_exit(self, service: str, ran_s: float) -> float | None:
        """The service exited after running `ran_s` seconds: seconds to wait before starting it
        again, or None when it is crash-looping and should stay down."""
        now = self.clock()
        recent = self._restarts.setdefault(service, deque())
        while recent and now - recent[0] > self.window_s:
            recent.popleft()
        if len(recent) >= self.max_restarts:
            return None
        recent.append(now)
        quick = 0 if ran_s >= self.stable_after_s else self._quick.get(service, 0) + 1
        self._quick[service] = quick
        return min(self.max_backoff_s, self.initial_backoff_s * 2 ** max(0, quick - 1))

    def restarts(self, service: str) -> int:
        """Restarts of the service within the current window."""
        return len(self._restarts.get(service, ()))
