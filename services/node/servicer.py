"""NodeManager gRPC servicer: admits requests to this node's decode workers, loads models."""

from __future__ import annotations

import grpc
from opentelemetry import trace

from services.node.config import NodeConfig
from strata.node.replicas import Replica, ReplicaSet, State
from strata.rpc.v1 import common_pb2, node_pb2, node_pb2_grpc, worker_pb2
from strata.telemetry import names

_STATE = {State.LOADING: common_pb2.REPLICA_STATE_LOADING,
          State.READY: common_pb2.REPLICA_STATE_READY,
          State.DRAINING: common_pb2.REPLICA_STATE_DRAINING,
          State.FAILED: common_pb2.REPLICA_STATE_FAILED}
# Worker errors the caller caused pass through; anything else means the worker failed.
_PASS_THROUGH = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.DEADLINE_EXCEEDED,
                 grpc.StatusCode.CANCELLED, grpc.StatusCode.RESOURCE_EXHAUSTED}

_tracer = trace.get_tracer("strata.node")


class NodeManagerServicer(node_pb2_grpc.NodeManagerServicer):
    def __init__(self, cfg: NodeConfig, replicas: ReplicaSet):
        self.cfg = cfg
        self.replicas = replicas

    async def Submit(self, request: node_pb2.SubmitRequest, context: grpc.aio.ServicerContext):
        model = request.spec.model
        replica = self.replicas.pick(model, request.replica_id)
        if replica is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE,
                                f"node {self.cfg.node_id} has no ready replica of {model!r}; "
                                f"retry, the scheduler will route elsewhere")
        replica.in_flight += 1
        call = None
        try:
            with _tracer.start_as_current_span(names.SPAN_NODE_SUBMIT) as span:
                span.set_attribute(names.NODE_ID, self.cfg.node_id)
                span.set_attribute(names.REPLICA_ID, replica.replica_id)
                span.set_attribute(names.TENANT, request.tenant)
                call = replica.stub.Generate(worker_pb2.WorkerGenerateRequest(
                    request_id=request.request_id, tenant=request.tenant,
                    priority=request.priority, spec=request.spec,
                    kv_source_address=request.kv_source_address),
                    timeout=context.time_remaining())
                async for chunk in call:
                    yield chunk
        except grpc.aio.AioRpcError as err:
            code = err.code() if err.code() in _PASS_THROUGH else grpc.StatusCode.UNAVAILABLE
            await context.abort(code, f"worker {replica.replica_id} on node {self.cfg.node_id}: "
                                      f"{err.details()}")
        finally:
            replica.in_flight -= 1
            if call is not None and not call.done():
                call.cancel()  # the caller went away: stop the worker's generation too

    async def LoadModel(self, request: node_pb2.LoadModelRequest,
                        context: grpc.aio.ServicerContext) -> node_pb2.LoadModelResponse:
        if not request.model:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "model is required")
        replica = self.replicas.load(request.model, request.replica_id)
        return node_pb2.LoadModelResponse(replica=replica_to_pb(replica))

    async def UnloadModel(self, request: node_pb2.UnloadModelRequest,
                          context: grpc.aio.ServicerContext) -> node_pb2.UnloadModelResponse:
        if not request.model:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "model is required")
        drain = request.drain_timeout_ms / 1000 if request.drain_timeout_ms > 0 else 30.0
        n = await self.replicas.unload(request.model, request.replica_id, drain)
        return node_pb2.UnloadModelResponse(unloaded=n)

    async def GetNodeStatus(self, request: node_pb2.GetNodeStatusRequest,
                            context: grpc.aio.ServicerContext) -> common_pb2.NodeInfo:
        await self.replicas.refresh_ready()  # live figures, not the last heartbeat's
        return node_info(self.cfg, self.replicas)


def replica_to_pb(r: Replica) -> common_pb2.ReplicaInfo:
    s = r.stats
    return common_pb2.ReplicaInfo(
        model=r.model, replica_id=r.replica_id, state=_STATE[r.state], worker_address=r.address,
        running_requests=s.running, waiting_requests=s.waiting, queued_tokens=s.queued_tokens,
        kv_blocks_total=s.blocks_total, kv_blocks_free=s.blocks_free,
        waiting_for_memory=s.waiting_for_memory)


def node_info(cfg: NodeConfig, replicas: ReplicaSet) -> common_pb2.NodeInfo:
    return common_pb2.NodeInfo(
        node_id=cfg.node_id, address=cfg.advertise, memory_bytes=cfg.memory_bytes,
        device=cfg.device, replicas=[replica_to_pb(r) for r in replicas.replicas.values()])
