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
so it carries over to the next request of any size. The node reports, per replica, the
DELAY_QUANTILE of the last DELAY_WINDOW delays no older than DELAY_MAX_AGE_S; the scheduler's
TTFT check then takes the larger of its own estimate and this delay plus the request's own
prefill (a request is not admitted where the ones before it just waited longer than its class
allows).

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
    """A node's requests between dispatch and first token, per replica, and the delays of those
    that got theirs (RecentDelays). The delay a replica reports is 0 while no request waits for
    a first token there (none dispatched without one, none queued for it): the queue the delays
    measured has drained, and the scheduler's own estimate sees that."""

    def __init__(self, delays: RecentDelays | None = None) -> None:
        self.delays = delays if delays is not None else RecentDelays()
        self._waiting: dict[str, set[str]] = {}  # replica id -> request ids without a token

    def dispatched(self, replica_id: str, request_id: str) -> None:
        self._waiting.setdefault(replica_id, set()).add(request_id)

    def first_token(
        self, replica_id: str, request_id: str, waited_s: float, own_s: float, now: float
    ) -> None:
        """The request's first token at `now`, `waited_s` after it reached the node; `own_s`
        is its own prefill's price (module docstring)."""
        self._waiting.get(replica_id, set()).discard(request_id)
        self.delays.add(replica_id, waited_s - own_s, now)

    def released(self, replica_id: str, request_id: str) -> None:
        """The request left its engine (finished, failed or cancelled), token or not."""
        self._waiting.get(replica_id, set()).discard(request_id)

    def delay_s(self, replica_id: str, now: float, queued: bool) -> float:
        """The replica's recent delay, or 0 when nothing waits for a first token there
        (`queued`: the node's queue holds a request for it)."""
        if not (queued or self._waiting.get(replica_id)):
            return 0.0
        return self.delays.delay_s(replica_id, now)

    def forget(self, replica_ids: set[str]) -> None:
        self.delays.forget(replica_ids)
        for rid in [r for r in self._waiting if r not in replica_ids]:
            del self._waiting[rid]
