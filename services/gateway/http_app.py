"""The gateway's HTTP front: the OpenAI API (strata.gateway.openai_api) over the same request
pipeline as gRPC Generate, plus /health (liveness), /ready (readiness) and /metrics
(Prometheus). A Starlette app; uvicorn serves it in the gateway's own event loop.

Every generation is admitted, routed and streamed by the pipeline: one authentication, one
rate limit, one admission, one span tree per choice. A request's errors before its first token
are HTTP errors (OpenAI's error object and status); after it, a stream ends with an error event.
A client that goes away cancels its generations: their gRPC calls to the nodes are cancelled,
and the workers stop decoding them and free their blocks.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from strata.core.tokens import estimate_tokens
from strata.gateway.openai_api import (
    FINISH,
    ApiError,
    ChatRequest,
    Choice,
    CompletionRequest,
    api_error,
    chat_chunk,
    chat_params,
    chat_response,
    choice_seed,
    completion_chunk,
    completion_logprobs,
    completion_params,
    completion_prompts,
    completion_response,
    message_text,
    models_response,
    parse,
    token_logprobs,
    usage,
    usage_chunk,
)
from strata.gateway.pipeline import Generation, PipelineError, RequestPipeline
from strata.gateway.validation import GenerateParams
from strata.telemetry import names
from strata.v1 import common_pb2

log = logging.getLogger("services.gateway.http")
CONTEXT_TTL_S = 60.0  # how long a model's context length is taken from the last model list

Readiness = Callable[[], Awaitable[str | None]]  # None: ready; else why not


def _key(request: Request) -> str | None:
    scheme, _, key = request.headers.get("authorization", "").partition(" ")
    return key.strip() if scheme.lower() == "bearer" and key.strip() else None


def _error(err: ApiError) -> JSONResponse:
    headers = {"retry-after": str(err.retry_after_s)} if err.retry_after_s is not None else None
    return JSONResponse(err.body(), status_code=err.status, headers=headers)


def _sse(data: dict[str, Any] | str) -> bytes:
    return f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n".encode()


class Started:
    """A generation whose first chunk has arrived (routing and admission are behind it)."""

    __slots__ = ("index", "generation", "first")

    def __init__(self, index: int, generation: Generation, first: common_pb2.GenerationChunk):
        self.index, self.generation, self.first = index, generation, first

    async def chunks(self) -> AsyncIterator[common_pb2.GenerationChunk]:
        yield self.first
        async for chunk in self.generation.chunks:
            yield chunk


class OpenAIFront:
    def __init__(self, pipeline: RequestPipeline, readiness: Readiness) -> None:
        self.pipeline = pipeline
        self.readiness = readiness
        self._context: dict[str, tuple[float, int]] = {}  # model -> (when, context length)

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/v1/chat/completions", self.chat, methods=["POST"]),
                Route("/v1/completions", self.completions, methods=["POST"]),
                Route("/v1/models", self.models, methods=["GET"]),
                Route("/health", self.health, methods=["GET"]),
                Route("/ready", self.ready, methods=["GET"]),
                Route("/metrics", self.metrics, methods=["GET"]),
            ]
        )

    # -- plain endpoints ---------------------------------------------------------------------
    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def ready(self, request: Request) -> Response:
        why = await self.readiness()
        if why is None:
            return JSONResponse({"status": "ready"})
        return JSONResponse({"status": "not ready", "reason": why}, status_code=503)

    async def metrics(self, request: Request) -> Response:
        return Response(
            self.pipeline.metrics.render(),
            media_type="text/plain; version=0.0.4; charset=utf-8",
        )

    async def models(self, request: Request) -> Response:
        try:
            listed = await self.pipeline.list_models(_key(request))
        except PipelineError as err:
            return _error(api_error(err))
        now = time.monotonic()
        for m in listed:
            if m.context_length:
                self._context[m.name] = (now, m.context_length)
        return JSONResponse(models_response(listed))

    # -- generations -------------------------------------------------------------------------
    async def chat(self, request: Request) -> Response:
        arrived = time.perf_counter()
        try:
            req: ChatRequest = parse(ChatRequest, await request.body())
            context = await self._context_length(_key(request), req.model)
            messages = [message_text(i, m) for i, m in enumerate(req.messages)]
            # Off the event loop, as the pipeline's own hashing: a long prompt takes ms.
            prompt_tokens = await asyncio.to_thread(
                self.pipeline.prefixes.count_tokens, req.model, messages
            )
            if prompt_tokens is None:  # no tokenizer here yet: a generous estimate
                prompt_tokens = 2 * estimate_tokens("", (c for _, c in messages)) + 8 * len(
                    messages
                )
            base = chat_params(req, context, prompt_tokens)
            params = [_with_seed(base, choice_seed(req.seed, i)) for i in range(req.n)]
            started = await self._start(request, params, arrived)
        except ApiError as err:
            return _error(err)
        rid = uuid.uuid4().hex
        created = int(time.time())
        top = req.top_logprobs or 0
        if req.stream:
            include_usage = bool(req.stream_options and req.stream_options.include_usage)
            return self._stream(started, rid, req.model, created, "chat", top, include_usage, 1)
        choices = await self._collect(started, req.model, top)
        if isinstance(choices, ApiError):
            return _error(choices)
        for c in choices:
            if not req.logprobs:
                c.logprobs = None
        return JSONResponse(chat_response(rid, req.model, created, choices))

    async def completions(self, request: Request) -> Response:
        arrived = time.perf_counter()
        try:
            req: CompletionRequest = parse(CompletionRequest, await request.body())
            prompts = completion_prompts(req)
            params = [
                _with_seed(completion_params(req, p), choice_seed(req.seed, j))
                for p in prompts
                for j in range(req.n)
            ]
            started = await self._start(request, params, arrived)
        except ApiError as err:
            return _error(err)
        rid = uuid.uuid4().hex
        created = int(time.time())
        top = req.logprobs or 0
        if req.stream:
            include_usage = bool(req.stream_options and req.stream_options.include_usage)
            return self._stream(
                started, rid, req.model, created, "completion", top, include_usage, len(prompts)
            )
        choices = await self._collect(started, req.model, top)
        if isinstance(choices, ApiError):
            return _error(choices)
        for c in choices:
            if req.logprobs is None:
                c.logprobs = None
        return JSONResponse(completion_response(rid, req.model, created, choices, len(prompts)))

    async def _context_length(self, key: str | None, model: str) -> int | None:
        """The model's context length from a recent model list (listing now if stale)."""
        known = self._context.get(model)
        if known is not None and time.monotonic() - known[0] < CONTEXT_TTL_S:
            return known[1]
        try:
            listed = await self.pipeline.list_models(key)
        except PipelineError as err:
            raise api_error(err) from None
        now = time.monotonic()
        for m in listed:
            if m.context_length:
                self._context[m.name] = (now, m.context_length)
        known = self._context.get(model)
        return known[1] if known is not None else None

    async def _start(
        self, request: Request, params: list[GenerateParams], arrived: float
    ) -> list[Started]:
        """Admit every choice and wait for each one's first chunk; on any failure the others
        are cancelled and the failure is the answer."""
        key = _key(request)
        run_id = request.headers.get(names.RUN_ID_METADATA)
        sla_class = request.headers.get(names.SLA_CLASS_METADATA)
        generations: list[Generation] = []
        try:
            for p in params:
                generations.append(
                    await self.pipeline.admit(key, p, run_id, None, arrived, sla_class)
                )
        except PipelineError as err:
            await _close(generations)
            raise api_error(err) from None
        firsts = await asyncio.gather(
            *(anext(g.chunks) for g in generations), return_exceptions=True
        )
        failed = next((f for f in firsts if isinstance(f, BaseException)), None)
        if failed is not None:
            await _close(generations)
            if isinstance(failed, PipelineError):
                raise api_error(failed)
            if isinstance(failed, StopAsyncIteration):
                raise ApiError(500, "a generation ended before its first chunk", "server_error")
            raise failed
        return [
            Started(i, g, f)  # type: ignore[arg-type]
            for i, (g, f) in enumerate(zip(generations, firsts))
        ]

    async def _collect(
        self, started: list[Started], model: str, top: int
    ) -> list[Choice] | ApiError:
        drained = await asyncio.gather(
            *(self._drain(s, model, top) for s in started), return_exceptions=True
        )
        await _close([s.generation for s in started])
        failed = next((d for d in drained if isinstance(d, BaseException)), None)
        if isinstance(failed, PipelineError):
            return api_error(failed)
        if failed is not None:
            raise failed
        return [d for d in drained if isinstance(d, Choice)]

    async def _drain(self, s: Started, model: str, top: int) -> Choice:
        choice = Choice(s.index, [], logprobs=[])
        async for chunk in s.chunks():
            _absorb(choice, chunk, self._logprobs(model, chunk, top))
        return choice

    def _logprobs(self, model: str, chunk: common_pb2.GenerationChunk, top: int) -> list | None:
        if not chunk.logprobs:
            return None
        texts = self.pipeline.prefixes.token_texts(model, list(chunk.token_ids))
        return token_logprobs(chunk, texts, top)

    def _stream(
        self,
        started: list[Started],
        rid: str,
        model: str,
        created: int,
        kind: str,
        top: int,
        include_usage: bool,
        prompts: int,
    ) -> StreamingResponse:
        return StreamingResponse(
            self._events(started, rid, model, created, kind, top, include_usage, prompts),
            media_type="text/event-stream",
            headers={"cache-control": "no-cache"},
        )

    async def _events(
        self,
        started: list[Started],
        rid: str,
        model: str,
        created: int,
        kind: str,
        top: int,
        include_usage: bool,
        prompts: int,
    ) -> AsyncIterator[bytes]:
        queue: asyncio.Queue[tuple[int, common_pb2.GenerationChunk | PipelineError | None]] = (
            asyncio.Queue()
        )

        async def pump(s: Started) -> None:
            try:
                async for chunk in s.chunks():
                    await queue.put((s.index, chunk))
                await queue.put((s.index, None))
            except PipelineError as err:
                await queue.put((s.index, err))

        tasks = [asyncio.create_task(pump(s)) for s in started]
        choices = {s.index: Choice(s.index, []) for s in started}
        open_ = len(started)
        try:
            if kind == "chat":
                for s in started:
                    yield _sse(
                        chat_chunk(
                            rid, model, created, s.index, {"role": "assistant", "content": ""}
                        )
                    )
            while open_:
                index, item = await queue.get()
                if item is None:
                    open_ -= 1
                    continue
                if isinstance(item, PipelineError):
                    yield _sse(api_error(item).body())
                    return
                choice = choices[index]
                lps = self._logprobs(model, item, top)
                _absorb(choice, item, None)
                finish = choice.finish_reason if item.finish_reason else None
                if not item.text and not item.token_ids and not finish:
                    continue  # nothing decoded (a token that completes no character still goes)
                if kind == "chat":
                    delta = {"content": item.text} if item.text else {}
                    yield _sse(
                        chat_chunk(
                            rid, model, created, index, delta,
                            logprobs=None if lps is None else {"content": lps},
                            finish_reason=finish,
                        )
                    )  # fmt: skip
                else:
                    yield _sse(
                        completion_chunk(
                            rid, model, created, index, item.text,
                            None if lps is None else completion_logprobs(lps), finish,
                        )
                    )  # fmt: skip
            if include_usage:
                used = usage([choices[i] for i in sorted(choices)], prompts)
                yield _sse(
                    usage_chunk(
                        "chat" if kind == "chat" else "completion", rid, model, created, used
                    )
                )
            yield _sse("[DONE]")
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await _close([s.generation for s in started])


def _absorb(choice: Choice, chunk: common_pb2.GenerationChunk, logprobs: list | None) -> None:
    choice.text.append(chunk.text)
    if logprobs is not None and choice.logprobs is not None:
        choice.logprobs.extend(logprobs)
    if chunk.finish_reason:
        choice.finish_reason = FINISH.get(chunk.finish_reason, "stop")
    if chunk.HasField("usage"):
        choice.prompt_tokens = chunk.usage.prompt_tokens
        choice.completion_tokens = chunk.usage.completion_tokens
        choice.cached_tokens = chunk.usage.cached_prompt_tokens


def _with_seed(p: GenerateParams, seed: int | None) -> GenerateParams:
    return p if seed == p.seed else dataclasses.replace(p, seed=seed)


async def _close(generations: list[Generation]) -> None:
    """Close generations' streams: a generation not read to its end cancels its node call."""
    for g in generations:
        aclose = getattr(g.chunks, "aclose", None)
        if aclose is not None:
            await aclose()
