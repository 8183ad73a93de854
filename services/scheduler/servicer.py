"""Scheduler servicer: heartbeats into the NodeRegistry, KV events into the PrefixIndex, Route
through the GlobalScheduler (admission, routing, SLA check), status codes."""

from __future__ import annotations

import asyncio
import logging
import math
import secrets
import time

import grpc
from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from services.scheduler import convert
from services.scheduler.prom import RouteMetrics
from services.scheduler.refusal_span import estimate_attributes
from strata.core.tenant_policy_pb import policy_from_pb
from strata.policy.kv_index import PrefixIndex
from strata.policy.lease import LeaseTable
from strata.policy.registry import NodeRegistry
from strata.policy.routing import MissKind, Router
from strata.policy.scheduling.admission import Refusal
from strata.policy.scheduling.arrivals import ARRIVALS_WINDOW_S, MAX_ARRIVALS
from strata.policy.scheduling.global_scheduler import (
    INFEASIBLE,
    GlobalScheduler,
    RateLimit,
    SchedulerSettings,
)
from strata.policy.scheduling.ledger import PoolLedger
from strata.telemetry import names
from strata.v1 import common_pb2, scheduler_pb2, scheduler_pb2_grpc

log = logging.getLogger(__name__)


class SchedulerServicer(scheduler_pb2_grpc.SchedulerServicer):
    def __init__(
        self,
        registry: NodeRegistry,
        router: Router,
        heartbeat_interval_s: float,
        tracer: trace.Tracer | None = None,
        index: PrefixIndex | None = None,
        settings: SchedulerSettings = SchedulerSettings(),
        metrics: RouteMetrics | None = None,
        leases: LeaseTable | None = None,
    ) -> None:
        self.metrics = metrics if metrics is not None else RouteMetrics()
        self._registry = registry
        self._router = router
        self._index = index if index is not None else PrefixIndex()
        self._leases = leases if leases is not None else LeaseTable(registry.clock)
        prefix = f"{secrets.token_hex(4)}-"  # this process's route ids
        self._scheduler = GlobalScheduler(
            registry, router, PoolLedger(), self._index, settings, route_prefix=prefix
        )
        self._interval_ms = round(heartbeat_interval_s * 1000)
        self._block_sizes: dict[str, int] = {}  # model -> first KV block size reported
        self._mismatches: set[tuple[str, int]] = set()
        self._tracer = tracer or trace.get_tracer(__name__)

    async def Heartbeat(
        self, request: scheduler_pb2.HeartbeatRequest, context: grpc.aio.ServicerContext
    ) -> scheduler_pb2.HeartbeatResponse:
        problem = _heartbeat_problem(request)
        if problem:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        node = request.node
        if self._registry.get(node.node_id) is None:
            log.info(
                "node %s joined at %s (%d bytes, %s)",
                node.node_id,
                node.address,
                node.memory_bytes,
                node.device or "device unknown",
            )
        self._registry.heartbeat(convert.node_from_pb(node, request.models, request.arrived_routes))
        self._check_block_sizes(node)
        return scheduler_pb2.HeartbeatResponse(heartbeat_interval_ms=self._interval_ms)

    def _check_block_sizes(self, node: common_pb2.NodeInfo) -> None:
        """A model's replicas must share one KV block size (strata.core.blocks): say so, once
        per model and size, when one reports another."""
        for r in node.replicas:
            if not r.kv_block_size:
                continue
            first = self._block_sizes.setdefault(r.model, r.kv_block_size)
            if r.kv_block_size != first and (r.model, r.kv_block_size) not in self._mismatches:
                self._mismatches.add((r.model, r.kv_block_size))
                log.warning(
                    "replica %s of %s on node %s uses KV blocks of %d tokens, other "
                    "replicas of the model %d: prefix routing matches only replicas "
                    "of the size most report; give every worker of a model the same "
                    "STRATA_BLOCK_SIZE",
                    r.replica_id,
                    r.model,
                    node.node_id,
                    r.kv_block_size,
                    first,
                )

    async def Route(
        self, request: scheduler_pb2.RouteRequest, context: grpc.aio.ServicerContext
    ) -> scheduler_pb2.RouteResponse:
        if not request.model:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                "model is required: name one of the models from ListModels",
            )
        if request.prompt_tokens_estimate < 0:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"prompt_tokens_estimate must be >= 0, got {request.prompt_tokens_estimate}",
            )
        if request.max_tokens < 0:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"max_tokens must be >= 0, got {request.max_tokens}",
            )
        try:
            policy = policy_from_pb(request.policy, request.tenant)
        except ValueError as err:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
        rate = None
        if request.rate_limit_rps:
            try:
                rate = RateLimit.of(request.rate_limit_rps, request.rate_limit_burst)
            except ValueError as err:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
        with self._tracer.start_as_current_span(names.SPAN_SCHEDULER_ROUTE) as span:
            span.set_attribute(names.TENANT, request.tenant)
            span.set_attribute(names.GEN_AI_REQUEST_MODEL, request.model)
            span.set_attribute(names.SLA_CLASS, policy.sla_class)
            span.set_attribute(names.PRIORITY, policy.priority)
            began = time.perf_counter()
            decision = self._scheduler.route(
                request.model,
                policy,
                request.prompt_tokens_estimate,
                request.max_tokens,
                request.prefix_hashes,
                rate,
            )
            took = time.perf_counter() - began
            if isinstance(decision, Refusal):
                self.metrics.decided("refused", decision.reason, took)
                # Waiting does not help an infeasible request: no hint, not "exhausted".
                code = (
                    grpc.StatusCode.FAILED_PRECONDITION
                    if decision.reason == INFEASIBLE
                    else grpc.StatusCode.RESOURCE_EXHAUSTED
                )
                span.set_attribute(names.ERROR_CODE, code.name)
                span.set_attribute(names.ROUTE_REFUSED, decision.reason)
                if decision.estimate is not None:
                    span.set_attributes(estimate_attributes(decision.estimate))
                span.set_status(Status(StatusCode.ERROR, decision.message))
                trailers = [(names.REFUSAL_REASON_METADATA, decision.reason)]
                if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
                    hint = str(int(decision.retry_after_s * 1000) + 1)
                    trailers.append((names.RETRY_AFTER_METADATA, hint))
                context.set_trailing_metadata(tuple(trailers))
                message = decision.message
            elif decision is not None:
                self.metrics.decided("routed", "", took)
                span.set_attribute(names.NODE_ID, decision.node_id)
                span.set_attribute(names.REPLICA_ID, decision.replica_id)
                span.set_attribute(names.ROUTE_PROMPT_BLOCKS, len(request.prefix_hashes))
                span.set_attribute(names.ROUTE_CACHED_BLOCKS, decision.cached_blocks)
                span.set_attribute(names.ROUTE_ESTIMATED_TTFT_MS, decision.estimated_ttft_ms)
                if decision.admitted_by is not None:
                    span.set_attributes(estimate_attributes(decision.admitted_by))
                reply = scheduler_pb2.RouteResponse(
                    node_id=decision.node_id,
                    node_address=decision.address,
                    replica_id=decision.replica_id,
                    cached_blocks=decision.cached_blocks,
                    estimated_ttft_ms=decision.estimated_ttft_ms,
                    route_id=decision.route_id,
                )
                if decision.kv_source is not None:
                    reply.kv_source_address = decision.kv_source.address
                    reply.kv_source_blocks = decision.kv_source.blocks
                    span.set_attribute(names.ROUTE_KV_SOURCE, decision.kv_source.address)
                    span.set_attribute(names.ROUTE_KV_SOURCE_BLOCKS, decision.kv_source.blocks)
                return reply
            else:
                miss = self._scheduler.explain_miss(request.model)
                code = (
                    grpc.StatusCode.NOT_FOUND
                    if miss.kind is MissKind.UNKNOWN_MODEL
                    else grpc.StatusCode.UNAVAILABLE
                )
                message = miss.message
                self.metrics.decided(code.name.lower(), "", took)
                span.set_attribute(names.ERROR_CODE, code.name)
                span.set_status(Status(StatusCode.ERROR, message))
        await context.abort(code, message)

    async def ReportKVEvents(
        self, request: scheduler_pb2.KVEventsRequest, context: grpc.aio.ServicerContext
    ) -> scheduler_pb2.KVEventsResponse:
        if not request.node_id:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                "node_id is required: set it to the node id this node's manager "
                "sends in its heartbeats",
            )
        need_reset = self._index.apply(
            request.node_id,
            request.store_address,
            request.sequence,
            request.reset,
            request.stored,
            request.removed,
        )
        if need_reset:
            log.info(
                "KV events from node %s out of step (report %d): asked for its whole block set",
                request.node_id,
                request.sequence,
            )
        return scheduler_pb2.KVEventsResponse(need_reset=need_reset)

    async def AcquireLease(
        self, request: scheduler_pb2.LeaseRequest, context: grpc.aio.ServicerContext
    ) -> scheduler_pb2.LeaseResponse:
        if not request.name or not request.holder:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                "name and holder are required: the lease's name and the caller's own stable id",
            )
        if not (math.isfinite(request.ttl_s) and request.ttl_s >= 0):
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"ttl_s must be > 0 to acquire or 0 to release, got {request.ttl_s}",
            )
        if request.ttl_s == 0:
            self._leases.release(request.name, request.holder)
            return scheduler_pb2.LeaseResponse(granted=False)
        grant = self._leases.acquire(request.name, request.holder, request.ttl_s)
        return scheduler_pb2.LeaseResponse(
            granted=grant.granted, holder=grant.holder, remaining_s=grant.remaining_s
        )

    async def ListNodes(
        self, request: scheduler_pb2.ListNodesRequest, context: grpc.aio.ServicerContext
    ) -> scheduler_pb2.ListNodesResponse:
        return scheduler_pb2.ListNodesResponse(
            nodes=[convert.node_to_pb(n) for n in self._registry.nodes()]
        )

    async def ListModels(
        self, request: common_pb2.ListModelsRequest, context: grpc.aio.ServicerContext
    ) -> common_pb2.ListModelsResponse:
        return common_pb2.ListModelsResponse(
            models=[convert.model_to_pb(m) for m in self._registry.models()]
        )

    async def expire_until(self, stop: asyncio.Event, every_s: float) -> None:
        """Drop silent nodes from memory every `every_s` until `stop` is set.

        Routing already ignores silent nodes at read time; this only frees their entries (their
        KV blocks in the prefix index too) and logs the departure once.
        """
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), timeout=every_s)
            except TimeoutError:
                for node_id in self._registry.expire():
                    self._index.forget(node_id)
                    log.warning(
                        "node %s left: no heartbeat for over %.1fs", node_id, self._registry.ttl_s
                    )
                # A store whose node never heartbeats must not keep its blocks here forever;
                # if its node appears later, the store's next report is answered need_reset.
                live = {n.node_id for n in self._registry.nodes()}
                for node_id in self._index.node_ids():
                    if node_id not in live:
                        self._index.forget(node_id)


def _heartbeat_problem(request: scheduler_pb2.HeartbeatRequest) -> str | None:
    node = request.node
    if not node.node_id:
        return "node.node_id is required: set it to a name unique to this node manager"
    if not node.address:
        return (
            f"node.address is required for node {node.node_id}: set it to the host:port "
            f"its node manager listens on"
        )
    if node.memory_bytes < 0:
        return f"node.memory_bytes of node {node.node_id} must be >= 0, got {node.memory_bytes}"
    for r in node.replicas:
        if not r.model or not r.replica_id:
            return (
                f"node {node.node_id} reports a replica without a model or replica_id "
                f"(model={r.model!r}, replica_id={r.replica_id!r}); every replica needs both"
            )
    for m in request.models:
        if not m.name:
            return f"node {node.node_id} advertises a model without a name"
    if len(request.arrived_routes) > MAX_ARRIVALS:
        return (
            f"node {node.node_id} lists {len(request.arrived_routes)} arrived routes, more than "
            f"{MAX_ARRIVALS}: list only those received in the last {ARRIVALS_WINDOW_S:g} s"
        )
    return None
