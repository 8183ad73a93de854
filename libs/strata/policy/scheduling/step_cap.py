"""The longest step an engine runs while classes with a TTFT target are about: a step under way
cannot be cut, so a request of a higher class that arrives during it waits for its end before its
own prefill starts (strata.engine.scheduler serves prefill by class). Capping a step at
STEP_TTFT_SHARE of the tightest TTFT target among the requests the engine took lately keeps that
wait within a share of the target, whatever lower-class prompt is being prefilled; the rest of
the target is the request's own prefill's.

    cap_ms(now, running) = STEP_TTFT_SHARE x T, where T is the tightest TTFT target among the
                           requests taken in the last window_s, and p the priority of its class;
                           None when no such request came, or when a sequence of class p or
                           above is prefilling in `running` (the class the cap protects is
                           being served: its own prompt goes in steps as large as the running
                           decodes allow)

Without a cap, steps are sized by the running decodes' TPOT targets alone (strata.policy.
scheduling.slo.running_budget), as large as throughput wants. The cost is throughput while it
holds: more steps per lower-class prompt, each with the step's fixed cost (docs/design/
scheduling.md).

Pure: the clock is the caller's. `note` and `cap_ms` may run on different threads (a worker
notes requests on its event loop, its engine thread sizes steps): the state is one dict, copied
before it is read.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

STEP_TTFT_SHARE = 0.5
CAP_WINDOW_S = 60.0


class Prefilling(Protocol):
    """What the cap reads of an engine's running sequence (strata.engine.sequence)."""

    @property
    def priority(self) -> int: ...
    @property
    def num_pending(self) -> int: ...


class StepCap:
    def __init__(self, share: float = STEP_TTFT_SHARE, window_s: float = CAP_WINDOW_S) -> None:
        if not 0.0 < share <= 1.0:
            raise ValueError(f"share must be in (0, 1], got {share}")
        if not window_s > 0:
            raise ValueError(f"window_s must be positive, got {window_s}")
        self.share = share
        self.window_s = window_s
        # TTFT target (ms) -> (when a request last had it, its class's priority)
        self._seen: dict[float, tuple[float, int]] = {}

    def note(self, ttft_ms: float | None, priority: int, now: float) -> None:
        """A request of class `priority` with the TTFT target `ttft_ms` (None or <= 0: none)
        was taken."""
        if ttft_ms is None or not ttft_ms > 0:
            return
        self._seen[ttft_ms] = (now, priority)
        if len(self._seen) > 8:  # classes are few; drop the stale ones
            for target, (at, _) in self._seen.copy().items():
                if now - at > self.window_s:
                    self._seen.pop(target, None)

    def cap_ms(self, now: float, running: Iterable[Prefilling] = ()) -> float | None:
        """The longest step at `now` for an engine running `running`, in ms, or None (module
        docstring)."""
        live = [(t, p) for t, (at, p) in self._seen.copy().items() if now - at <= self.window_s]
        if not live:
            return None
        target, priority = min(live)
        if any(s.num_pending > 1 and s.priority >= priority for s in running):
            return None
        return self.share * target
