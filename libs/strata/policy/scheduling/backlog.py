"""The prompt tokens still queued on a replica now, from its last report and what was routed
to it since.

A node reports its replicas' queued prompt tokens with every heartbeat (about a second apart);
the scheduler counts what it routed there since (strata.policy.scheduling.ledger). Both are
stale by the time a request is judged: the engine keeps prefilling between reports. Taken as
they stand, every token reported and every prompt routed since would still be ahead of the
next request, even those whose first token went out most of a second ago.

The replica is a fluid queue: from the report on it works its queue off at its prefill rate
while the queue holds anything, and each routed prompt joins the queue when it was routed
(no earlier than the report: one routed before it and not in it was still on its way):

    left = queued at the report
    for each routed prompt, in order:  left = max(0, left - rate x (at - t)) + tokens;  t = at
    now:                               left = max(0, left - rate x (now - t))

A report that is fresh, or a rate not measured yet, leaves the sum as it stands. Pure: no
clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable


def backlog_tokens(
    queued: int,
    reported_at: float,
    routed: Iterable[tuple[float, int]],
    rate: float,
    now: float,
) -> float:
    """Prompt tokens still queued at `now` on a replica that reported `queued` at
    `reported_at` and was routed `routed` (when, prompt tokens to compute) since, working them
    off at `rate` tokens per second (module docstring). Never more than queued + every routed
    prompt, never less than 0; that sum itself where rate <= 0."""
    arrivals = sorted((max(at, reported_at), tokens) for at, tokens in routed)
    if rate <= 0:
        return float(queued + sum(tokens for _, tokens in arrivals))
    left, t = float(queued), reported_at
    for at, tokens in arrivals:
        left = max(0.0, left - rate * (at - t)) + tokens
        t = at
    return max(0.0, left - rate * max(0.0, now - t))
