"""Which routing decisions have reached their node: what lets a scheduler stop counting a
request it routed exactly when the node's reports start to.

A scheduler counts each request it routes against the chosen replica (its slots, the work
queued ahead of it) and the tenant (strata.policy.scheduling.ledger) until the node reports
it. A heartbeat is a snapshot: one taken before a routed request reaches the node (the gateway
forwards it after the route, a burst keeps the gateway busy, and the heartbeat travels while
routes go on) does not include it. So the scheduler stops counting a route only when a report
names it: each Route answer carries a route id, the gateway passes it on with the request,
and the node lists the ids it received within the last `window_s` in every heartbeat, taken
in the same pass as the rest of the report (a listed request is in the report's queues, its
slots, or already done). The window spans several heartbeats, so one lost report loses
nothing; a route that never reaches its node (the caller went away first) stops counting
after the ledger's own time limit.

Pure: the node manager and the simulator's node keep one each, with the clock injected.
"""

from __future__ import annotations

from collections import deque

ARRIVALS_WINDOW_S = 10.0  # how long a received route id stays in the node's heartbeats
MAX_ARRIVALS = 8192  # at most this many listed at once (the heartbeat's size stays bounded)
MAX_ROUTE_ID_CHARS = 64  # a longer route id is not one a scheduler minted


class RouteArrivals:
    """The route ids a node received lately, oldest first. Invariant: every listed id was
    received at most `window_s` before the latest call to `recent`."""

    def __init__(self, window_s: float = ARRIVALS_WINDOW_S, limit: int = MAX_ARRIVALS) -> None:
        if not window_s > 0 or limit < 1:
            raise ValueError(
                f"window_s must be positive and limit at least 1, got {window_s} and {limit}"
            )
        self.window_s = window_s
        self._ids: deque[tuple[float, str]] = deque(maxlen=limit)

    def received(self, route_id: str, now: float) -> None:
        """A request routed as `route_id` reached the node at `now` (an empty id, a request
        no scheduler routed, is not recorded)."""
        if route_id:
            self._ids.append((now, route_id))

    def recent(self, now: float) -> tuple[str, ...]:
        """The ids received within `window_s` before `now`, oldest first."""
        while self._ids and now - self._ids[0][0] > self.window_s:
            self._ids.popleft()
        return tuple(rid for _, rid in self._ids)
