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

with `ahead` the requests for the same replica that had no first token yet (queued at the node
or in the engine) when it arrived, and a replica's reported delay is that per-place figure (the
DELAY_QUANTILE of the last DELAY_WINDOW no older than DELAY_MAX_AGE_S) times the places a
request arriving now would take: the requests waiting for a first token there, plus one. The
scheduler's TTFT check then takes the larger of its own estimate and this delay plus the
request's own prefill (a request is not admitted where the ones before it, in a queue as long
as the one it joins, waited longer than its class allows).

Pure: the node manager's dispatcher and the simulator's node front keep one each, with the
clock injected.
"""

from __future__ import annotations

from collections import deque

DELAY_WINDOW = 32  # the latest first tokens a replica's delay is taken over
DELAY_QUANTILE = 0.9
DELAY_MAX_AGE_S = 20.0  # older first tokens say nothing about the replica's queue now


class RecentDelays:
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
        self._samples: dict[str, deque[tuple[float, float]]] = {}  # replica -> (when, delay)

    def add(self, replica_id: str, delay_s: float, now: float) -> None:
        """A first token on `replica_id` at `now`, `delay_s` past the request's own prefill
        (clamped at 0: a prefill faster than its price waited nothing)."""
        samples = self._samples.get(replica_id)
        if samples is None:
            samples = self._samples[replica_id] = deque(maxlen=self.window)
        samples.append((now, max(0.0, delay_s)))

    def delay_s(self, replica_id: str, now: float) -> float:
        """The quantile (nearest rank) of the replica's recent delays; 0 when it has none."""
        samples = self._samples.get(replica_id)
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
    arrived, which ones its engines hold without a first token, per replica, and the per-place
    delays of those that got theirs (RecentDelays). The delay a replica reports is 0 while no
    request waits for a first token there (none dispatched without one, none queued for it):
    the queue the delays measured has drained, and the scheduler's own estimate sees that.

    Invariant: `_ahead` holds exactly the requests that arrived and have neither had a first
    token nor left."""

    def __init__(self, delays: RecentDelays | None = None) -> None:
        self.delays = delays if delays is not None else RecentDelays()
        self._waiting: dict[str, set[str]] = {}  # replica id -> request ids without a token
        self._ahead: dict[str, int] = {}  # request id -> requests ahead of it on arrival

    def waiting(self, replica_id: str) -> int:
        """Requests the replica's engine holds without a first token."""
        return len(self._waiting.get(replica_id, ()))

    def arrived(self, request_id: str, ahead: int) -> None:
        """The request reached the node with `ahead` requests for its replica before it that
        had no first token yet (queued or in the engine)."""
        self._ahead[request_id] = max(0, ahead)

    def dispatched(self, replica_id: str, request_id: str) -> None:
        self._waiting.setdefault(replica_id, set()).add(request_id)

    def first_token(
        self, replica_id: str, request_id: str, waited_s: float, own_s: float, now: float
    ) -> None:
        """The request's first token at `now`, `waited_s` after it reached the node; `own_s`
        is its own prefill's price (module docstring)."""
        self._waiting.get(replica_id, set()).discard(request_id)
        places = self._ahead.pop(request_id, 0) + 1
        self.delays.add(replica_id, (waited_s - own_s) / places, now)

    def released(self, replica_id: str, request_id: str) -> None:
        """The request left its engine (finished, failed or cancelled), token or not."""
        self._waiting.get(replica_id, set()).discard(request_id)
        self._ahead.pop(request_id, None)

    def left(self, request_id: str) -> None:
        """The request left the node's queue without reaching an engine."""
        self._ahead.pop(request_id, None)

    def delay_s(self, replica_id: str, now: float, queued: int) -> float:
        """The delay a request arriving now would see on the replica, by its recent per-place
        delay, behind the `queued` requests the node's queue holds for it and those its engine
        holds without a first token; 0 when there are none."""
        ahead = queued + self.waiting(replica_id)
        if ahead == 0:
            return 0.0
        return self.delays.delay_s(replica_id, now) * (ahead + 1)

    def forget(self, replica_ids: set[str]) -> None:
        self.delays.forget(replica_ids)
        for rid in [r for r in self._waiting if r not in replica_ids]:
            del self._waiting[rid]
