"""The OpenAI wire format (strata.gateway.openai_api): bodies parsed with OpenAI's defaults and
errors, pipeline failures mapped to OpenAI's statuses, usage counted once per prompt."""

from __future__ import annotations

import grpc
import pytest

from strata.gateway.openai_api import (
    ApiError,
    ChatRequest,
    Choice,
    CompletionRequest,
    api_error,
    chat_params,
    completion_params,
    completion_prompts,
    parse,
    usage,
)
from strata.gateway.pipeline import PipelineError


def test_chat_defaults_follow_openai_and_unknown_fields_are_ignored():
    req = parse(
        ChatRequest,
        b'{"model": "m", "messages": [{"role": "developer", "content": "be brief"},'
        b' {"role": "user", "content": [{"type": "text", "text": "a"},'
        b' {"type": "text", "text": "b"}]}], "frobnicate": true}',
    )
    p = chat_params(req, context_length=2048, prompt_tokens=48)
    assert p.messages == [("system", "be brief"), ("user", "ab")]
    assert p.temperature == 1.0 and p.top_p == 1.0 and p.top_k == 0 and p.logprobs == 0
    assert p.max_tokens == 2048 - 48 - 1  # what the context leaves
    assert chat_params(req, None, 48).max_tokens == 1024
    sized = parse(ChatRequest, b'{"model": "m", "messages": [{"role": "user", "content": "x"}],'
                  b' "max_completion_tokens": 7, "max_tokens": 9, "top_k": -1,'
                  b' "logprobs": true, "stop": "END"}')  # fmt: skip
    p = chat_params(sized, 2048, 5)
    assert (p.max_tokens, p.top_k, p.logprobs, p.stop) == (7, 0, 1, ["END"])


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": 5}',
         "temperature"),
        (b'{"model": "m", "messages": []}', "messages"),
        (b'{"messages": [{"role": "user", "content": "x"}]}', "model"),
        (b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "n": 0}', "n"),
    ],
)  # fmt: skip
def test_a_bad_body_is_a_400_naming_the_field(body, param):
    with pytest.raises(ApiError) as err:
        parse(ChatRequest, body)
    assert err.value.status == 400 and err.value.param == param
    assert err.value.body()["error"]["type"] == "invalid_request_error"


def test_bodies_that_are_not_objects_or_parts_that_are_not_text_are_refused():
    with pytest.raises(ApiError, match="not valid JSON"):
        parse(ChatRequest, b"{nope")
    with pytest.raises(ApiError, match="JSON object"):
        parse(ChatRequest, b"[1, 2]")
    req = parse(ChatRequest, b'{"model": "m", "messages": [{"role": "user", "content":'
                b' [{"type": "image_url"}]}]}')  # fmt: skip
    with pytest.raises(ApiError, match="text content parts only"):
        chat_params(req, None, 1)


def test_completion_prompts_are_text_lists_or_token_ids():
    def prompts(raw: bytes):
        return completion_prompts(parse(CompletionRequest, raw))

    assert prompts(b'{"model": "m", "prompt": "hi"}') == ["hi"]
    assert prompts(b'{"model": "m", "prompt": ["a", "b"]}') == ["a", "b"]
    assert prompts(b'{"model": "m", "prompt": [1, 2, 3]}') == [(1, 2, 3)]
    assert prompts(b'{"model": "m", "prompt": [[1, 2], [3]]}') == [(1, 2), (3,)]
    req = parse(CompletionRequest, b'{"model": "m", "prompt": [4, 5]}')
    p = completion_params(req, (4, 5))
    assert (p.prompt, p.prompt_token_ids, p.max_tokens) == ("", (4, 5), 16)
    with pytest.raises(ApiError, match="echo"):
        completion_params(parse(CompletionRequest, b'{"model": "m", "prompt": "x", "echo": true}'),
                          "x")  # fmt: skip


@pytest.mark.parametrize(
    ("code", "reason", "status", "retry"),
    [
        (grpc.StatusCode.RESOURCE_EXHAUSTED, "rate", 429, 2),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, "burst", 429, 2),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, "sla", 503, 2),
        (grpc.StatusCode.UNAUTHENTICATED, None, 401, None),
        (grpc.StatusCode.NOT_FOUND, None, 404, None),
        (grpc.StatusCode.INVALID_ARGUMENT, None, 400, None),
        (grpc.StatusCode.UNAVAILABLE, None, 503, None),
        (grpc.StatusCode.INTERNAL, None, 500, None),
    ],
)
def test_pipeline_failures_map_to_openais_statuses(code, reason, status, retry):
    hint = "1500" if retry else None
    err = api_error(PipelineError(code, "what happened", hint, reason))
    assert (err.status, err.retry_after_s, err.message) == (status, retry, "what happened")


def test_an_infeasible_request_is_a_400_with_a_code_the_caller_can_tell_apart():
    err = api_error(PipelineError(grpc.StatusCode.FAILED_PRECONDITION, "prefill too long"))
    assert (err.status, err.code) == (400, "sla_infeasible")


def test_usage_counts_each_prompt_once_across_its_choices():
    def choice(i: int, prompt: int, done: int, cached: int) -> Choice:
        return Choice(i, [], prompt_tokens=prompt, completion_tokens=done, cached_tokens=cached)

    # Two prompts, n=2 each: choices 0-1 share prompt 0, 2-3 prompt 1.
    used = usage([choice(0, 10, 3, 4), choice(1, 10, 5, 4), choice(2, 7, 1, 0),
                  choice(3, 7, 2, 0)], prompts=2)  # fmt: skip
    assert used == {
        "prompt_tokens": 17,
        "completion_tokens": 11,
        "total_tokens": 28,
        "prompt_tokens_details": {"cached_tokens": 4},
    }
