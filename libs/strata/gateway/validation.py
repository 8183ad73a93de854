"""Validation of public Generate requests: each failure is a sentence the caller can act on."""

from __future__ import annotations

import math
from dataclasses import dataclass

from strata.engine.sequence import GREEDY_EPS
from strata.v1 import common_pb2

MAX_TOKENS_LIMIT = 32768
MAX_STOP_STRINGS = 8
MAX_STOP_CHARS = 1000  # per stop string
MAX_STOP_TOKEN_IDS = 64
MAX_PROMPT_CHARS = 1_000_000  # prompt, or all messages' contents together
MAX_MESSAGES = 4096
MAX_MODEL_CHARS = 256
MAX_LOGPROBS = 20


def max_request_bytes() -> int:
    """The largest valid GenerateRequest on the wire, with room to spare: the gateway's receive
    limit, so that a body far past anything valid is refused before it is parsed."""
    utf8 = 4  # bytes per character at most
    per_message = 4 + 2 + 9 + 4  # tags and lengths, the longest role
    return (
        utf8 * (MAX_PROMPT_CHARS + MAX_MODEL_CHARS + MAX_STOP_STRINGS * MAX_STOP_CHARS)
        + MAX_MESSAGES * per_message
        + MAX_STOP_TOKEN_IDS * 6
        + MAX_PROMPT_CHARS // 4 * 6
        + 16 * 1024
    )


@dataclass(slots=True)
class GenerateParams:
    model: str
    prompt: str
    messages: list[tuple[str, str]]
    max_tokens: int
    temperature: float
    top_p: float
    top_k: int
    repetition_penalty: float
    stop: list[str]
    min_p: float = 0.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    logprobs: int = 0
    stop_token_ids: tuple[int, ...] = ()
    seed: int | None = None
    ignore_eos: bool = False
    prefix_public: bool = False  # share the prompt's cached prefix with other tenants
    sparse: common_pb2.SparseMode = common_pb2.SPARSE_MODE_DEFAULT  # default: the worker's
    prompt_token_ids: tuple[int, ...] = ()  # the prompt as token ids, instead of text


def validate(p: GenerateParams) -> str | None:
    """None when the request is acceptable, else what is wrong and how to fix it."""
    if not p.model:
        return "model is required; call ListModels to see what this deployment serves"
    if len(p.model) > MAX_MODEL_CHARS:
        return f"model names are at most {MAX_MODEL_CHARS} characters, got {len(p.model)}"
    if sum(1 for given in (p.prompt, p.messages, p.prompt_token_ids) if given) != 1:
        return "give exactly one of prompt, messages or prompt token ids"
    if len(p.prompt_token_ids) > MAX_PROMPT_CHARS // 4:
        return f"at most {MAX_PROMPT_CHARS // 4} prompt token ids, got {len(p.prompt_token_ids)}"
    if any(t < 0 for t in p.prompt_token_ids):
        return "prompt token ids must not be negative"
    if len(p.messages) > MAX_MESSAGES:
        return f"at most {MAX_MESSAGES} messages, got {len(p.messages)}"
    size = len(p.prompt) + sum(len(c) for _, c in p.messages)
    if size > MAX_PROMPT_CHARS:
        return f"the prompt is {size} characters; at most {MAX_PROMPT_CHARS} are accepted"
    for i, (role, content) in enumerate(p.messages):
        if role not in ("system", "user", "assistant", "tool"):
            return f"messages[{i}].role must be system, user, assistant or tool, got {role!r}"
        if not content:
            return f"messages[{i}].content is empty"
    if not 1 <= p.max_tokens <= MAX_TOKENS_LIMIT:
        return f"max_tokens must be between 1 and {MAX_TOKENS_LIMIT}, got {p.max_tokens}"
    if not 0 <= p.temperature <= 2:
        return f"temperature must be between 0 and 2, got {p.temperature:g}"
    if 0 < p.temperature < GREEDY_EPS:
        return (
            f"temperature must be 0 (greedy) or at least {GREEDY_EPS:g}, got "
            f"{p.temperature:g}; a smaller one samples the most likely token anyway"
        )
    if not 0 <= p.top_p <= 1:
        return f"top_p must be between 0 and 1 (0 means disabled), got {p.top_p:g}"
    if p.top_k < 0:
        return f"top_k must be 0 (disabled) or positive, got {p.top_k}"
    if not (p.repetition_penalty >= 0 and math.isfinite(p.repetition_penalty)):
        return (
            f"repetition_penalty must be positive (0 or 1 disables it), got "
            f"{p.repetition_penalty:g}"
        )
    if not 0 <= p.min_p <= 1:
        return f"min_p must be between 0 and 1 (0 means disabled), got {p.min_p:g}"
    for name in ("frequency_penalty", "presence_penalty"):
        value = getattr(p, name)
        if not -2 <= value <= 2:
            return f"{name} must be between -2 and 2, got {value:g}"
    if not 0 <= p.logprobs <= MAX_LOGPROBS:
        return f"logprobs must be between 0 and {MAX_LOGPROBS}, got {p.logprobs}"
    if len(p.stop) > MAX_STOP_STRINGS:
        return f"at most {MAX_STOP_STRINGS} stop strings, got {len(p.stop)}"
    if any(not s for s in p.stop):
        return "stop strings must not be empty"
    if any(len(s) > MAX_STOP_CHARS for s in p.stop):
        return f"stop strings are at most {MAX_STOP_CHARS} characters each"
    if len(p.stop_token_ids) > MAX_STOP_TOKEN_IDS:
        return f"at most {MAX_STOP_TOKEN_IDS} stop_token_ids, got {len(p.stop_token_ids)}"
    if any(t < 0 for t in p.stop_token_ids):
        return "stop_token_ids must not be negative"
    return None
