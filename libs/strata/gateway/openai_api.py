"""The OpenAI HTTP API's wire format, mapped onto the gateway's pipeline (strata.gateway.pipeline):
request bodies parsed and turned into GenerateParams, chunks turned into OpenAI's chunk and
response objects, PipelineErrors into OpenAI's error object and HTTP status.

Contract (what the `openai` SDK and vLLM's users rely on):

- Unknown fields are ignored, as OpenAI does; a field of the wrong type or out of range is a 400
  `invalid_request_error` naming the field (`param`).
- temperature defaults to 1.0 (OpenAI's default) and means what Strata's sampler means by it (0:
  greedy); top_p 1.0, top_k 0 or -1, min_p 0 and repetition_penalty 1.0 disable their filter.
- max_tokens (chat: max_completion_tokens, else max_tokens) defaults to 16 for completions (as
  OpenAI's legacy endpoint) and for chat to what the model's context leaves after the prompt.
- logprobs: chat `logprobs: true` with `top_logprobs` N (0-20); completions `logprobs` N (0-5).
- Status codes: 400 invalid request, 401 missing or bad key, 403 a class the key may not use,
  404 unknown model, 429 (with Retry-After) over the tenant's rate or burst share, 503 (with
  Retry-After) when no replica can meet the class's target or none is ready, 504 past the
  deadline, 500 otherwise.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import grpc
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from strata.gateway.pipeline import PipelineError
from strata.gateway.validation import MAX_TOKENS_LIMIT, GenerateParams
from strata.v1 import common_pb2

MAX_CHOICES = 16  # n at most
COMPLETION_DEFAULT_MAX_TOKENS = 16  # OpenAI's legacy completions default
CHAT_FALLBACK_MAX_TOKENS = 1024  # chat, when the model's context length is not known
MAX_COMPLETION_LOGPROBS = 5
MAX_TOP_LOGPROBS = 20

FINISH = {
    common_pb2.FINISH_REASON_STOP: "stop",
    common_pb2.FINISH_REASON_LENGTH: "length",
    common_pb2.FINISH_REASON_ABORTED: "abort",
    common_pb2.FINISH_REASON_ERROR: "error",
}


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")


class ContentPart(_Body):
    type: str
    text: str | None = None


class Message(_Body):
    role: str
    content: str | list[ContentPart] | None = None


class StreamOptions(_Body):
    include_usage: bool = False


class _Sampling(_Body):
    model: str = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, ge=0.0, le=1.0)
    n: int = Field(1, ge=1, le=MAX_CHOICES)
    stop: str | list[str] | None = None
    seed: int | None = None
    presence_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    frequency_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    user: str | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    # vLLM's extras
    top_k: int | None = Field(None, ge=-1)
    min_p: float = Field(0.0, ge=0.0, le=1.0)
    repetition_penalty: float = Field(1.0, gt=0.0)
    ignore_eos: bool = False
    stop_token_ids: list[int] | None = None


class ChatRequest(_Sampling):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)


class CompletionRequest(_Sampling):
    prompt: str | list[str] | list[int] | list[list[int]]
    logprobs: int | None = Field(None, ge=0, le=MAX_COMPLETION_LOGPROBS)
    echo: bool = False
    suffix: str | None = None


class ApiError(Exception):
    """An OpenAI error object and its HTTP status (and Retry-After seconds, where one applies)."""

    def __init__(
        self,
        status: int,
        message: str,
        type_: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        retry_after_s: int | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_
        self.param = param
        self.code = code
        self.retry_after_s = retry_after_s

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


def parse(model: type[_Sampling], raw: bytes) -> Any:
    """The body as `model`; ApiError 400 naming the first field that is wrong."""
    try:
        data = json.loads(raw or b"null")
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ApiError(400, f"the request body is not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise ApiError(400, "the request body must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        param = ".".join(str(p) for p in first["loc"]) or None
        raise ApiError(400, f"{param}: {first['msg']}", param=param) from None


def message_text(i: int, m: Message) -> tuple[str, str]:
    """(role, text) of one chat message; its text parts joined; ApiError for other parts."""
    if m.role not in ("system", "user", "assistant", "developer", "tool"):
        raise ApiError(
            400,
            f"messages[{i}].role must be system, user, assistant or tool, got {m.role!r}",
            param=f"messages.{i}.role",
        )
    role = "system" if m.role == "developer" else m.role
    if m.content is None or isinstance(m.content, str):
        return role, m.content or ""
    texts = []
    for j, part in enumerate(m.content):
        if part.type != "text" or part.text is None:
            raise ApiError(
                400,
                f"messages[{i}].content[{j}] is of type {part.type!r}; this server takes "
                f"text content parts only",
                param=f"messages.{i}.content",
            )
        texts.append(part.text)
    return role, "".join(texts)


def _stops(stop: str | list[str] | None) -> list[str]:
    if stop is None:
        return []
    return [stop] if isinstance(stop, str) else list(stop)


def _common(req: _Sampling, max_tokens: int, logprobs: int) -> dict[str, Any]:
    return {
        "model": req.model,
        "max_tokens": max_tokens,
        "temperature": 1.0 if req.temperature is None else req.temperature,
        "top_p": 1.0 if req.top_p is None else req.top_p,
        "top_k": 0 if req.top_k is None or req.top_k < 0 else req.top_k,
        "repetition_penalty": req.repetition_penalty,
        "stop": _stops(req.stop),
        "min_p": req.min_p,
        "frequency_penalty": req.frequency_penalty,
        "presence_penalty": req.presence_penalty,
        "logprobs": logprobs,
        "stop_token_ids": tuple(req.stop_token_ids or ()),
        "seed": req.seed,
        "ignore_eos": req.ignore_eos,
    }


def chat_logprobs(req: ChatRequest) -> int:
    """How many top logprobs each token carries (0: none; the sampled token's own needs 1)."""
    if not req.logprobs:
        return 0
    return max(1, req.top_logprobs or 0)


def chat_params(req: ChatRequest, context_length: int | None, prompt_tokens: int) -> GenerateParams:
    """The chat request as the pipeline's parameters (`prompt_tokens` estimates the rendered
    messages, for the default max_tokens)."""
    messages = [message_text(i, m) for i, m in enumerate(req.messages)]
    max_tokens = req.max_completion_tokens or req.max_tokens
    if max_tokens is None:
        if context_length:
            max_tokens = max(1, min(MAX_TOKENS_LIMIT, context_length - prompt_tokens - 1))
        else:
            max_tokens = CHAT_FALLBACK_MAX_TOKENS
    return GenerateParams(
        prompt="", messages=messages, **_common(req, max_tokens, chat_logprobs(req))
    )


def completion_prompts(req: CompletionRequest) -> list[str | tuple[int, ...]]:
    """The request's prompts: a string, a list of strings, token ids, or lists of them."""
    p = req.prompt
    if isinstance(p, str):
        return [p]
    if not p:
        raise ApiError(400, "prompt must not be empty", param="prompt")
    out: list[str | tuple[int, ...]] = []
    ids: list[int] = []
    for x in p:
        if isinstance(x, int):
            ids.append(x)
        elif isinstance(x, str):
            out.append(x)
        else:
            out.append(tuple(x))
    if ids and out:
        raise ApiError(400, "prompt mixes token ids with other prompts", param="prompt")
    return [tuple(ids)] if ids else out


def completion_params(req: CompletionRequest, prompt: str | tuple[int, ...]) -> GenerateParams:
    if req.echo:
        raise ApiError(400, "echo is not supported by this server", param="echo")
    if req.suffix:
        raise ApiError(400, "suffix is not supported by this server", param="suffix")
    max_tokens = req.max_tokens or COMPLETION_DEFAULT_MAX_TOKENS
    common = _common(req, max_tokens, req.logprobs or 0)
    if isinstance(prompt, str):
        return GenerateParams(prompt=prompt, messages=[], **common)
    return GenerateParams(prompt="", messages=[], prompt_token_ids=prompt, **common)


def choice_seed(seed: int | None, index: int) -> int | None:
    """Choice `index` of n samples with its own seed, so that n seeded choices differ."""
    return None if seed is None else seed + index


INFEASIBLE_CODE = "sla_infeasible"
_STATUS = {
    grpc.StatusCode.INVALID_ARGUMENT: (400, "invalid_request_error", None),
    grpc.StatusCode.OUT_OF_RANGE: (400, "invalid_request_error", None),
    # The scheduler's only FAILED_PRECONDITION: the request's own prefill misses its class's
    # TTFT target even on an idle replica (shorten the prompt or ask for a lower class).
    grpc.StatusCode.FAILED_PRECONDITION: (400, "invalid_request_error", INFEASIBLE_CODE),
    grpc.StatusCode.UNAUTHENTICATED: (401, "authentication_error", "invalid_api_key"),
    grpc.StatusCode.PERMISSION_DENIED: (403, "permission_error", None),
    grpc.StatusCode.NOT_FOUND: (404, "invalid_request_error", "model_not_found"),
    grpc.StatusCode.UNAVAILABLE: (503, "server_error", "unavailable"),
    grpc.StatusCode.DEADLINE_EXCEEDED: (504, "server_error", "timeout"),
}


def api_error(err: PipelineError) -> ApiError:
    """The OpenAI error for a pipeline failure: 429 for the tenant's own limits (its rate, its
    burst share, the pool full above its guarantee), 503 when the pool cannot meet the class's
    target now (a capacity problem, not the caller's)."""
    retry = None
    if err.retry_after_ms is not None and err.retry_after_ms.isdecimal():
        retry = max(1, math.ceil(int(err.retry_after_ms) / 1000))
    if err.code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        if err.reason == "sla":
            return ApiError(503, err.message, "server_error", None, "sla_unattainable", retry)
        return ApiError(429, err.message, "rate_limit_error", None, "rate_limit_exceeded", retry)
    status, type_, code = _STATUS.get(err.code, (500, "server_error", None))
    return ApiError(status, err.message, type_, None, code, retry)


# -- responses ---------------------------------------------------------------------------------


@dataclass(slots=True)
class Choice:
    """What one choice received so far."""

    index: int
    text: list[str]
    finish_reason: str | None = None
    logprobs: list[dict[str, Any]] | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0


def usage(choices: Sequence[Choice], prompts: int = 1) -> dict[str, Any]:
    """Token counts of a request: its prompts counted once each (n choices share them)."""
    per_prompt = max(1, len(choices) // max(1, prompts))
    firsts = choices[::per_prompt]
    prompt = sum(c.prompt_tokens for c in firsts)
    completion = sum(c.completion_tokens for c in choices)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": sum(c.cached_tokens for c in firsts)},
    }


def token_logprobs(
    chunk: common_pb2.GenerationChunk, texts: list[str] | None, top: int
) -> list[dict[str, Any]]:
    """Chat's logprobs `content` entries for a chunk's tokens (`texts`: each token's text)."""
    out = []
    for i, lp in enumerate(chunk.logprobs):
        known = {t.token_id: t.text for t in lp.top}
        text = texts[i] if texts is not None and i < len(texts) else known.get(lp.token_id, "")
        out.append(
            {
                "token": text,
                "logprob": lp.logprob,
                "bytes": list(text.encode()),
                "top_logprobs": [
                    {"token": t.text, "logprob": t.logprob, "bytes": list(t.text.encode())}
                    for t in lp.top[:top]
                ],
            }
        )
    return out


def completion_logprobs(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """The legacy completions `logprobs` object from chat-style entries."""
    offsets, at = [], 0
    for e in entries:
        offsets.append(at)
        at += len(e["token"])
    return {
        "tokens": [e["token"] for e in entries],
        "token_logprobs": [e["logprob"] for e in entries],
        "top_logprobs": [{t["token"]: t["logprob"] for t in e["top_logprobs"]} for e in entries],
        "text_offset": offsets,
    }


def chat_chunk(
    rid: str, model: str, created: int, index: int, delta: dict[str, Any], **extra: Any
) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{rid}",
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": index,
                "delta": delta,
                "logprobs": extra.get("logprobs"),
                "finish_reason": extra.get("finish_reason"),
            }
        ],
    }


def completion_chunk(
    rid: str,
    model: str,
    created: int,
    index: int,
    text: str,
    logprobs: dict[str, Any] | None,
    finish_reason: str | None,
) -> dict[str, Any]:
    return {
        "id": f"cmpl-{rid}",
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [
            {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish_reason}
        ],
    }


def usage_chunk(
    kind: Literal["chat", "completion"], rid: str, model: str, created: int, used: dict[str, Any]
) -> dict[str, Any]:
    """The last chunk of a stream with `stream_options.include_usage`: no choices, the usage."""
    return {
        "id": f"{'chatcmpl' if kind == 'chat' else 'cmpl'}-{rid}",
        "object": "chat.completion.chunk" if kind == "chat" else "text_completion",
        "created": created,
        "model": model,
        "choices": [],
        "usage": used,
    }


def chat_response(rid: str, model: str, created: int, choices: Sequence[Choice]) -> dict:
    return {
        "id": f"chatcmpl-{rid}",
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": c.index,
                "message": {"role": "assistant", "content": "".join(c.text)},
                "logprobs": None if c.logprobs is None else {"content": c.logprobs},
                "finish_reason": c.finish_reason,
            }
            for c in choices
        ],
        "usage": usage(choices),
    }


def completion_response(
    rid: str, model: str, created: int, choices: Sequence[Choice], prompts: int
) -> dict:
    return {
        "id": f"cmpl-{rid}",
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": c.index,
                "text": "".join(c.text),
                "logprobs": None if c.logprobs is None else completion_logprobs(c.logprobs),
                "finish_reason": c.finish_reason,
            }
            for c in choices
        ],
        "usage": usage(choices, prompts),
    }


def models_response(models: Sequence[common_pb2.ModelInfo]) -> dict:
    created = int(time.time())
    return {
        "object": "list",
        "data": [
            {
                "id": m.name,
                "object": "model",
                "created": created,
                "owned_by": "strata",
                "max_model_len": m.context_length or None,
            }
            for m in models
        ],
    }
