"""Worker gRPC servicer: protobuf <-> the async engine."""

from __future__ import annotations

import time
import uuid
from contextlib import aclosing

import grpc
from opentelemetry import trace

from services.worker.step_budget import StepBudget
from strata.core.stats import percentiles
from strata.engine.async_engine import AsyncEngine, EngineFailed, RequestFailed
from strata.engine.engine import EngineRequest, LLMEngine, RequestOutput
from strata.engine.prompt import prompt_ids
from strata.engine.resume import resume
from strata.engine.sequence import FinishReason, SamplingParams
from strata.engine.step_meter import StepLearner, StepMeter
from strata.policy.scheduling.prefill_ahead import class_tokens
from strata.policy.scheduling.step_cap import StepCap
from strata.rpc.convert import class_tokens_to_pb, step_line_to_pb
from strata.telemetry import names
from strata.v1 import common_pb2, worker_pb2, worker_pb2_grpc

_FINISH = {
    FinishReason.STOP: common_pb2.FINISH_REASON_STOP,
    FinishReason.LENGTH: common_pb2.FINISH_REASON_LENGTH,
    FinishReason.ABORTED: common_pb2.FINISH_REASON_ABORTED,
}

_SPARSE = {
    common_pb2.SPARSE_MODE_DEFAULT: None,
    common_pb2.SPARSE_MODE_OFF: False,
    common_pb2.SPARSE_MODE_ON: True,
}

_tracer = trace.get_tracer("strata.worker")


class WorkerServicer(worker_pb2_grpc.WorkerServicer):
    def __init__(
        self,
        engine: AsyncEngine,
        memory_bytes: int,
        meter: StepMeter | None = None,
        learner: StepLearner | None = None,
        step_cap: StepCap | None = None,
    ):
        self.engine = engine
        self.memory_bytes = memory_bytes
        self.meter = meter  # fed by the engine's step observer (None: the steps are not metered)
        self.learner = learner  # the engine's step observer, learning its step-time line
        self.step_cap = step_cap  # the engine's step budget reads it; each request notes its TTFT

    async def Generate(
        self, request: worker_pb2.WorkerGenerateRequest, context: grpc.aio.ServicerContext
    ):
        spec = request.spec
        tok = self.engine.engine.tokenizer
        try:
            ids = (
                list(spec.prompt_token_ids)
                if spec.prompt_token_ids
                else prompt_ids(tok, spec.prompt, [(m.role, m.content) for m in spec.messages])
            )
            req = EngineRequest(
                request_id=request.request_id or uuid.uuid4().hex,
                prompt_ids=ids,
                params=sampling_from_pb(spec),
                tenant=request.tenant,
                prefix_public=spec.prefix_public,
                priority=request.priority,
                kv_source=request.kv_source_address,
                sparse=sparse_from_pb(spec),
                tpot_ms=request.tpot_ms if request.tpot_ms > 0 else None,
            )
            if self.step_cap is not None:
                self.step_cap.note(request.ttft_ms, request.priority, time.monotonic())
            if request.resume_output_ids:  # failover: continue another worker's stream
                req = resume(
                    req, request.resume_output_ids, self.engine.engine.loaded.config.vocab_size, tok
                )
        except ValueError as err:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
        if isinstance(req, RequestOutput):  # the failed worker had reached max_tokens
            yield chunk_to_pb(req, tok)
            return
        with _tracer.start_as_current_span(names.SPAN_WORKER_GENERATE) as span:
            span.set_attribute(names.REQUEST_ID, req.request_id)
            span.set_attribute(names.GEN_AI_REQUEST_MODEL, self.engine.engine.model_name)
            span.set_attribute(names.GEN_AI_USAGE_INPUT_TOKENS, len(ids))
            try:
                # aclosing: a cancelled call aborts the request (and frees its blocks) at once
                async with aclosing(self.engine.generate(req)) as stream:
                    async for out in stream:
                        if out.finished:
                            span.set_attribute(
                                names.GEN_AI_USAGE_OUTPUT_TOKENS, out.completion_tokens
                            )
                            span.set_attribute(names.CACHED_TOKENS, out.cached_tokens)
                            span.set_attribute(names.TIER_TOKENS, out.tier_tokens)
                            if self.engine.engine.sparse is not None:
                                span.set_attribute(names.SPARSE_LAYER_STEPS, out.sparse_layer_steps)
                                span.set_attribute(names.SPARSE_FALLBACKS, out.sparse_fallbacks)
                        yield chunk_to_pb(out, tok)
            except ValueError as err:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
            except RequestFailed as err:
                # This request alone: retrying it would fail the same way.
                await context.abort(grpc.StatusCode.INTERNAL, f"{err}; the request was stopped")
            except EngineFailed as err:
                await context.abort(grpc.StatusCode.INTERNAL, str(err))

    async def GetStats(
        self, request: worker_pb2.GetStatsRequest, context: grpc.aio.ServicerContext
    ) -> worker_pb2.WorkerStats:
        e = self.engine.engine
        snap = self.engine.snapshot()
        tier = e.tier.client if e.tier is not None else None
        pool = e.pool
        recent = list(pool.recent_lifetimes_s)
        p50, p99 = percentiles(recent, (50.0, 99.0)) if recent else (0.0, 0.0)
        counters = e.counters()
        if self.meter is not None:
            counters.step_seconds_observed = self.meter.observed_s
            counters.step_seconds_solo = self.meter.solo_s
        return worker_pb2.WorkerStats(
            model=e.model_name,
            running_requests=snap["running"],
            waiting_requests=snap["waiting"],
            kv_blocks_total=snap["blocks_total"],
            kv_blocks_free=snap["blocks_free"],
            kv_blocks_cached=snap["blocks_cached"],
            blocks_offloaded=tier.offloaded if tier else 0,
            queued_tokens=snap["queued_tokens"],
            queued_by_class=class_tokens_to_pb(class_tokens(snap["queued_by_class"])),
            context_length=e.max_context,
            memory_bytes=self.memory_bytes,
            max_batched_tokens=e.config.max_batched_tokens,
            block_lifetime_p50_s=p50,
            block_lifetime_p99_s=p99,
            waiting_for_memory=e.scheduler.waiting_for_memory,
            tier_blocks_dropped=tier.dropped if tier else 0,
            prefetched_blocks=tier.prefetched if tier else 0,
            kv_blocks_used=pool.num_used,
            max_seqs=e.config.max_seqs,
            kv_block_size=e.config.block_size,
            prefill_tokens_per_s=(
                1.0 / e.costs.prefill_s_per_token if e.costs.prefill_s_per_token else 0.0
            ),
            **sparse_stats(e),
            step_allowance_ms=(
                e.step_budget.allowance_ms() if isinstance(e.step_budget, StepBudget) else 0.0
            ),
            **step_line_to_pb(self.learner.model.line() if self.learner is not None else None),
            **counters.to_pb_fields(),
        )


def sparse_from_pb(spec: common_pb2.GenerationSpec) -> bool | None:
    """The request's sparse decode choice; None: the worker's default (STRATA_SPARSE)."""
    if spec.sparse not in _SPARSE:
        raise ValueError(
            f"sparse must be SPARSE_MODE_DEFAULT (0), SPARSE_MODE_OFF (1) or "
            f"SPARSE_MODE_ON (2), got {spec.sparse}"
        )
    return _SPARSE[spec.sparse]


def sparse_stats(e: LLMEngine) -> dict[str, int]:
    """WorkerStats' sparse decode figures beyond the engine counters (zero on an engine
    without the path)."""
    if e.sparse is None:
        return {}
    s = e.sparse.stats
    return {
        "sparse_decode_rows": s.decode_rows,
        "sparse_blocks_read": s.blocks_read,
        "sparse_blocks_dense": s.blocks_dense,
    }


def sampling_from_pb(spec: common_pb2.GenerationSpec) -> SamplingParams:
    s = spec.sampling
    return SamplingParams(
        temperature=s.temperature,
        top_p=s.top_p if s.top_p > 0 else 1.0,
        top_k=s.top_k,
        seed=s.seed if s.HasField("seed") else None,
        repetition_penalty=s.repetition_penalty if s.repetition_penalty > 0 else 1.0,
        min_p=s.min_p,
        frequency_penalty=s.frequency_penalty,
        presence_penalty=s.presence_penalty,
        logprobs=s.logprobs,
        max_tokens=spec.max_tokens,
        stop=tuple(spec.stop),
        stop_token_ids=tuple(s.stop_token_ids),
        ignore_eos=s.ignore_eos,
    )


def chunk_to_pb(out: RequestOutput, tokenizer) -> common_pb2.GenerationChunk:
    chunk = common_pb2.GenerationChunk(
        request_id=out.request_id, text=out.text, token_ids=out.token_ids
    )
    for lp in out.logprobs or ():
        chunk.logprobs.append(
            common_pb2.TokenLogprob(
                token_id=lp.token_id,
                logprob=lp.logprob,
                top=[
                    common_pb2.TopLogprob(token_id=t, logprob=v, text=tokenizer.decode([t]))
                    for t, v in lp.top
                ],
            )
        )
    if out.finished:
        chunk.finish_reason = _FINISH[out.finish_reason]
        chunk.usage.CopyFrom(
            common_pb2.Usage(
                prompt_tokens=out.prompt_tokens,
                completion_tokens=out.completion_tokens,
                cached_prompt_tokens=out.cached_tokens + out.tier_tokens,
                queue_ms=out.queue_ms,
            )
        )
    return chunk
