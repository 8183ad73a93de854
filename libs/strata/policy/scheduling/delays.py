"""What a replica's requests lately waited for their first token beyond their own prefill: the
feedback that keeps admission honest when its estimate of the wait runs short.

The scheduler prices a request's time to first token from what it knows at the moment it
routes (the work queued ahead, the engine's slot turnover, the chunks the running decodes leave
for a prefill: strata.policy.scheduling.global_scheduler). In a burst those inputs lag: the slot
turnover was measured before the burst, and requests routed by other schedulers or not yet
reported are not seen. What the node measures does not lag that way. For each request it hands
to an engine it records, at the request's first token,

    delay = (first token - arrival at the node) - own prefill

where the own prefill is the prompt alone on an idle replica, priced by the worker's step line
in chunks of the engine's step budget (strata.policy.scheduling.slo.prefill_s). The delay is
the part of the wait that depends on what else the replica holds, not on the prompt's length,
so it carries over to the next request of any size.

It does depend on how many requests were ahead: first tokens come one prefill after another,
so a request behind ten others waits about ten times what one behind none does. Taken raw, the
delays of a burst's last requests would price a request that comes once the queue has drained
as if it were behind the whole burst again (seen: 4 s quoted for a request with one other on
the replica, 0.2 s to its first token). So each sample is the delay per place in the queue,

    delay / (ahead + 1)

with `ahead` the requests for the same replica that had no first token yet when it arrived and
that it could not pass: those of its class or above that its engine held or the node queued
(the node's queue and the engine's scheduler serve classes in strict priority; under a queue
without classes every request is of one class and passes nobody).

It depends on the class too. A request of a higher class goes before the lower classes queued,
and when none of its engine's slots frees in time it displaces a lower class there (strata.node.
dispatcher), so it waits far less than they do; one class's delays say little about another's.
Samples are kept per (replica, class), and a replica reports, for each class with samples, that
class's per-place figure (the DELAY_QUANTILE of its last DELAY_WINDOW no older than
DELAY_MAX_AGE_S) times the places a request of the class arriving now would take. The scheduler
reads the class of the request it routes, or failing samples of it the nearest class below (a
lower class waits at least as long: a bound, not a guess; `class_delay_s`), and its TTFT check
takes the larger of its own estimate and that delay plus the request's own prefill (a request
is not admitted where the ones of its class before it, in a queue as long as the one it joins,
waited longer than its class allows).

Pure: the node manager's dispatcher and the simulator's node front keep one each, with the
clock injected.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence

DELAY_WINDOW = 32  # the latest first tokens of a class on a replica its delay is taken over
DELAY_QUANTILE = 0.9
DELAY_MAX_AGE_S = 20.0  # older first tokens say nothing about the replica's queue now

# A replica's report: (class priority, delay in s) for each class with a delay, by priority.
ClassDelays = tuple[tuple[int, float], ...]


def class_delay_s(delays: Sequence[tuple[int, float]], priority: int) -> float:
    """The delay reported for `priority`'s class, else for the nearest class below it that has
    one (module docstring); 0 when none at or below it has one."""
    best, found = 0.0, None
    for p, d in delays:
        if p <= priority and (found is None or p > found):
            best, found = d, p
    return best


class RecentDelays:
    """Per-place delays by (replica, class priority): the latest `window` of each, aged out
    after `max_age_s`."""

    def __init__(
        self,
        window: int = DELAY_WINDOW,
        quantile: float = DELAY_QUANTILE,
        max_age_s: float = DELAY_MAX_AGE_S,
    ) -> None:
        if window < 1 or not 0.0 <= quantile <= 1.0 or not max_age_s > 0:
            raise ValueError(
                f"window must be >= 1, quantile in [0, 1] and max_age_s positive, got "
                f"{window}, {quantile}, {max_age_s}"
            )
        self.window = window
        self.quantile = quantile
        self.max_age_s = max_age_s
        # replica -> class priority -> (when, delay)
        self._samples: dict[str, dict[int, deque[tuple[float, float]]]] = {}

    def add(self, replica_id: str, delay_s: float, now: float, priority: int = 0) -> None:
        """A first token of class `priority` on `replica_id` at `now`, `delay_s` past the
        request's own prefill (clamped at 0: a prefill faster than its price waited nothing)."""
        classes = self._samples.setdefault(replica_id, {})
        samples = classes.get(priority)
        if samples is None:
            samples = classes[priority] = deque(maxlen=self.window)
        samples.append((now, max(0.0, delay_s)))

    def priorities(self, replica_id: str, now: float) -> list[int]:
        """The classes with samples on the replica no older than max_age_s, ascending."""
        classes = self._samples.get(replica_id, {})
        return sorted(p for p, s in classes.items() if s and now - s[-1][0] <= self.max_age_s)

    def delay_s(self, replica_id: str, now: float, priority: int = 0) -> float:
        """The quantile (nearest rank) of the class's recent delays on the replica; 0 when it
        has none."""
        samples = self._samples.get(replica_id, {}).get(priority)
        if not samples:
            return 0.0
        while samples and now - samples[0][0] > self.max_age_s:
            samples.popleft()
        if not samples:
            return 0.0
        ordered = sorted(d for _, d in samples)
        return ordered[min(len(ordered) - 1, int(self.quantile * len(ordered)))]

    def forget(self, replica_ids: set[str]) -> None:
        """Drop the replicas not in `replica_ids` (gone from the node)."""
        for rid in [r for r in self._samples if r not in replica_ids]:
            del self._samples[rid]


class FirstTokens:
    """A node's requests between arrival and first token: how many were ahead of each when it
    arrived and its class, which ones its engines hold without a first token, per replica, and
    the per-place delays of those that got theirs (RecentDelays, by class). A class's delay on
    a replica is 0 while no request it could not pass waits for a first token there (none
    dispatched without one, none of its class or above queued for it): the queue the delays
    measured has drained, and the scheduler's own estimate sees that.

    Invariant: `_ahead` holds exactly the requests that arrived and have neither had a first
    token nor left."""

    def __init__(self, delays: RecentDelays | None = None) -> None:
        self.delays = delays if delays is not None else RecentDelays()
        # replica id -> request id without a token -> its class
        self._waiting: dict[str, dict[str, int]] = {}
        self._ahead: dict[str, tuple[int, int]] = {}  # request id -> (ahead on arrival, class)

    def waiting(self, replica_id: str, priority: int = 0) -> int:
        """Requests of class `priority` or above the replica's engine holds without a first
        token."""
        return sum(1 for p in self._waiting.get(replica_id, {}).values() if p >= priority)

    def arrived(self, request_id: str, ahead: int, priority: int = 0) -> None:
        """The request, of class `priority`, reached the node with `ahead` requests for its
        replica before it that had no first token yet and that it cannot pass (module
        docstring)."""
        self._ahead[request_id] = (max(0, ahead), priority)

    def dispatched(self, replica_id: str, request_id: str) -> None:
        """The request entered the replica's engine (as the class it arrived as)."""
        priority = self._ahead.get(request_id, (0, 0))[1]
        self._waiting.setdefault(replica_id, {})[request_id] = priority

    def first_token(
        self, replica_id: str, request_id: str, waited_s: float, own_s: float, now: float
    ) -> None:
        """The request's first token at `now`, `waited_s` after it reached the node; `own_s`
        is its own prefill's price (module docstring)."""
        self._waiting.get(replica_id, {}).pop(request_id, None)
        ahead, priority = self._ahead.pop(request_id, (0, 0))
        self.delays.add(replica_id, (waited_s - own_s) / (ahead + 1), now, priority)

    def released(self, replica_id: str, request_id: str) -> None:
        """The request left its engine (finished, failed or cancelled), token or not."""
        self._waiting.get(replica_id, {}).pop(request_id, None)
        self._ahead.pop(request_id, None)

    def left(self, request_id: str) -> None:
        """The request left the node's queue without reaching an engine."""
        self._ahead.pop(request_id, None)

    def delay_s(self, replica_id: str, now: float, queued: int, priority: int = 0) -> float:
        """The delay a request of class `priority` arriving now would see on the replica, by
        its class's recent per-place delay, behind the `queued` requests the node's queue holds
        for it that it cannot pass and those of its class or above its engine holds without a
        first token; 0 when there are none."""
        ahead = queued + self.waiting(replica_id, priority)
        if ahead == 0:
            return 0.0
        return self.delays.delay_s(replica_id, now, priority) * (ahead + 1)

    def class_delays(
        self, replica_id: str, now: float, queued: Callable[[int], int]
    ) -> ClassDelays:
        """delay_s for each class with samples on the replica, `queued(priority)` being what
        the node's queue holds for it that a request of that class cannot pass. A class with
        samples is reported even at 0, so that the scheduler reads 0 for it and not the delay
        of a class below (`class_delay_s`)."""
        return tuple(
            (p, self.delay_s(replica_id, now, queued(p), p))
            for p in self.delays.priorities(replica_id, now)
        )

    def forget(self, replica_ids: set[str]) -> None:
        self.delays.forget(replica_ids)
        for rid in [r for r in self._waiting if r not in replica_ids]:
            del self._waiting[rid]
