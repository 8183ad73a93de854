"""Gateway gRPC servicer: the public per-tenant API.

Generate: authenticate -> validate -> the tenant's policy (tenant directory) -> rate limit
(the tenant's own rate, or the default) -> hash the prompt's blocks -> Route (scheduler, with the
policy) -> Submit (node manager, with the policy and the route's KV source) -> stream back. A
refusal downstream reaches the caller with its code, sentence and retry-after-ms hint. The
request's latency figures are recorded on the gateway span, from which the metrics collector
derives the request's row; a caller replaying a trace tags its requests with an evaluation run
through the `x-strata-run-id` metadata, recorded on the span too.
"""

from __future__ import annotations

import time
import uuid

import grpc
from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from services.gateway.convert import policy_pb
from strata.eval.stats import REPORT_PERCENTILES, percentiles
from strata.gateway.auth import Authenticator, bearer_key
from strata.gateway.prefix_hashes import PrefixHasher
from strata.gateway.tenant_directory import TenantDirectory
from strata.gateway.validation import GenerateParams, validate
from strata.policy.ratelimit import TenantRateLimiter
from strata.rpc.server import channel
from strata.rpc.v1 import (common_pb2, gateway_pb2, gateway_pb2_grpc, node_pb2, node_pb2_grpc,
                           scheduler_pb2, scheduler_pb2_grpc)
from strata.telemetry import names
from strata.telemetry.setup import current_trace_id_hex

_tracer = trace.get_tracer("strata.gateway")
_FINISH_NAMES = {v: k.removeprefix("FINISH_REASON_").lower()
                 for k, v in common_pb2.FinishReason.items()}
RETRY_AFTER_METADATA = "retry-after-ms"
BAD_KEY = "unknown or revoked API key; ask your admin for a valid key"


class GatewayServicer(gateway_pb2_grpc.GatewayServicer):
    def __init__(self, scheduler: scheduler_pb2_grpc.SchedulerStub, auth: Authenticator,
                 limiter: TenantRateLimiter, request_timeout_s: float,
                 prefixes: PrefixHasher | None = None, tenants: TenantDirectory | None = None):
        self.scheduler = scheduler
        self.auth = auth
        self.limiter = limiter
        self.request_timeout_s = request_timeout_s
        self.prefixes = prefixes if prefixes is not None else PrefixHasher()
        # Default: the authenticator's store and clock, the directory's default TTL.
        self.tenants = tenants if tenants is not None else TenantDirectory(auth.sessions,
                                                                           auth.clock)
        self._nodes: dict[str, tuple[grpc.aio.Channel, node_pb2_grpc.NodeManagerStub]] = {}

    async def _tenant(self, context: grpc.aio.ServicerContext) -> str:
        key = bearer_key(context.invocation_metadata())
        if key is None:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED,
                                "missing API key: send metadata 'authorization: Bearer <key>'")
        tenant = await self.auth.tenant_for(key)
        if tenant is None:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, BAD_KEY)
        return tenant

    async def ListModels(self, request: common_pb2.ListModelsRequest,
                         context: grpc.aio.ServicerContext) -> common_pb2.ListModelsResponse:
        await self._tenant(context)
        try:
            return await self.scheduler.ListModels(common_pb2.ListModelsRequest(), timeout=5.0)
        except grpc.aio.AioRpcError as err:
            await context.abort(grpc.StatusCode.UNAVAILABLE,
                                f"the scheduler is unreachable ({err.code().name}); retry")

    async def Generate(self, request: gateway_pb2.GenerateRequest,
                       context: grpc.aio.ServicerContext):
        # TTFT and e2e count from the request's arrival here, authentication and the tenant's
        # policy lookup (a SQL query on a cache miss) included, as the caller waits for them
        arrived = time.perf_counter()
        tenant = await self._tenant(context)
        params = _params(request)
        problem = validate(params)
        if problem is not None:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        run_id, problem = _run_id(context.invocation_metadata())
        if problem is not None:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        entry = await self.tenants.lookup(tenant)
        if entry is None:
            # Deleted through another gateway while this one still caches its key.
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, BAD_KEY)
        wait = self.limiter.try_acquire(tenant, entry.rate_limit_rps)
        if wait > 0:
            context.set_trailing_metadata(((RETRY_AFTER_METADATA, str(int(wait * 1000) + 1)),))
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                f"tenant {tenant!r} is over its request rate; retry in "
                                f"{wait * 1000:.0f} ms")
        timeout = context.time_remaining() or self.request_timeout_s
        request_id = uuid.uuid4().hex
        policy = policy_pb(entry.policy)
        with _tracer.start_as_current_span(names.SPAN_GATEWAY_GENERATE,
                                           record_exception=False,
                                           set_status_on_exception=False) as span:
            span.set_attributes({
                names.GEN_AI_SYSTEM: names.SYSTEM_NAME, names.GEN_AI_OPERATION: "chat"
                if params.messages else "text_completion",
                names.TENANT: tenant, names.REQUEST_ID: request_id,
                names.GEN_AI_REQUEST_MODEL: params.model,
                names.GEN_AI_REQUEST_MAX_TOKENS: params.max_tokens,
                names.GEN_AI_REQUEST_TEMPERATURE: params.temperature})
            if run_id is not None:
                span.set_attribute(names.RUN_ID, run_id)
            trace_id = current_trace_id_hex()
            timing = _Timing(arrived)
            try:
                hashed = await self.prefixes.hash_prompt(params.model, tenant,
                                                         request.prefix_public, params.prompt,
                                                         params.messages)
                # Without the model's tokenizer (still loading), about four characters a token.
                prompt_tokens = hashed.tokens if hashed is not None else (
                    len(params.prompt) + sum(len(c) for _, c in params.messages)) // 4
                route = await self.scheduler.Route(scheduler_pb2.RouteRequest(
                    model=params.model, tenant=tenant, prompt_tokens_estimate=prompt_tokens,
                    prefix_hashes=hashed.hashes if hashed is not None else (), policy=policy,
                    max_tokens=params.max_tokens),
                    timeout=min(timeout, 5.0))
                # The cluster serves this model: its tokenizer is worth loading for next time.
                self.prefixes.ensure_loading(params.model)
                span.set_attribute(names.NODE_ID, route.node_id)
                call = self._node(route.node_address).Submit(node_pb2.SubmitRequest(
                    request_id=request_id, tenant=tenant, spec=_spec(request),
                    replica_id=route.replica_id, kv_source_address=route.kv_source_address,
                    policy=policy, priority=entry.policy.priority,
                    prompt_tokens_estimate=prompt_tokens),
                    timeout=timeout)
                try:
                    async for chunk in call:
                        timing.chunk(len(chunk.token_ids))
                        if chunk.finish_reason:
                            _finish_attributes(span, chunk, timing)
                        reply = gateway_pb2.GenerateResponse(
                            request_id=request_id, text=chunk.text, token_ids=chunk.token_ids,
                            finish_reason=chunk.finish_reason, trace_id=trace_id,
                            logprobs=chunk.logprobs)
                        if chunk.HasField("usage"):  # the last chunk only, as downstream
                            reply.usage.CopyFrom(chunk.usage)
                        yield reply
                finally:
                    if not call.done():
                        call.cancel()
            except grpc.aio.AioRpcError as err:
                span.set_attribute(names.ERROR_CODE, err.code().name)
                span.set_status(Status(StatusCode.ERROR, err.details()))
                retry_after = _retry_after(err)
                if retry_after is not None:
                    context.set_trailing_metadata(((RETRY_AFTER_METADATA, retry_after),))
                await context.abort(err.code(), err.details() or err.code().name)
            except BaseException:
                # The caller cancelled (or the server stops): record it, then let it propagate.
                if not span.attributes.get(names.GEN_AI_RESPONSE_FINISH_REASONS):
                    span.set_attribute(names.ERROR_CODE, grpc.StatusCode.CANCELLED.name)
                    span.set_attribute(names.GEN_AI_RESPONSE_FINISH_REASONS, ["aborted"])
                raise

    def _node(self, address: str) -> node_pb2_grpc.NodeManagerStub:
        entry = self._nodes.get(address)
        if entry is None:
            ch = channel(address)
            entry = self._nodes[address] = (ch, node_pb2_grpc.NodeManagerStub(ch))
        return entry[1]

    async def close(self) -> None:
        await self.prefixes.close()
        for ch, _ in self._nodes.values():
            await ch.close()
        self._nodes.clear()


def _retry_after(err: grpc.aio.AioRpcError) -> str | None:
    """The retry-after-ms hint a refusal downstream carried, to hand on to the caller."""
    for key, value in err.trailing_metadata() or ():
        if key == RETRY_AFTER_METADATA:
            return value.decode() if isinstance(value, bytes) else value
    return None


def _run_id(metadata) -> tuple[int | None, str | None]:
    """The evaluation run named by the caller's metadata (None if untagged), or a problem."""
    for key, value in metadata or ():
        if key == names.RUN_ID_METADATA:
            if isinstance(value, str) and value.isdecimal() and 0 < int(value) < 2**63:
                return int(value), None
            return None, (f"{names.RUN_ID_METADATA} must be the positive run id that "
                          f"Metrics.StartRun returned, got {value!r}")
    return None, None


class _Timing:
    __slots__ = ("start", "first", "last", "tokens", "last_token", "gaps")

    def __init__(self, start: float):
        self.start, self.first, self.last, self.tokens = start, None, start, 0
        self.last_token: float | None = None
        self.gaps: list[float] = []   # between token-carrying chunks, as replay clients count

    def chunk(self, n_tokens: int) -> None:
        now = time.perf_counter()
        if n_tokens and self.first is None:
            self.first = now
        if n_tokens:
            if self.last_token is not None:
                self.gaps.append(now - self.last_token)
            self.last_token = now
        self.last = now
        self.tokens += n_tokens


def _finish_attributes(span: trace.Span, chunk: common_pb2.GenerationChunk, t: _Timing) -> None:
    first = t.first if t.first is not None else t.last
    ttft = (first - t.start) * 1000
    tpot = (t.last - first) * 1000 / (t.tokens - 1) if t.tokens > 1 else 0.0
    span.set_attributes({
        names.TTFT_MS: ttft, names.TPOT_MS: tpot, names.E2E_MS: (t.last - t.start) * 1000,
        names.GEN_AI_USAGE_INPUT_TOKENS: chunk.usage.prompt_tokens,
        names.GEN_AI_USAGE_OUTPUT_TOKENS: chunk.usage.completion_tokens,
        names.CACHED_TOKENS: chunk.usage.cached_prompt_tokens,
        names.QUEUE_MS: chunk.usage.queue_ms,
        names.GEN_AI_RESPONSE_FINISH_REASONS: [_FINISH_NAMES[chunk.finish_reason]]})
    if t.gaps:
        p50, p95, p99 = percentiles([g * 1000 for g in t.gaps], REPORT_PERCENTILES)
        span.set_attributes({names.ITL_P50_MS: p50, names.ITL_P95_MS: p95,
                             names.ITL_P99_MS: p99})


def _params(r: gateway_pb2.GenerateRequest) -> GenerateParams:
    s = r.sampling
    return GenerateParams(
        model=r.model, prompt=r.prompt, messages=[(m.role, m.content) for m in r.messages],
        max_tokens=r.max_tokens, temperature=s.temperature, top_p=s.top_p, top_k=s.top_k,
        repetition_penalty=s.repetition_penalty, stop=list(r.stop), min_p=s.min_p,
        frequency_penalty=s.frequency_penalty, presence_penalty=s.presence_penalty,
        logprobs=s.logprobs, stop_token_ids=tuple(s.stop_token_ids))


def _spec(r: gateway_pb2.GenerateRequest) -> common_pb2.GenerationSpec:
    return common_pb2.GenerationSpec(model=r.model, prompt=r.prompt, messages=r.messages,
                                     sampling=r.sampling, max_tokens=r.max_tokens, stop=r.stop,
                                     prefix_public=r.prefix_public, sparse=r.sparse)
