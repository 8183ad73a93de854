"""Gateway gRPC servicer: the public per-tenant API over the request pipeline
(strata.gateway.pipeline). It maps GenerateRequest to the pipeline's parameters, the pipeline's
chunks to GenerateResponse, and PipelineError to a status code, its sentence and the
retry-after-ms trailer."""

from __future__ import annotations

import time

import grpc

from strata.gateway.auth import bearer_key
from strata.gateway.pipeline import PipelineError, RequestPipeline
from strata.gateway.validation import GenerateParams
from strata.telemetry import names
from strata.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc


class GatewayServicer(gateway_pb2_grpc.GatewayServicer):
    def __init__(self, pipeline: RequestPipeline):
        self.pipeline = pipeline

    async def ListModels(
        self, request: common_pb2.ListModelsRequest, context: grpc.aio.ServicerContext
    ) -> common_pb2.ListModelsResponse:
        try:
            models = await self.pipeline.list_models(bearer_key(context.invocation_metadata()))
        except PipelineError as err:
            await _abort(context, err)
        return common_pb2.ListModelsResponse(models=models)

    async def Generate(
        self, request: gateway_pb2.GenerateRequest, context: grpc.aio.ServicerContext
    ):
        arrived = time.perf_counter()
        metadata = context.invocation_metadata()
        try:
            generation = await self.pipeline.admit(
                bearer_key(metadata),
                params_of(request),
                run_id_of(metadata),
                context.time_remaining(),
                arrived,
                metadata_value(metadata, names.SLA_CLASS_METADATA),
            )
            async for chunk in generation.chunks:
                reply = gateway_pb2.GenerateResponse(
                    request_id=generation.request_id,
                    text=chunk.text,
                    token_ids=chunk.token_ids,
                    finish_reason=chunk.finish_reason,
                    trace_id=generation.trace_id,
                    logprobs=chunk.logprobs,
                )
                if chunk.HasField("usage"):  # the last chunk only, as downstream
                    reply.usage.CopyFrom(chunk.usage)
                yield reply
        except PipelineError as err:
            await _abort(context, err)

    async def close(self) -> None:
        await self.pipeline.close()


async def _abort(context: grpc.aio.ServicerContext, err: PipelineError) -> None:
    """End the call with the error, its retry-after hint and its refusal's reason as trailers
    (where known)."""
    trailers = []
    if err.retry_after_ms is not None:
        trailers.append((names.RETRY_AFTER_METADATA, err.retry_after_ms))
    if err.reason:
        trailers.append((names.REFUSAL_REASON_METADATA, err.reason))
    if trailers:
        context.set_trailing_metadata(tuple(trailers))
    await context.abort(err.code, err.message)


def run_id_of(metadata) -> str | None:
    """The evaluation run the caller's metadata names, as sent (None if untagged)."""
    return metadata_value(metadata, names.RUN_ID_METADATA)


def metadata_value(metadata, name: str) -> str | None:
    """One metadata value as sent (None if absent)."""
    for key, value in metadata or ():
        if key == name:
            return value.decode(errors="replace") if isinstance(value, bytes) else value
    return None


def params_of(r: gateway_pb2.GenerateRequest) -> GenerateParams:
    s = r.sampling
    return GenerateParams(
        model=r.model,
        prompt=r.prompt,
        messages=[(m.role, m.content) for m in r.messages],
        max_tokens=r.max_tokens,
        temperature=s.temperature,
        top_p=s.top_p,
        top_k=s.top_k,
        repetition_penalty=s.repetition_penalty,
        stop=list(r.stop),
        min_p=s.min_p,
        frequency_penalty=s.frequency_penalty,
        presence_penalty=s.presence_penalty,
        logprobs=s.logprobs,
        stop_token_ids=tuple(s.stop_token_ids),
        seed=s.seed if s.HasField("seed") else None,
        ignore_eos=s.ignore_eos,
        prefix_public=r.prefix_public,
        sparse=r.sparse,
    )
