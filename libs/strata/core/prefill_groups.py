"""Which of a step's prefill chunks are attended together: one definition for the engine, which
runs each group as one padded attention call, and the step-cost model, which prices the padded
work (strata.core.profile.step_shape).

A group of S chunks is attended as one rectangle: every chunk padded to the group's longest
chunk (Q queries) and widest context (K keys, in whole blocks), S x Q x K query-key pairs, most
of them masked when the chunks differ in size. One chunk of 512 tokens beside three of 32-128
costs four 512 x 512 squares that way, about 2.6x its parts, measured (docs/design/engine.md).
A group also has a fixed cost, its own calls per layer (the keys' gather, the attention kernel,
the scatter of its rows), here counted as GROUP_OVERHEAD_KEYS pairs.

So chunks are taken widest context first, and each joins the group being built when the
group's rectangle with it costs no more than the group's without it, its own rectangle and one
group's overhead; else it starts the next group. Small chunks of similar size share one call;
a short chunk never pads to a long one's square.

Invariant: every chunk is in exactly one group; groups and their members come out in a fixed
order for the same input (ties by position).
"""

from __future__ import annotations

from collections.abc import Sequence

GROUP_OVERHEAD_KEYS = 4096  # query-key pairs one more group's fixed cost is worth


def padded(count: int, longest: int, widest: int, block_size: int) -> int:
    """Query-key pairs of `count` chunks padded into one group: count x the longest chunk's
    tokens x the widest context (computed + new tokens) in whole blocks."""
    return count * longest * (-(-widest // block_size) * block_size)


def rectangle(chunks: Sequence[tuple[int, int]], block_size: int) -> int:
    """Query-key pairs of `chunks` ((new tokens, context after the step) each) attended as one
    padded group."""
    if not chunks:
        return 0
    longest = max(new for new, _ in chunks)
    widest = max(context for _, context in chunks)
    return padded(len(chunks), longest, widest, block_size)


def prefill_groups(chunks: Sequence[tuple[int, int]], block_size: int) -> list[list[int]]:
    """The step's prefill chunks, (new tokens, context after the step) each, as groups of their
    indices (module docstring). One pass after the sort: the group being built is kept as its
    count, longest chunk and widest context."""
    order = sorted(range(len(chunks)), key=lambda i: (-chunks[i][1], -chunks[i][0], i))
    groups: list[list[int]] = []
    count = longest = widest = 0
    for i in order:
        new, context = chunks[i]
        if count:
            cost = padded(count, longest, widest, block_size)
            joined = padded(count + 1, max(longest, new), max(widest, context), block_size)
            apart = cost + padded(1, new, context, block_size)
            if joined <= apart + GROUP_OVERHEAD_KEYS:
                groups[-1].append(i)
                count, longest, widest = count + 1, max(longest, new), max(widest, context)
                continue
        groups.append([i])
        count, longest, widest = 1, new, context
    return groups


def padded_keys(chunks: Sequence[tuple[int, int]], block_size: int) -> tuple[float, int]:
    """(query-key pairs of every group's rectangle, summed; the number of groups)."""
    groups = prefill_groups(chunks, block_size)
    total = sum(rectangle([chunks[i] for i in g], block_size) for g in groups)
    return float(total), len(groups)
