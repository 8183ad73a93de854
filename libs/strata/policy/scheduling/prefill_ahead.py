"""The prompt tokens a new request waits behind on a replica, by class.

An engine serves prefill by class (strata.engine.scheduler): a request of priority p waits for
the queued tokens of its class and above, and of the lower classes only for the step under way
(at most one step's token budget, `chunk`). A replica reports its queued tokens by class; one
that does not (an older worker) reports them all as ahead of every class.

    ahead(p) = sum(tokens of classes >= p) + min(sum(tokens of classes < p), chunk)

Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

ClassTokens = tuple[tuple[int, int], ...]  # (priority, tokens), ascending by priority


def class_tokens(by_class: Mapping[int, int] | Iterable[tuple[int, int]]) -> ClassTokens:
    """The canonical form: ascending by priority, classes with no tokens (or a negative count,
    from a malformed report) left out."""
    items = by_class.items() if isinstance(by_class, Mapping) else by_class
    merged: dict[int, int] = {}
    for p, n in items:
        if n > 0:
            merged[p] = merged.get(p, 0) + n
    return tuple(sorted(merged.items()))


def tokens_ahead(by_class: ClassTokens, priority: int, chunk: int) -> int:
    """The tokens of `by_class` a request of `priority` waits behind: those of its class and
    above, and of the lower classes at most `chunk` (the step under way; 0 or less: no cap)."""
    above = below = 0
    for p, n in by_class:
        if p >= priority:
            above += n
        else:
            below += n
    return above + (min(below, chunk) if chunk > 0 else below)
