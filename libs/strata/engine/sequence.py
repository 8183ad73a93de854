"""A request inside the engine: its tokens, its blocks, how far its KV is computed."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from strata.kvtier.hashing import HashKeys

# Temperatures below this sample greedily (as in vLLM): the distribution is one-hot at float
# precision anyway, and dividing logits by it overflows.
GREEDY_EPS = 1e-5


@dataclass(slots=True, frozen=True)
class SamplingParams:
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    repetition_penalty: float = 1.0
    min_p: float = 0.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    logprobs: int = 0  # top-n logprobs to return with each token (0 = none)
    max_tokens: int = 16
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False

    @property
    def is_plain_greedy(self) -> bool:
        """Greedy with nothing that needs per-row work: the batched argmax fast path."""
        return (
            self.temperature < GREEDY_EPS
            and self.repetition_penalty in (0.0, 1.0)
            and not self.frequency_penalty
            and not self.presence_penalty
            and not self.logprobs
        )


class Status(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


class FinishReason(enum.Enum):
    STOP = "stop"
    LENGTH = "length"
    ABORTED = "aborted"


@dataclass(slots=True)
class Sequence:
    request_id: str
    token_ids: list[int]  # prompt followed by generated tokens
    num_prompt: int
    params: SamplingParams
    hash_keys: HashKeys
    priority: int = 0
    arrival: float = 0.0
    first_scheduled: float | None = None  # when a step first computed any of its tokens
    first_token_at: float | None = None  # when its first output token was sampled, here
    block_ids: list[int] = field(default_factory=list)
    block_hashes: list[int] = field(default_factory=list)  # of the leading full, computed blocks
    num_computed: int = 0  # tokens whose K/V are in the cache
    num_cached_prompt: int = 0  # prompt tokens served from the device prefix cache
    num_tier_prompt: int = 0  # prompt tokens loaded back from the KV tier store
    status: Status = Status.WAITING
    finish_reason: FinishReason | None = None
    num_preemptions: int = 0
    num_resumed: int = 0  # trailing prompt tokens another worker streamed (failover)
    tpot_ms: float | None = None  # its class's TPOT target (None: not judged)

    @property
    def num_output(self) -> int:
        return len(self.token_ids) - self.num_prompt

    @property
    def output_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt :]

    @property
    def num_pending(self) -> int:
        """Tokens whose K/V still have to be computed before the next token can be sampled."""
        return len(self.token_ids) - self.num_computed

    def sort_key(self) -> tuple[int, float]:
        """Scheduling order: higher priority first, then earlier arrival."""
        return (-self.priority, self.arrival)
