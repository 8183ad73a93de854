"""What the benchmark sends: the offline prompts, and online requests sized from a real trace.

Offline prompts are random lowercase ASCII byte ids, so the same ids are also valid text for the
byte tokenizer of the dummy models (one character = one token) and can go through the worker's
text-only gRPC API unchanged.

Online sizes come from the Azure conversation trace, scaled to fit the benchmark model:

    prompt = clip(ceil(ContextTokens / divisor), 1, max_prompt)
    output = clip(ceil(GeneratedTokens / divisor), 1, max_output)

One divisor for both keeps the trace's prompt:output ratio; the clips keep prompt + output
inside the model's context. Arrivals are an open-loop Poisson process drawn here, not the trace's
timestamps, so the offered rate is what the sweep says it is.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from strata.eval.trace_lengths import RequestLengths

PROMPT_ALPHABET = range(ord("a"), ord("z") + 1)


def offline_prompts(count: int, length: int, seed: int) -> list[list[int]]:
    """`count` prompts of `length` token ids each, the same for the same seed."""
    rng = random.Random(seed)
    return [[rng.choice(PROMPT_ALPHABET) for _ in range(length)] for _ in range(count)]


@dataclass(slots=True)
class PromptSet:
    """The offline prompts of every system. The three groups are separate random draws, so no
    run can reuse another's KV from a prefix cache (ours and vLLM's both have one)."""

    warmup: list[list[int]]
    batch: list[list[int]]
    single: list[int]

    @classmethod
    def draw(
        cls, count: int, length: int, seed: int, warmup_count: int = 4, warmup_length: int = 16
    ) -> PromptSet:
        prompts = offline_prompts(count + 1 + warmup_count, length, seed)
        return cls(
            warmup=[p[:warmup_length] for p in prompts[count + 1 :]],
            batch=prompts[:count],
            single=prompts[count],
        )


def prompt_text(length: int, rng: random.Random) -> str:
    """A random lowercase text of `length` characters: `length` tokens for a byte tokenizer."""
    return "".join(chr(rng.choice(PROMPT_ALPHABET)) for _ in range(length))


@dataclass(slots=True, frozen=True)
class LengthMapping:
    divisor: int = 4
    max_prompt: int = 1024
    max_output: int = 256

    def __post_init__(self) -> None:
        for name in ("divisor", "max_prompt", "max_output"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")

    def apply(self, trace: RequestLengths) -> RequestLengths:
        return RequestLengths(
            _scale(trace.prompt_tokens, self.divisor, self.max_prompt),
            _scale(trace.output_tokens, self.divisor, self.max_output),
        )

    def describe(self) -> str:
        return (
            f"prompt = clip(ceil(ContextTokens / {self.divisor}), 1, {self.max_prompt}), "
            f"output = clip(ceil(GeneratedTokens / {self.divisor}), 1, {self.max_output})"
        )


def _scale(tokens: int, divisor: int, cap: int) -> int:
    return min(cap, max(1, -(-tokens // divisor)))


def poisson_offsets(
    rate: float, max_requests: int, max_seconds: float, rng: random.Random
) -> list[float]:
    """Send times (seconds from the start) of an open-loop Poisson process at `rate` req/s,
    stopping at `max_requests` or at the first arrival past `max_seconds`."""
    if rate <= 0:
        raise ValueError(f"rate must be positive, got {rate}")
    offsets: list[float] = []
    t = 0.0
    while len(offsets) < max_requests:
        t += rng.expovariate(rate)
        if t > max_seconds:
            break
        offsets.append(t)
    return offsets


def pick_lengths(
    pool: list[RequestLengths], count: int, rng: random.Random
) -> list[RequestLengths]:
    """`count` request sizes drawn uniformly (with replacement) from `pool`."""
    if not pool:
        raise ValueError("the length pool is empty: the trace has no rows")
    return [pool[rng.randrange(len(pool))] for _ in range(count)]
