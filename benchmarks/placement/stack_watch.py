"""Which replicas ran where during a run, seen the way the router sees them, and what changed.

The planner applies plans through the node managers and the node managers report their replicas
to the scheduler in heartbeats; ReplicaWatch lists the scheduler's nodes every poll_s and keeps
each listing. From the listings, replica_changes tells:

    at_start    the placement when the evaluation began (the last listing at or before it)
    loads       replicas that first appear after the start: the planner loaded them
    unloads     replicas seen after the start that later leave, or start draining, while their
                node is still listed (a node missing a heartbeat is not an unload)
    hosting     nodes that held a loading, serving or draining replica at some point of the
                evaluation: the nodes the operator could not give back
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import grpc

from strata.rpc.channels import channel
from strata.security.identity import ClusterIdentity
from strata.v1 import common_pb2, scheduler_pb2, scheduler_pb2_grpc

HOLDING = (
    common_pb2.REPLICA_STATE_LOADING,
    common_pb2.REPLICA_STATE_READY,
    common_pb2.REPLICA_STATE_DRAINING,
)
LEAVING = (common_pb2.REPLICA_STATE_DRAINING,)


@dataclass(slots=True, frozen=True)
class SeenReplica:
    node_id: str
    replica_id: str
    model: str
    state: int  # common_pb2.ReplicaState


@dataclass(slots=True, frozen=True)
class Listing:
    unix_ms: int
    nodes: tuple[str, ...]
    replicas: tuple[SeenReplica, ...]


@dataclass(slots=True)
class ReplicaChanges:
    at_start: dict[str, list[str]]  # node -> models, at the start
    at_end: dict[str, list[str]]
    loads: list[SeenReplica] = field(default_factory=list)
    unloads: list[SeenReplica] = field(default_factory=list)
    hosting: list[str] = field(default_factory=list)

    @property
    def migrations(self) -> int:
        return len(self.loads) + len(self.unloads)


def _placement(listing: Listing | None) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for r in listing.replicas if listing else ():
        if r.state in HOLDING:
            out.setdefault(r.node_id, []).append(r.model)
    return {n: sorted(ms) for n, ms in sorted(out.items())}


def replica_changes(listings: Sequence[Listing], start_ms: int, end_ms: int) -> ReplicaChanges:
    """What changed in [start_ms, end_ms] (module docstring); listings in time order."""
    before = [x for x in listings if x.unix_ms <= start_ms]
    during = [x for x in listings if start_ms < x.unix_ms <= end_ms]
    base = before[-1] if before else (during[0] if during else None)
    known = {(r.node_id, r.replica_id) for r in base.replicas} if base else set()
    loads: dict[tuple[str, str], SeenReplica] = {}
    unloads: dict[tuple[str, str], SeenReplica] = {}
    seen: dict[tuple[str, str], SeenReplica] = {
        (r.node_id, r.replica_id): r for r in (base.replicas if base else ())
    }
    hosting = {r.node_id for r in (base.replicas if base else ()) if r.state in HOLDING}
    for listing in during:
        now = {(r.node_id, r.replica_id): r for r in listing.replicas}
        for key, r in now.items():
            if key not in known:
                known.add(key)
                loads[key] = r
            if r.state in LEAVING:
                unloads.setdefault(key, r)
            if r.state in HOLDING:
                hosting.add(r.node_id)
            seen[key] = r
        for key, r in seen.items():
            if key not in now and r.node_id in listing.nodes:
                unloads.setdefault(key, r)
    return ReplicaChanges(
        _placement(base),
        _placement(during[-1] if during else base),
        list(loads.values()),
        list(unloads.values()),
        sorted(hosting),
    )


class ReplicaWatch:
    """Lists the scheduler's nodes every poll_s until stopped; `listings` keeps every answer."""

    def __init__(self, scheduler: str, identity: ClusterIdentity, poll_s: float = 0.5) -> None:
        self._scheduler = scheduler
        self._identity = identity
        self._poll_s = poll_s
        self.listings: list[Listing] = []
        self.misses = 0  # polls the scheduler did not answer

    async def run(self, stop: asyncio.Event) -> None:
        async with channel(self._scheduler, self._identity) as ch:
            stub = scheduler_pb2_grpc.SchedulerStub(ch)
            while not stop.is_set():
                try:
                    reply = await stub.ListNodes(scheduler_pb2.ListNodesRequest(), timeout=2)
                except grpc.aio.AioRpcError:
                    self.misses += 1
                else:
                    self.listings.append(
                        Listing(
                            int(time.time() * 1000),
                            tuple(sorted(n.node_id for n in reply.nodes)),
                            tuple(
                                SeenReplica(n.node_id, r.replica_id, r.model, r.state)
                                for n in reply.nodes
                                for r in n.replicas
                            ),
                        )
                    )
                try:
                    await asyncio.wait_for(stop.wait(), timeout=self._poll_s)
                except TimeoutError:
                    pass
