"""The gateway's request pipeline, called by the gRPC servicer (and any other front) alike:

    authenticate -> validate -> the tenant's policy -> rate limit -> hash the prompt's blocks
    -> Route (a scheduler; the last view of the pool when none answers) -> Submit (the node
    manager, with the policy and the route's KV source) -> stream chunks back

Failures are `PipelineError`s: a gRPC status code, a sentence the caller can act on (never an
internal address), and a retry-after hint where one applies. A refusal downstream reaches the
caller with its code, sentence and hint. The request's latency figures are recorded on the
`strata.gateway.generate` span, from which the metrics collector derives the request's row; TTFT
and E2E count from the request's arrival, authentication and the policy lookup included.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc
from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from strata.core.blocks import DEFAULT_BLOCK_SIZE
from strata.core.tenant_policy import TenantPolicy
from strata.core.tenant_policy_pb import policy_to_pb
from strata.core.tokens import estimate_tokens
from strata.gateway.auth import Authenticator
from strata.gateway.errors import public_details
from strata.gateway.metrics import GatewayMetrics
from strata.gateway.node_clients import NodeClients
from strata.gateway.prefix_hashes import PrefixHasher
from strata.gateway.scheduler_client import SchedulerClient, SchedulersUnreachable
from strata.gateway.tenant_directory import TenantDirectory, TenantEntry
from strata.gateway.timing import FINISH_NAMES, Timing, finish_attributes
from strata.gateway.validation import GenerateParams, validate
from strata.policy.ratelimit import TenantRateLimiter
from strata.policy.scheduling.stale_routing import StaleRefusal, ViewReplica
from strata.telemetry import names
from strata.v1 import common_pb2, node_pb2, scheduler_pb2

_tracer = trace.get_tracer("strata.gateway")
MISSING_KEY = "missing API key: send metadata 'authorization: Bearer <key>'"
BAD_KEY = "unknown or revoked API key; ask your admin for a valid key"
ROUTE_TIMEOUT_S = 5.0
LIST_MODELS_TIMEOUT_S = 5.0


class PipelineError(Exception):
    """`reason` names a refusal's cause where one is known (strata.policy.scheduling:
    burst | pool_full | sla | partition; `rate` for the gateway's rate limit)."""

    def __init__(
        self,
        code: grpc.StatusCode,
        message: str,
        retry_after_ms: str | None = None,
        reason: str | None = None,
    ):
        super().__init__(message)
        self.code = code
        self.message = message
        self.retry_after_ms = retry_after_ms
        self.reason = reason


@dataclass(slots=True)
class Generation:
    """One admitted request: its ids now, its chunks as they are decoded."""

    request_id: str
    trace_id: str
    chunks: AsyncIterator[common_pb2.GenerationChunk]


class RequestPipeline:
    def __init__(
        self,
        auth: Authenticator,
        tenants: TenantDirectory,
        limiter: TenantRateLimiter,
        prefixes: PrefixHasher,
        schedulers: SchedulerClient,
        nodes: NodeClients,
        request_timeout_s: float,
        metrics: GatewayMetrics | None = None,
    ):
        self.metrics = metrics if metrics is not None else GatewayMetrics()
        self.auth = auth
        self.tenants = tenants
        self.limiter = limiter
        self.prefixes = prefixes
        self.schedulers = schedulers
        self.nodes = nodes
        self.request_timeout_s = request_timeout_s

    async def tenant_of(self, key: str | None) -> str:
        if key is None:
            raise PipelineError(grpc.StatusCode.UNAUTHENTICATED, MISSING_KEY)
        tenant = await self.auth.tenant_for(key)
        if tenant is None:
            raise PipelineError(grpc.StatusCode.UNAUTHENTICATED, BAD_KEY)
        return tenant

    async def list_models(self, key: str | None) -> list[common_pb2.ModelInfo]:
        await self.tenant_of(key)
        try:
            return list((await self.schedulers.list_models(LIST_MODELS_TIMEOUT_S)).models)
        except SchedulersUnreachable:
            stale = self.schedulers.stale
            if stale is not None and stale.models:
                return [common_pb2.ModelInfo(name=m) for m in stale.models]
            raise PipelineError(
                grpc.StatusCode.UNAVAILABLE,
                "the scheduler is unreachable right now; retry in a few seconds",
            ) from None
        except grpc.aio.AioRpcError as err:
            raise PipelineError(err.code(), public_details(err, "the scheduler")) from None

    async def admit(
        self,
        key: str | None,
        params: GenerateParams,
        run_id: str | None,
        timeout_s: float | None,
        arrived: float | None = None,
        sla_class: str | None = None,
    ) -> Generation:
        """Everything before the first token: authentication, validation (the run id the
        caller tagged the request with included), the tenant's policy (`sla_class`: a lower
        class the caller asks for, strata.gateway.tenant_directory) and rate. The returned
        generation's chunks route, submit and stream."""
        arrived = time.perf_counter() if arrived is None else arrived
        try:
            tenant = await self.tenant_of(key)
        except PipelineError:
            self.metrics.ended("", "", "", "rejected", "unauthenticated")
            raise
        problem = validate(params)
        if problem is None:
            try:
                run = parse_run_id(run_id)
            except PipelineError as err:
                problem = err.message
        if problem is not None:
            self.metrics.ended("", tenant, "", "rejected", "invalid")
            raise PipelineError(grpc.StatusCode.INVALID_ARGUMENT, problem)
        entry = await self.tenants.lookup(tenant)
        if entry is None:
            # Deleted through another gateway while this one still caches its key.
            self.metrics.forget_tenant(tenant)
            raise PipelineError(grpc.StatusCode.UNAUTHENTICATED, BAD_KEY)
        if sla_class:
            try:
                entry = TenantEntry(
                    await self.tenants.as_class(entry, sla_class), entry.rate_limit_rps
                )
            except ValueError as err:
                self.metrics.ended("", tenant, "", "rejected", "invalid")
                raise PipelineError(grpc.StatusCode.INVALID_ARGUMENT, str(err)) from None
            except PermissionError as err:
                self.metrics.ended("", tenant, "", "rejected", "class")
                raise PipelineError(grpc.StatusCode.PERMISSION_DENIED, str(err)) from None
        wait = self.limiter.try_acquire(tenant, entry.rate_limit_rps)
        if wait > 0:
            self.metrics.ended(
                self.model_label(params.model), tenant, entry.policy.sla_class, "rejected", "rate"
            )
            raise PipelineError(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"tenant {tenant!r} is over its request rate; retry in {wait * 1000:.0f} ms",
                str(int(wait * 1000) + 1),
                "rate",
            )
        request_id = uuid.uuid4().hex
        span = _tracer.start_span(
            names.SPAN_GATEWAY_GENERATE, record_exception=False, set_status_on_exception=False
        )
        span.set_attributes(
            {
                names.GEN_AI_SYSTEM: names.SYSTEM_NAME,
                names.GEN_AI_OPERATION: "chat" if params.messages else "text_completion",
                names.TENANT: tenant,
                names.REQUEST_ID: request_id,
                names.GEN_AI_REQUEST_MODEL: params.model,
                names.GEN_AI_REQUEST_MAX_TOKENS: params.max_tokens,
                names.GEN_AI_REQUEST_TEMPERATURE: params.temperature,
            }
        )
        if run is not None:
            span.set_attribute(names.RUN_ID, run)
        trace_id = format(span.get_span_context().trace_id, "032x")
        stream = self._stream(
            span,
            tenant,
            entry,
            params,
            request_id,
            timeout_s or self.request_timeout_s,
            Timing(arrived),
        )
        return Generation(request_id, trace_id, stream)

    async def _stream(
        self,
        span: trace.Span,
        tenant: str,
        entry: TenantEntry,
        params: GenerateParams,
        request_id: str,
        timeout_s: float,
        timing: Timing,
    ) -> AsyncIterator[common_pb2.GenerationChunk]:
        stale: ViewReplica | None = None
        finished = False  # the span carries the node's finish reason
        with trace.use_span(
            span, end_on_exit=True, record_exception=False, set_status_on_exception=False
        ):
            try:
                view = self.schedulers.stale
                hashed = (
                    None
                    if params.prompt_token_ids
                    else await self.prefixes.hash_prompt(
                        params.model,
                        tenant,
                        params.prefix_public,
                        params.prompt,
                        params.messages,
                        view.block_size(params.model) if view is not None else DEFAULT_BLOCK_SIZE,
                    )
                )
                prompt_tokens = (
                    hashed.tokens
                    if hashed is not None
                    else len(params.prompt_token_ids)
                    or estimate_tokens(params.prompt, (c for _, c in params.messages))
                )
                route, stale = await self._route(
                    span, tenant, entry, params, prompt_tokens, hashed, timeout_s
                )
                # The cluster serves this model: its tokenizer is worth loading for next time.
                self.prefixes.ensure_loading(params.model)
                span.set_attribute(names.NODE_ID, route.node_id)
                call = self.nodes.stub(route.node_address).Submit(
                    node_pb2.SubmitRequest(
                        request_id=request_id,
                        tenant=tenant,
                        spec=spec_of(params),
                        replica_id=route.replica_id,
                        kv_source_address=route.kv_source_address,
                        policy=policy_to_pb(entry.policy),
                        priority=entry.policy.priority,
                        prompt_tokens_estimate=prompt_tokens,
                        route_id=route.route_id,
                    ),
                    timeout=timeout_s,
                )
                try:
                    async for chunk in call:
                        timing.chunk(len(chunk.token_ids))
                        if chunk.finish_reason:
                            finish_attributes(span, chunk, timing)
                            finished = True
                            self._finished(params.model, entry.policy, chunk, timing)
                        yield chunk
                finally:
                    if not call.done():
                        call.cancel()
            except grpc.aio.AioRpcError as err:
                details = public_details(err, "the node serving this request")
                span.set_attribute(names.ERROR_CODE, err.code().name)
                span.set_status(Status(StatusCode.ERROR, details))
                failure = PipelineError(
                    err.code(), details, _trailer(err, names.RETRY_AFTER_METADATA)
                )
                self._failed(params.model, entry.policy, failure)
                raise failure from None
            except PipelineError as err:
                span.set_attribute(names.ERROR_CODE, err.code.name)
                span.set_status(Status(StatusCode.ERROR, err.message))
                self._failed(params.model, entry.policy, err)
                raise
            except BaseException:
                # The caller cancelled (or the server stops): record it, then let it propagate.
                if not finished:
                    span.set_attribute(names.ERROR_CODE, grpc.StatusCode.CANCELLED.name)
                    span.set_attribute(names.GEN_AI_RESPONSE_FINISH_REASONS, ["aborted"])
                    self.metrics.ended(
                        self.model_label(params.model),
                        tenant,
                        entry.policy.sla_class,
                        "cancelled",
                        "client",
                    )
                raise
            finally:
                if stale is not None and self.schedulers.stale is not None:
                    self.schedulers.stale.done(tenant, stale)

    def model_label(self, model: str) -> str:
        """`model` when the pool serves it (as last seen), else "other": a caller's typo must
        not become a metric series."""
        view = self.schedulers.stale
        return model if view is not None and model in view.models else "other"

    def _finished(
        self,
        model: str,
        policy: TenantPolicy,
        chunk: common_pb2.GenerationChunk,
        timing: Timing,
    ) -> None:
        first = timing.first if timing.first is not None else timing.last
        u = chunk.usage
        self.metrics.finished(
            self.model_label(model),
            policy,
            FINISH_NAMES[chunk.finish_reason],
            first - timing.start,
            timing.gaps,
            timing.last - timing.start,
            (u.prompt_tokens, u.completion_tokens, u.cached_prompt_tokens),
        )

    def _failed(self, model: str, policy: TenantPolicy, err: PipelineError) -> None:
        if err.code in (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.FAILED_PRECONDITION):
            outcome, reason = "rejected", err.reason or "refused"
        elif err.code == grpc.StatusCode.NOT_FOUND:
            outcome, reason = "rejected", "unknown_model"
        else:
            outcome, reason = "errored", err.code.name.lower()
        self.metrics.ended(
            self.model_label(model), policy.tenant, policy.sla_class, outcome, reason
        )

    async def _route(
        self,
        span: trace.Span,
        tenant: str,
        entry: TenantEntry,
        params: GenerateParams,
        prompt_tokens: int,
        hashed,
        timeout_s: float,
    ) -> tuple[scheduler_pb2.RouteResponse, ViewReplica | None]:
        """The scheduler's route (which also holds the tenant's request rate across gateways),
        or stale routing when no scheduler answers."""
        policy = entry.policy
        rps, burst = self.limiter.limits(entry.rate_limit_rps)
        request = scheduler_pb2.RouteRequest(
            model=params.model,
            tenant=tenant,
            prompt_tokens_estimate=prompt_tokens,
            prefix_hashes=hashed.hashes if hashed is not None else (),
            policy=policy_to_pb(policy),
            max_tokens=params.max_tokens,
            rate_limit_rps=rps,
            rate_limit_burst=burst,
        )
        try:
            return await self.schedulers.route(request, min(timeout_s, ROUTE_TIMEOUT_S)), None
        except grpc.aio.AioRpcError as err:
            stale = self.schedulers.stale
            if (
                err.code() == grpc.StatusCode.NOT_FOUND
                and stale is not None
                and params.model in stale.models
            ):
                # A scheduler that restarted has not heard from the nodes yet, while this
                # gateway saw the model served moments ago: not ready, rather than unknown.
                raise PipelineError(
                    grpc.StatusCode.UNAVAILABLE,
                    f"model {params.model!r} has no ready replica right now; "
                    f"retry in a few seconds",
                    "1000",
                ) from None
            raise PipelineError(
                err.code(),
                public_details(err, "the scheduler"),
                _trailer(err, names.RETRY_AFTER_METADATA),
                _trailer(err, names.REFUSAL_REASON_METADATA),
            ) from None
        except SchedulersUnreachable:
            pass
        stale = self.schedulers.stale
        picked = (
            stale.route(params.model, tenant, policy.guaranteed_share)
            if stale is not None
            else StaleRefusal("the scheduler is unreachable", 1000)
        )
        if isinstance(picked, StaleRefusal):
            code = (
                grpc.StatusCode.NOT_FOUND if picked.unknown_model else grpc.StatusCode.UNAVAILABLE
            )
            raise PipelineError(
                code,
                f"{picked.reason}; retry in a few seconds"
                if picked.retry_after_ms
                else picked.reason,
                str(picked.retry_after_ms) if picked.retry_after_ms else None,
            )
        span.set_attribute(names.ROUTE_STALE, True)
        return scheduler_pb2.RouteResponse(
            node_id=picked.node_id, node_address=picked.node_address, replica_id=picked.replica_id
        ), picked

    async def close(self) -> None:
        await self.prefixes.close()
        await self.nodes.close()
        await self.schedulers.close()


def parse_run_id(raw: str | None) -> int | None:
    """The evaluation run id from `x-strata-run-id` (None: untagged); PipelineError if it is
    not a positive integer."""
    if raw is None:
        return None
    if raw.isdecimal() and 0 < int(raw) < 2**63:
        return int(raw)
    raise PipelineError(
        grpc.StatusCode.INVALID_ARGUMENT,
        f"{names.RUN_ID_METADATA} must be the positive run id that "
        f"Metrics.StartRun returned, got {raw!r}",
    )


def _trailer(err: grpc.aio.AioRpcError, name: str) -> str | None:
    """A trailer a refusal downstream carried (its retry-after-ms hint, its reason), to hand
    on to the caller."""
    for key, value in err.trailing_metadata() or ():
        if key == name:
            return value.decode() if isinstance(value, bytes) else value
    return None


def spec_of(p: GenerateParams) -> common_pb2.GenerationSpec:
    sampling = common_pb2.SamplingParams(
        temperature=p.temperature,
        top_p=p.top_p,
        top_k=p.top_k,
        repetition_penalty=p.repetition_penalty,
        min_p=p.min_p,
        frequency_penalty=p.frequency_penalty,
        presence_penalty=p.presence_penalty,
        logprobs=p.logprobs,
        stop_token_ids=list(p.stop_token_ids),
        ignore_eos=p.ignore_eos,
    )
    if p.seed is not None:
        sampling.seed = p.seed
    return common_pb2.GenerationSpec(
        model=p.model,
        prompt=p.prompt,
        messages=[common_pb2.ChatMessage(role=r, content=c) for r, c in p.messages],
        sampling=sampling,
        max_tokens=p.max_tokens,
        stop=p.stop,
        prefix_public=p.prefix_public,
        sparse=p.sparse,
        prompt_token_ids=list(p.prompt_token_ids),
    )
