"""The replan loop: read the cluster from the scheduler, plan, apply the diff through node managers.

One round: ListNodes + ListModels from the scheduler, strata.policy.placement.plan_placement over
the heartbeated replicas, UnloadModel then LoadModel on the node managers (unloads first, since
the plan counted their memory as free). A node that fails a call is logged with its id and simply
shows up again as a difference next round. The planner remembers which replicas it placed, so it
unloads only those and surplus replicas of its own models, never replicas someone else loaded.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import grpc
from opentelemetry import trace

from services.placement import convert
from strata.defaults import NODE_TTL_S
from strata.policy.clock import Clock
from strata.policy.model_sizes import model_memory_bytes
from strata.policy.placement import (
    Assignment,
    ModelDemand,
    NodeCapacity,
    PlacementPlan,
    Replica,
    Unload,
    plan_placement,
)
from strata.rpc.server import channel
from strata.rpc.v1 import common_pb2, node_pb2, node_pb2_grpc, scheduler_pb2, scheduler_pb2_grpc
from strata.telemetry import names

log = logging.getLogger(__name__)


class SchedulerUnavailable(Exception):
    """The scheduler did not answer, so there is no cluster view to plan from."""


@dataclass(slots=True, frozen=True)
class PlanSnapshot:
    version: int             # bumps when the assignments or unplaced models change
    created_unix_ms: int     # when this version first appeared
    plan: PlacementPlan


@dataclass(slots=True, frozen=True)
class _Pending:
    model: str
    expires_at: float


class NodeClients:
    """One channel per node manager address, reused across rounds."""

    def __init__(self) -> None:
        self._channels: dict[str, grpc.aio.Channel] = {}

    def stub(self, address: str) -> node_pb2_grpc.NodeManagerStub:
        if address not in self._channels:
            self._channels[address] = channel(address)
        return node_pb2_grpc.NodeManagerStub(self._channels[address])

    async def close(self) -> None:
        for ch in self._channels.values():
            await ch.close()
        self._channels.clear()


class Planner:
    def __init__(self, *, scheduler: scheduler_pb2_grpc.SchedulerStub, scheduler_addr: str,
                 nodes: NodeClients, models: Sequence[str], replicas: Mapping[str, int],
                 memory_overrides: Mapping[str, int], clock: Clock, rpc_timeout_s: float = 5.0,
                 load_timeout_s: float = 300.0, drain_timeout_ms: int = 30_000,
                 pending_grace_s: float = NODE_TTL_S, tracer: trace.Tracer | None = None,
                 wall_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        self._scheduler = scheduler
        self._scheduler_addr = scheduler_addr
        self._nodes = nodes
        self._models = tuple(models)
        self._replicas = {m: replicas.get(m, 1) for m in self._models}
        self._overrides = dict(memory_overrides)
        self._clock = clock
        self._rpc_timeout_s = rpc_timeout_s
        self._load_timeout_s = load_timeout_s
        self._drain_timeout_ms = drain_timeout_ms
        self._pending_grace_s = pending_grace_s
        self._tracer = tracer or trace.get_tracer(__name__)
        self._wall_ms = wall_ms
        self._lock = asyncio.Lock()
        self._managed: set[tuple[str, str]] = set()            # (node id, replica id) we placed
        # Loaded but not yet in a heartbeat: counted as present so the next round does not load
        # the same replica again.
        self._pending: dict[tuple[str, str], _Pending] = {}
        self.latest: PlanSnapshot | None = None

    def memory_need(self, model: str, advertised: Mapping[str, int]) -> int | None:
        """Override or table first (known before loading), then what a node measured."""
        return model_memory_bytes(model, self._overrides) or advertised.get(model)

    async def replan(self) -> PlanSnapshot:
        """One round; raises SchedulerUnavailable when there is no cluster view."""
        async with self._lock:
            with self._tracer.start_as_current_span(names.SPAN_PLACEMENT_REPLAN):
                nodes, advertised = await self._read_cluster()
                self._forget_settled_pending(nodes)
                plan = plan_placement(
                    [self._capacity(n, advertised) for n in nodes],
                    [ModelDemand(m, self.memory_need(m, advertised), self._replicas[m])
                     for m in self._models])
                addresses = {n.node_id: n.address for n in nodes}
                await asyncio.gather(*(self._unload(u, addresses[u.node_id]) for u in plan.unloads))
                await asyncio.gather(*(self._load(a, addresses[a.node_id]) for a in plan.loads))
                return self._publish(plan, advertised)

    async def run_until(self, stop: asyncio.Event, every_s: float) -> None:
        """Replan every `every_s` seconds until `stop` is set; a silent scheduler is logged."""
        while not stop.is_set():
            try:
                await self.replan()
            except SchedulerUnavailable as err:
                log.warning("replan skipped: %s", err)
            try:
                await asyncio.wait_for(stop.wait(), timeout=every_s)
            except TimeoutError:
                pass

    async def _read_cluster(self) -> tuple[list[common_pb2.NodeInfo], dict[str, int]]:
        try:
            listed = await self._scheduler.ListNodes(scheduler_pb2.ListNodesRequest(),
                                                     timeout=self._rpc_timeout_s)
            served = await self._scheduler.ListModels(common_pb2.ListModelsRequest(),
                                                      timeout=self._rpc_timeout_s)
        except grpc.aio.AioRpcError as err:
            raise SchedulerUnavailable(
                f"the scheduler at {self._scheduler_addr} did not answer ({err.code().name}: "
                f"{err.details()}); check STRATA_SCHEDULER_ADDR and that the scheduler runs"
            ) from None
        advertised = {m.name: m.memory_bytes for m in served.models if m.memory_bytes > 0}
        return list(listed.nodes), advertised

    def _capacity(self, node: common_pb2.NodeInfo, advertised: Mapping[str, int]) -> NodeCapacity:
        extra = tuple(Replica(p.model, rid, self.memory_need(p.model, advertised) or 0,
                              managed=True)
                      for (nid, rid), p in sorted(self._pending.items()) if nid == node.node_id)
        return convert.node_capacity(node, lambda m: self.memory_need(m, advertised) or 0,
                                     self._managed, extra)

    def _forget_settled_pending(self, nodes: Sequence[common_pb2.NodeInfo]) -> None:
        now = self._clock.now()
        live = {n.node_id for n in nodes}
        seen = {(n.node_id, r.replica_id) for n in nodes for r in n.replicas}
        self._pending = {k: p for k, p in self._pending.items()
                         if k[0] in live and k not in seen and p.expires_at > now}

    async def _load(self, a: Assignment, address: str) -> None:
        try:
            reply = await self._nodes.stub(address).LoadModel(
                node_pb2.LoadModelRequest(model=a.model, replica_id=a.replica_id),
                timeout=self._load_timeout_s)
        except grpc.aio.AioRpcError as err:
            log.warning("node %s at %s: LoadModel %s (replica %s) failed (%s: %s); retrying next "
                        "round", a.node_id, address, a.model, a.replica_id, err.code().name,
                        err.details())
            return
        replica_id = reply.replica.replica_id or a.replica_id
        self._managed.add((a.node_id, replica_id))
        self._pending[(a.node_id, replica_id)] = _Pending(
            a.model, self._clock.now() + self._pending_grace_s)
        log.info("node %s: loading %s as replica %s (%s)", a.node_id, a.model, replica_id, a.reason)

    async def _unload(self, u: Unload, address: str) -> None:
        try:
            reply = await self._nodes.stub(address).UnloadModel(
                node_pb2.UnloadModelRequest(model=u.model, replica_id=u.replica_id,
                                            drain_timeout_ms=self._drain_timeout_ms),
                timeout=self._rpc_timeout_s + self._drain_timeout_ms / 1000)
        except grpc.aio.AioRpcError as err:
            log.warning("node %s at %s: UnloadModel %s (replica %s) failed (%s: %s); retrying "
                        "next round", u.node_id, address, u.model, u.replica_id, err.code().name,
                        err.details())
            return
        self._managed.discard((u.node_id, u.replica_id))
        self._pending.pop((u.node_id, u.replica_id), None)
        log.info("node %s: unloaded %d replica(s) of %s, replica %s (%s)", u.node_id,
                 reply.unloaded, u.model, u.replica_id, u.reason)

    def _publish(self, plan: PlacementPlan, advertised: Mapping[str, int]) -> PlanSnapshot:
        previous = self.latest
        if previous is not None and _shape(previous.plan) == _shape(plan):
            self.latest = PlanSnapshot(previous.version, previous.created_unix_ms, plan)
            return self.latest
        self.latest = PlanSnapshot((previous.version if previous else 0) + 1, self._wall_ms(), plan)
        log.info("plan v%d: %s", self.latest.version,
                 ", ".join(f"{a.model}@{a.node_id}" for a in plan.assignments) or "empty")
        for u in plan.unplaced:
            hint = ("; set STRATA_MODEL_MEMORY_BYTES=<name>=<bytes>"
                    if self.memory_need(u.model, advertised) is None else "")
            log.warning("cannot place %d replica(s) of %s: %s%s", u.missing, u.model, u.reason, hint)
        return self.latest


def _shape(plan: PlacementPlan) -> tuple:
    """What a plan decides, without the reasons (which change from 'placed' to 'kept')."""
    return (tuple((a.model, a.node_id, a.replica_id) for a in plan.assignments),
            tuple((u.model, u.missing) for u in plan.unplaced))
