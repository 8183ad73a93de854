"""The Mooncake synthetic trace scaled to a small model on a CPU, and what an infinite prefix cache
could make of it. Pure: no torch, no I/O beyond the trace reader.

    trace                                   scaled
    hash id h (512 tokens)            ->    tokens_per_hash token ids drawn from a generator
                                            seeded with (seed, h): equal ids, equal tokens
    input_length L, hash_ids h0..hn   ->    ceil(L * tokens_per_hash / 512) tokens (the last
                                            block cut proportionally), at most max_hash_blocks
                                            hash blocks: a long prompt keeps its leading blocks,
                                            which is where the sharing is
    output_length O                   ->    min(O, max_output)
    timestamp t (ms)                  ->    (t - t_first) compressed so the window's mean rate is
                                            `rate` requests/s ((n - 1) gaps over the new span)

A trace line whose input_length runs past its hash blocks gets unique tokens for the rest (seeded
with (seed, window index)); the Mooncake synthetic trace has none.

Cache figures use the engine's own block identity (strata.kvtier.hashing.chain_hashes over the
synthesized token ids, block_size tokens a block) and the engine's lookup rule
(strata.engine.scheduler: a request looks up the full blocks of its prompt minus the last token,
whose logits it needs, and stops at the first miss):

    prompt blocks     sum over requests of floor((prompt_len - 1) / block_size)
    bound             of those, the blocks an infinite cache holding every earlier request's full
                      prompt blocks would serve. Generated tokens never count.
    working set       distinct full blocks a run commits: the prompts' distinct full blocks plus,
                      per request, the full blocks that hold generated tokens (the engine computes
                      prompt_len + max_tokens - 1 tokens of KV: the last token is never fed back)
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from strata.eval.traces import MOONCAKE_BLOCK_TOKENS, TraceRequest
from strata.kvtier.hashing import HashKeys, chain_hashes

# Ids below 1000 hold SmolLM2's special and byte tokens; prompts made of ordinary word pieces keep
# the model's activations in their usual range.
TOKEN_LOW = 1000


@dataclass(slots=True, frozen=True)
class Scaling:
    tokens_per_hash: int = 16
    max_hash_blocks: int = 32
    max_output: int = 16
    rate: float | None = 2.0  # mean requests/s after compression; None = trace times
    vocab_size: int = 49152
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("tokens_per_hash", "max_hash_blocks", "max_output"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.rate is not None and not (self.rate > 0 and math.isfinite(self.rate)):
            raise ValueError(f"rate must be a positive number of requests/s, got {self.rate}")
        if self.vocab_size <= TOKEN_LOW:
            raise ValueError(f"vocab_size must exceed {TOKEN_LOW}, got {self.vocab_size}")

    @property
    def max_prompt(self) -> int:
        return self.tokens_per_hash * self.max_hash_blocks


@dataclass(slots=True, frozen=True)
class ScaledRequest:
    index: int  # position in the window
    arrival_s: float  # from the window's first request
    prompt_ids: tuple[int, ...]
    max_tokens: int
    hash_ids: tuple[int, ...]  # the trace's hash ids the prompt covers (some cut short)


def select_window(
    requests: Sequence[TraceRequest], count: int, start: int | None
) -> list[TraceRequest]:
    """`count` consecutive requests from `start`; start None = the trace's last `count`."""
    if count < 1:
        raise ValueError(f"the window needs at least 1 request, got {count}")
    if start is None:
        start = max(0, len(requests) - count)
    if not 0 <= start < len(requests):
        raise ValueError(f"window start {start} is outside the trace's {len(requests)} requests")
    return list(requests[start : start + count])


def scale(requests: Sequence[TraceRequest], scaling: Scaling) -> list[ScaledRequest]:
    """The window `requests` (in arrival order) as token-id requests for the engine."""
    if not requests:
        return []
    blocks: dict[int, list[int]] = {}
    t0 = requests[0].arrival_s
    span = requests[-1].arrival_s - t0
    factor = 1.0
    if scaling.rate is not None and len(requests) > 1 and span > 0:
        factor = (len(requests) - 1) / scaling.rate / span
    out = []
    for index, req in enumerate(requests):
        length = min(
            scaling.max_prompt,
            max(1, math.ceil(req.prompt_tokens * scaling.tokens_per_hash / MOONCAKE_BLOCK_TOKENS)),
        )
        ids: list[int] = []
        covered = []
        for h in req.hash_ids:
            if len(ids) >= length:
                break
            if h not in blocks:
                blocks[h] = _draw(scaling, f"block:{h}", scaling.tokens_per_hash)
            ids.extend(blocks[h][: length - len(ids)])
            covered.append(h)
        if len(ids) < length:
            ids.extend(_draw(scaling, f"request:{index}", length - len(ids)))
        out.append(
            ScaledRequest(
                index=index,
                arrival_s=(req.arrival_s - t0) * factor,
                prompt_ids=tuple(ids),
                max_tokens=min(req.output_tokens, scaling.max_output),
                hash_ids=tuple(covered),
            )
        )
    return out


def _draw(scaling: Scaling, key: str, count: int) -> list[int]:
    # random.Random seeds a str through SHA-512: the same tokens on every run and platform.
    rng = random.Random(f"{scaling.seed}:{key}")
    return [rng.randrange(TOKEN_LOW, scaling.vocab_size) for _ in range(count)]


@dataclass(slots=True, frozen=True)
class CacheFigures:
    prompt_blocks: int  # blocks the engine looks up (prompt minus its last token)
    bound_blocks: int  # of them, what an infinite cache would serve
    distinct_prompt_blocks: int  # distinct full prompt blocks (the shared ones once)
    generated_blocks: int  # full blocks holding generated tokens, all requests
    max_request_blocks: int  # blocks the largest request occupies at its end

    @property
    def bound(self) -> float:
        """The infinite-cache block-hit ratio (0 when no prompt fills a block)."""
        return self.bound_blocks / self.prompt_blocks if self.prompt_blocks else 0.0

    @property
    def working_set_blocks(self) -> int:
        return self.distinct_prompt_blocks + self.generated_blocks


# One tenant for the whole trace: the bound is about what the trace shares, not about tenancy.
_KEYS = HashKeys(model="bench", tenant_salt="t:bench")


def cache_figures(requests: Sequence[ScaledRequest], block_size: int) -> CacheFigures:
    """Prompt blocks, infinite-cache bound and working set of `requests` in arrival order."""
    if block_size < 1:
        raise ValueError(f"block_size must be at least 1, got {block_size}")
    seen: set[int] = set()
    prompt_blocks = bound_blocks = generated = largest = 0
    for req in requests:
        ids = req.prompt_ids
        wanted = chain_hashes(ids[: len(ids) - 1], block_size, _KEYS)
        prompt_blocks += len(wanted)
        for h in wanted:
            if h not in seen:
                break
            bound_blocks += 1
        full = chain_hashes(ids, block_size, _KEYS)
        seen.update(full)
        computed = len(ids) + req.max_tokens - 1
        generated += computed // block_size - len(full)
        largest = max(largest, -(-(len(ids) + req.max_tokens) // block_size))
    return CacheFigures(
        prompt_blocks=prompt_blocks,
        bound_blocks=bound_blocks,
        distinct_prompt_blocks=len(seen),
        generated_blocks=generated,
        max_request_blocks=largest,
    )
