"""LoadModel and UnloadModel on the node managers, and what the planner remembers of them.

`managed` holds the (node id, replica id) pairs this planner loaded, so that it unloads only its
own replicas; `pending` holds loads no heartbeat has shown yet, counted as present so the next
round does not load them again (until a grace passes: then the node evidently lost them). A call
that fails is logged with the node's id and address and reported as False: the difference
shows up again next round.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import grpc

from strata.policy.clock import Clock
from strata.policy.placement import Assignment, Unload
from strata.policy.placement.migration import Retiring
from strata.rpc.server import channel
from strata.v1 import common_pb2, node_pb2, node_pb2_grpc

log = logging.getLogger(__name__)


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


@dataclass(slots=True, frozen=True)
class _Pending:
    model: str
    expires_at: float


class NodeActions:
    def __init__(
        self,
        nodes: NodeClients,
        clock: Clock,
        *,
        rpc_timeout_s: float,
        load_timeout_s: float,
        drain_timeout_ms: int,
        pending_grace_s: float,
    ) -> None:
        self._nodes = nodes
        self._clock = clock
        self._rpc_timeout_s = rpc_timeout_s
        self._load_timeout_s = load_timeout_s
        self._drain_timeout_ms = drain_timeout_ms
        self._pending_grace_s = pending_grace_s
        self.managed: set[tuple[str, str]] = set()
        self._pending: dict[tuple[str, str], _Pending] = {}

    def pending_on(self, node_id: str) -> list[tuple[str, str]]:
        """(replica id, model) loaded on `node_id` that no heartbeat has shown yet."""
        return [(rid, p.model) for (nid, rid), p in sorted(self._pending.items()) if nid == node_id]

    def forget_settled(self, nodes: Sequence[common_pb2.NodeInfo]) -> None:
        now = self._clock.now()
        live = {n.node_id for n in nodes}
        seen = {(n.node_id, r.replica_id) for n in nodes for r in n.replicas}
        self._pending = {
            k: p
            for k, p in self._pending.items()
            if k[0] in live and k not in seen and p.expires_at > now
        }

    async def load(self, a: Assignment, address: str) -> bool:
        try:
            reply = await self._nodes.stub(address).LoadModel(
                node_pb2.LoadModelRequest(model=a.model, replica_id=a.replica_id),
                timeout=self._load_timeout_s,
            )
        except grpc.aio.AioRpcError as err:
            log.warning(
                "node %s at %s: LoadModel %s (replica %s) failed (%s: %s); retrying next round",
                a.node_id,
                address,
                a.model,
                a.replica_id,
                err.code().name,
                err.details(),
            )
            return False
        replica_id = reply.replica.replica_id or a.replica_id
        self.managed.add((a.node_id, replica_id))
        self._pending[(a.node_id, replica_id)] = _Pending(
            a.model, self._clock.now() + self._pending_grace_s
        )
        log.info("node %s: loading %s as replica %s (%s)", a.node_id, a.model, replica_id, a.reason)
        return True

    async def retire(self, r: Retiring) -> bool:
        return await self.unload(Unload(r.model, r.node_id, r.replica_id, r.reason), r.address)

    async def unload(self, u: Unload, address: str) -> bool:
        try:
            reply = await self._nodes.stub(address).UnloadModel(
                node_pb2.UnloadModelRequest(
                    model=u.model, replica_id=u.replica_id, drain_timeout_ms=self._drain_timeout_ms
                ),
                timeout=self._rpc_timeout_s + self._drain_timeout_ms / 1000,
            )
        except grpc.aio.AioRpcError as err:
            log.warning(
                "node %s at %s: UnloadModel %s (replica %s) failed (%s: %s); retrying next round",
                u.node_id,
                address,
                u.model,
                u.replica_id,
                err.code().name,
                err.details(),
            )
            return False
        self.managed.discard((u.node_id, u.replica_id))
        self._pending.pop((u.node_id, u.replica_id), None)
        log.info(
            "node %s: unloaded %d replica(s) of %s, replica %s (%s)",
            u.node_id,
            reply.unloaded,
            u.model,
            u.replica_id,
            u.reason,
        )
        return True
