"""NodeManager gRPC servicer: admits requests to this node's decode workers through the node's
fair queue and time slots (strata.node.dispatcher), loads models."""

from __future__ import annotations

import grpc
from opentelemetry import trace

from services.node.config import NodeConfig
from strata.core.tenant_policy import TenantPolicy
from strata.core.tenant_policy_pb import policy_from_pb
from strata.core.tokens import estimate_tokens
from strata.node.dispatcher import Dispatcher, NoReplica
from strata.node.failover import WorkerLost, generate_with_failover
from strata.node.replicas import Replica, ReplicaSet, State
from strata.policy.clock import WallClock
from strata.policy.scheduling.arrivals import MAX_ROUTE_ID_CHARS
from strata.policy.scheduling.delays import ClassDelays
from strata.policy.scheduling.fair_queue import QUEUES, QueueItem
from strata.policy.scheduling.slo import DecodeLoad
from strata.rpc.convert import (
    class_delays_to_pb,
    class_tokens_to_pb,
    step_line_to_pb,
    tenant_load_to_pb,
)
from strata.telemetry import names
from strata.v1 import common_pb2, node_pb2, node_pb2_grpc, worker_pb2

_STATE = {
    State.LOADING: common_pb2.REPLICA_STATE_LOADING,
    State.READY: common_pb2.REPLICA_STATE_READY,
    State.DRAINING: common_pb2.REPLICA_STATE_DRAINING,
    State.FAILED: common_pb2.REPLICA_STATE_FAILED,
    State.STANDBY: common_pb2.REPLICA_STATE_STANDBY,
}
# Worker errors the caller caused pass through, and so does INTERNAL from a living worker: the
# engine stopped that request alone, and a retry would fail the same way. Anything else means
# the worker failed.
_PASS_THROUGH = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.INTERNAL,
}


_tracer = trace.get_tracer("strata.node")


class NodeManagerServicer(node_pb2_grpc.NodeManagerServicer):
    def __init__(self, cfg: NodeConfig, replicas: ReplicaSet, dispatcher: Dispatcher | None = None):
        self.cfg = cfg
        self.replicas = replicas
        clock = WallClock()
        self.dispatcher = dispatcher or Dispatcher(replicas, QUEUES[cfg.node_queue](clock), clock)

    async def Submit(self, request: node_pb2.SubmitRequest, context: grpc.aio.ServicerContext):
        model = request.spec.model
        if len(request.route_id) > MAX_ROUTE_ID_CHARS:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"route_id has {len(request.route_id)} characters, more than "
                f"{MAX_ROUTE_ID_CHARS}: pass the RouteResponse.route_id unchanged",
            )
        # From here on this node's reports account for the request (queued, running, done or
        # refused): its scheduler stops counting it once a heartbeat lists the route.
        self.dispatcher.arrivals.received(request.route_id, self.dispatcher.clock.now())
        if self.replicas.pick(model, request.replica_id) is None:
            await context.abort(
                grpc.StatusCode.UNAVAILABLE,
                f"node {self.cfg.node_id} has no ready replica of {model!r}; "
                f"retry, the scheduler will route elsewhere",
            )
        try:
            policy = policy_from_pb(request.policy, request.tenant, request.priority)
        except ValueError as err:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
        item = queue_item(request, policy)
        with _tracer.start_as_current_span(names.SPAN_NODE_SUBMIT) as span:
            span.set_attribute(names.NODE_ID, self.cfg.node_id)
            span.set_attribute(names.TENANT, request.tenant)
            try:
                with _tracer.start_as_current_span(names.SPAN_NODE_QUEUE) as waited:
                    waited.set_attributes(
                        {
                            names.TENANT: request.tenant,
                            names.SLA_CLASS: policy.sla_class,
                            names.PRIORITY: policy.priority,
                        }
                    )
                    lease = await self.dispatcher.acquire(item)  # a cancel leaves the queue
                    waited.set_attribute(names.REPLICA_ID, lease.replica.replica_id)
            except ValueError as err:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
            except NoReplica as err:
                await context.abort(
                    grpc.StatusCode.UNAVAILABLE,
                    f"node {self.cfg.node_id}: {err}; retry, the scheduler will route elsewhere",
                )
            replica = lease.replica
            span.set_attribute(names.REPLICA_ID, replica.replica_id)
            call = None
            try:
                call = generate_with_failover(
                    self.replicas,
                    replica,
                    worker_pb2.WorkerGenerateRequest(
                        request_id=request.request_id,
                        tenant=request.tenant,
                        priority=lease.priority,
                        spec=request.spec,
                        kv_source_address=request.kv_source_address,
                        tpot_ms=lease.item.tpot_ms or 0.0,
                        ttft_ms=lease.item.ttft_ms or 0.0,
                    ),
                    context.time_remaining(),
                    node_id=self.cfg.node_id,
                )
                first = True
                async for chunk in call:
                    if first and chunk.token_ids:
                        first = False
                        self.dispatcher.first_token(lease)
                    if chunk.HasField("usage"):  # the wait for a slot is queueing too
                        chunk.usage.queue_ms += lease.queued_s * 1000.0
                    yield chunk
            except WorkerLost as err:
                await context.abort(grpc.StatusCode.UNAVAILABLE, str(err))
            except grpc.aio.AioRpcError as err:
                code = err.code() if err.code() in _PASS_THROUGH else grpc.StatusCode.UNAVAILABLE
                await context.abort(
                    code, f"worker {replica.replica_id} on node {self.cfg.node_id}: {err.details()}"
                )
            finally:
                try:
                    if call is not None:
                        await call.aclose()  # the caller went away: stop the worker too
                finally:
                    self.dispatcher.release(lease)

    async def LoadModel(
        self, request: node_pb2.LoadModelRequest, context: grpc.aio.ServicerContext
    ) -> node_pb2.LoadModelResponse:
        if not request.model:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "model is required")
        replica = self.replicas.load(request.model, request.replica_id)
        return node_pb2.LoadModelResponse(replica=replica_to_pb(replica))

    async def UnloadModel(
        self, request: node_pb2.UnloadModelRequest, context: grpc.aio.ServicerContext
    ) -> node_pb2.UnloadModelResponse:
        if not request.model:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "model is required")
        drain = request.drain_timeout_ms / 1000 if request.drain_timeout_ms > 0 else 30.0
        n = await self.replicas.unload(request.model, request.replica_id, drain)
        return node_pb2.UnloadModelResponse(unloaded=n)

    async def GetNodeStatus(
        self, request: node_pb2.GetNodeStatusRequest, context: grpc.aio.ServicerContext
    ) -> common_pb2.NodeInfo:
        await self.replicas.refresh_ready()  # live figures, not the last heartbeat's
        return node_info(self.cfg, self.replicas, self.dispatcher)


def queue_item(request: node_pb2.SubmitRequest, policy: TenantPolicy) -> QueueItem:
    spec = request.spec
    prompt = request.prompt_tokens_estimate
    if prompt <= 0:  # the gateway's own fallback
        prompt = len(spec.prompt_token_ids) or estimate_tokens(
            spec.prompt, (m.content for m in spec.messages)
        )
    return QueueItem(
        request.request_id,
        policy.tenant,
        spec.model,
        policy.priority,
        prompt,
        spec.max_tokens,
        policy.weight,
        policy.ttft_ms,
        request.replica_id,
        policy.tpot_ms,
    )


def replica_to_pb(
    r: Replica,
    tokens_per_s: float = 0.0,
    slots: DecodeLoad = DecodeLoad(),
    turnover_s: float = 0.0,
    delays: ClassDelays = (),
) -> common_pb2.ReplicaInfo:
    s = r.stats
    return common_pb2.ReplicaInfo(
        model=r.model,
        replica_id=r.replica_id,
        state=_STATE[r.state],
        worker_address=r.address,
        running_requests=s.running,
        waiting_requests=s.waiting,
        queued_tokens=s.queued_tokens,
        queued_by_class=class_tokens_to_pb(s.queued_by_class),
        kv_blocks_total=s.blocks_total,
        kv_blocks_free=s.blocks_free,
        waiting_for_memory=s.waiting_for_memory,
        tokens_per_s=tokens_per_s,
        max_seqs=s.max_seqs,
        kv_block_size=s.block_size,
        **step_line_to_pb(s.step_line),
        slot_requests=slots.seqs,
        slot_context_tokens=slots.context_tokens,
        slot_tightest_tpot_ms=slots.tightest_tpot_ms or 0.0,
        slot_turnover_s=turnover_s,
        max_batched_tokens=s.max_batched_tokens,
        step_allowance_ms=s.step_allowance_ms,
        **class_delays_to_pb(delays),
    )


def node_info(
    cfg: NodeConfig, replicas: ReplicaSet, dispatcher: Dispatcher | None = None
) -> common_pb2.NodeInfo:
    """The node as heartbeats and GetNodeStatus report it; per-tenant loads and measured
    replica rates come from the dispatcher (absent without one)."""
    if dispatcher is None:
        infos, tenants = [replica_to_pb(r) for r in replicas.replicas.values()], []
    else:
        dispatcher.forget_gone()
        infos = [
            replica_to_pb(
                r,
                dispatcher.tokens_per_s(r),
                dispatcher.slots.load(r.replica_id),
                dispatcher.slots.turnover_s(r.replica_id),
                dispatcher.class_delays(r),
            )
            for r in replicas.replicas.values()
        ]
        tenants = [tenant_load_to_pb(t) for t in dispatcher.tenant_loads()]
    return common_pb2.NodeInfo(
        node_id=cfg.node_id,
        address=cfg.advertise,
        memory_bytes=cfg.node_memory_bytes,
        device=cfg.device,
        replicas=infos,
        tenants=tenants,
        standby_workers=replicas.warm_standbys(),
    )
