"""Tenant SDK: stream generations from the gateway and list its models, async or sync.

    async with AsyncClient() as client:
        async for chunk in client.generate("smollm2-135m-instruct", prompt="Hello"):
            print(chunk.text, end="")

Both clients send `authorization: Bearer <key>` on every call and return the gateway's
GenerateResponse chunks as they arrive; the last one carries finish_reason, usage and trace_id.
Errors surface as grpc.RpcError with the gateway's status code and sentence. `tls_ca` (PEM bytes
or a file path; default STRATA_TLS_CA) makes the channel TLS, verified against that authority,
for a gateway whose public port serves TLS.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping, Sequence

from strata.client import settings
from strata.rpc.channels import public_channel, public_sync_channel
from strata.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc

DEFAULT_MAX_TOKENS = 256
LIST_MODELS_TIMEOUT_S = 10.0

Message = common_pb2.ChatMessage | tuple[str, str] | Mapping[str, str]


def build_request(
    model: str,
    prompt: str | None = None,
    messages: Sequence[Message] | None = None,
    *,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    temperature: float = 0.0,
    top_p: float = 0.0,
    top_k: int = 0,
    seed: int | None = None,
    stop: Sequence[str] = (),
    prefix_public: bool = False,
    min_p: float = 0.0,
    repetition_penalty: float = 0.0,
    frequency_penalty: float = 0.0,
    presence_penalty: float = 0.0,
    logprobs: int = 0,
    stop_token_ids: Sequence[int] = (),
    ignore_eos: bool = False,
    sparse: bool | None = None,
) -> gateway_pb2.GenerateRequest:
    """The GenerateRequest for these arguments. Value ranges are the gateway's to check.
    `sparse`: None = the worker's default decode path, True/False = the sparse path on/off."""
    if (prompt is None) == (messages is None):
        raise ValueError("give exactly one of prompt (plain text) or messages (chat turns)")
    sampling = common_pb2.SamplingParams(
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        min_p=min_p,
        repetition_penalty=repetition_penalty,
        frequency_penalty=frequency_penalty,
        presence_penalty=presence_penalty,
        logprobs=logprobs,
        stop_token_ids=list(stop_token_ids),
        ignore_eos=ignore_eos,
    )
    if seed is not None:
        sampling.seed = seed
    request = gateway_pb2.GenerateRequest(
        model=model,
        sampling=sampling,
        max_tokens=max_tokens,
        stop=list(stop),
        prefix_public=prefix_public,
    )
    if sparse is not None:
        request.sparse = common_pb2.SPARSE_MODE_ON if sparse else common_pb2.SPARSE_MODE_OFF
    if prompt is not None:
        request.prompt = prompt
    elif messages is not None:
        request.messages.extend(_chat_message(m) for m in messages)
    return request


def _chat_message(message: Message) -> common_pb2.ChatMessage:
    if isinstance(message, common_pb2.ChatMessage):
        return message
    if isinstance(message, tuple):
        role, content = message
        return common_pb2.ChatMessage(role=role, content=content)
    return common_pb2.ChatMessage(role=message["role"], content=message["content"])


def _metadata(api_key: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {api_key}"),)


class AsyncClient:
    """grpc.aio client of the public Gateway API. Create it inside the event loop that uses it."""

    def __init__(
        self,
        address: str | None = None,
        api_key: str | None = None,
        tls_ca: str | bytes | None = None,
    ) -> None:
        self.address = settings.gateway_address(address)
        self._metadata = _metadata(settings.api_key(api_key))
        self._channel = public_channel(self.address, settings.tls_ca(tls_ca))
        self._stub = gateway_pb2_grpc.GatewayStub(self._channel)

    async def generate(
        self,
        model: str,
        prompt: str | None = None,
        messages: Sequence[Message] | None = None,
        *,
        timeout: float | None = None,
        **options,
    ) -> AsyncIterator[gateway_pb2.GenerateResponse]:
        """options: build_request's keyword arguments (max_tokens, temperature, seed, ...)."""
        request = build_request(model, prompt, messages, **options)
        call = self._stub.Generate(request, metadata=self._metadata, timeout=timeout)
        try:
            async for chunk in call:
                yield chunk
        finally:
            # A caller that stops reading early frees the server's slot instead of letting the
            # generation run to max_tokens; after a normal end this does nothing.
            call.cancel()

    async def list_models(
        self,
        timeout: float = LIST_MODELS_TIMEOUT_S,
    ) -> list[common_pb2.ModelInfo]:
        reply = await self._stub.ListModels(
            common_pb2.ListModelsRequest(), metadata=self._metadata, timeout=timeout
        )
        return list(reply.models)

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class Client:
    """Blocking counterpart of AsyncClient (same arguments, plain iterators), for scripts."""

    def __init__(
        self,
        address: str | None = None,
        api_key: str | None = None,
        tls_ca: str | bytes | None = None,
    ) -> None:
        self.address = settings.gateway_address(address)
        self._metadata = _metadata(settings.api_key(api_key))
        self._channel = public_sync_channel(self.address, settings.tls_ca(tls_ca))
        self._stub = gateway_pb2_grpc.GatewayStub(self._channel)

    def generate(
        self,
        model: str,
        prompt: str | None = None,
        messages: Sequence[Message] | None = None,
        *,
        timeout: float | None = None,
        **options,
    ) -> Iterator[gateway_pb2.GenerateResponse]:
        """options: build_request's keyword arguments (max_tokens, temperature, seed, ...)."""
        request = build_request(model, prompt, messages, **options)
        call = self._stub.Generate(request, metadata=self._metadata, timeout=timeout)
        try:
            yield from call
        finally:
            call.cancel()

    def list_models(self, timeout: float = LIST_MODELS_TIMEOUT_S) -> list[common_pb2.ModelInfo]:
        reply = self._stub.ListModels(
            common_pb2.ListModelsRequest(), metadata=self._metadata, timeout=timeout
        )
        return list(reply.models)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
