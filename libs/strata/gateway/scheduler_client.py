"""The gateway's side of level-1 scheduling: one or more schedulers, and what to do without them.

Route and ListModels go to the scheduler that answered last, then to the others in turn when
it is unreachable (the transport failed: down, restarting, partitioned). The view refresh asks
the first scheduler listed first, so every gateway returns to it once it answers again: the
gateways route through one scheduler while it is up, and the tenants' request rates it holds
(strata.policy.scheduling.global_scheduler) are one limit across them. A scheduler's own
answer (NOT_FOUND, RESOURCE_EXHAUSTED, UNAVAILABLE for no ready replica) is final and raised
as is. When none is reachable, `SchedulersUnreachable` tells the caller to fall back to stale
routing (strata.policy.scheduling.stale_routing), whose view of the pool `refresh_forever`
keeps current from ListNodes while a scheduler answers.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

import grpc

from strata.gateway.errors import is_transport_error
from strata.policy.scheduling.stale_routing import StaleRouter, ViewReplica
from strata.rpc.channels import mux_channel
from strata.v1 import common_pb2, scheduler_pb2, scheduler_pb2_grpc

log = logging.getLogger(__name__)

VIEW_INTERVAL_S = 1.0
VIEW_TIMEOUT_S = 2.0


class SchedulersUnreachable(Exception):
    """No scheduler answered (each failed in transport)."""


def view_of(nodes: Sequence[common_pb2.NodeInfo]) -> tuple[list[ViewReplica], list[str]]:
    """The READY replicas of a ListNodes answer, and the models they serve."""
    ready = [
        ViewReplica(
            n.node_id,
            n.address,
            r.replica_id,
            r.model,
            r.running_requests + r.waiting_requests,
            r.max_seqs,
            r.kv_block_size,
        )
        for n in nodes
        for r in n.replicas
        if r.state == common_pb2.REPLICA_STATE_READY
    ]
    return ready, sorted({r.model for r in ready})


class SchedulerClient:
    def __init__(
        self,
        addresses: Sequence[str],
        stale: StaleRouter | None = None,
        view_interval_s: float = VIEW_INTERVAL_S,
    ):
        if not addresses:
            raise ValueError("at least one scheduler address is needed")
        self._channels = [mux_channel(a) for a in addresses]
        self._stubs = [scheduler_pb2_grpc.SchedulerStub(ch) for ch in self._channels]
        self._preferred = 0
        self.stale = stale
        self.view_interval_s = view_interval_s
        self.answered_at: float | None = None  # monotonic time of the last view taken
        self.ready_models: tuple[str, ...] = ()  # models with a READY replica in that view

    async def _call(self, method: str, request, timeout: float, first: int | None = None):
        """`method` on the preferred scheduler (or `first`), then the others in turn."""
        n = len(self._stubs)
        start = self._preferred if first is None else first
        last: grpc.aio.AioRpcError | None = None
        for i in range(n):
            k = (start + i) % n
            try:
                reply = await getattr(self._stubs[k], method)(request, timeout=timeout)
            except grpc.aio.AioRpcError as err:
                if not is_transport_error(err):
                    raise
                last = err
                continue
            self._preferred = k
            return reply
        raise SchedulersUnreachable(last.code().name if last else "no scheduler")

    async def route(
        self, request: scheduler_pb2.RouteRequest, timeout: float
    ) -> scheduler_pb2.RouteResponse:
        return await self._call("Route", request, timeout)

    async def list_models(self, timeout: float) -> common_pb2.ListModelsResponse:
        return await self._call("ListModels", common_pb2.ListModelsRequest(), timeout)

    async def refresh_view(self) -> bool:
        """Take a new view of the pool for stale routing; False if no scheduler answered."""
        if self.stale is None:
            return False
        try:
            reply = await self._call(
                "ListNodes", scheduler_pb2.ListNodesRequest(), VIEW_TIMEOUT_S, first=0
            )
        except (SchedulersUnreachable, grpc.aio.AioRpcError):
            return False
        ready, models = view_of(reply.nodes)
        self.stale.update(ready, models)
        self.answered_at = time.monotonic()
        self.ready_models = tuple(models)
        return True

    def readiness(self, now: float) -> str | None:
        """None when a scheduler answered within three view intervals and the pool has a
        READY replica; else why the gateway cannot serve now."""
        if self.answered_at is None or now - self.answered_at > 3 * self.view_interval_s + 1:
            return "no scheduler answers"
        if not self.ready_models:
            return "no model has a ready replica yet"
        return None

    async def refresh_forever(self, stop: asyncio.Event) -> None:
        failing = False
        while not stop.is_set():
            ok = await self.refresh_view()
            if ok == failing:
                failing = not ok
                if failing:
                    log.warning(
                        "no scheduler answers: new requests are routed from the last "
                        "view of the pool for up to %.0f s",
                        self.stale.max_age_s if self.stale else 0.0,
                    )
                else:
                    log.info("a scheduler answers again")
            try:
                await asyncio.wait_for(stop.wait(), self.view_interval_s)
            except TimeoutError:
                pass

    async def close(self) -> None:
        for ch in self._channels:
            await ch.close()
