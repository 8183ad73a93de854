"""Make-before-break: a replica that a plan replaces drains only after its replacement is READY.

    LoadModel(new) --> the new replica READY in the scheduler's view (a worker warms up before
    it reports READY, and the scheduler routes only to READY replicas, so routing shifts to it)
    --> UnloadModel(old): the node manager drains the old replica's running requests, then
    stops it

A migration whose new replica FAILED, or that waits longer than the load timeout, is abandoned:
the old replica keeps serving and the next round decides again. While a migration runs its old
replicas are `leaving`: the planner hides them from the policy (their memory still counted), so
a round in between neither counts them as replicas nor unloads the new one as a surplus.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import grpc

from strata.v1 import common_pb2

log = logging.getLogger(__name__)

LOADING, DRAINING, DONE, ABANDONED = "loading", "draining", "done", "abandoned"


@dataclass(slots=True)
class Retiring:
    model: str
    node_id: str
    replica_id: str
    address: str
    reason: str


@dataclass(slots=True)
class Migration:
    model: str
    new: list[tuple[str, str]]  # (node id, replica id): READY before any drain
    old: list[Retiring]
    state: str = LOADING
    detail: str = ""
    version: int = 0  # the plan version that started it
    to_replica: dict[str, str] = field(default_factory=dict)  # old replica id -> its successor


ReplicaStates = Callable[[], Awaitable[dict[tuple[str, str], int]]]
Unloader = Callable[[Retiring], Awaitable[bool]]


class Migrations:
    def __init__(
        self,
        states: ReplicaStates,
        unload: Unloader,
        ready_timeout_s: float,
        poll_s: float = 0.25,
        history: int = 64,
    ) -> None:
        self._states = states
        self._unload = unload
        self._ready_timeout_s = ready_timeout_s
        self._poll_s = poll_s
        self._tasks: set[asyncio.Task] = set()
        self._running: list[Migration] = []
        self.recent: deque[Migration] = deque(maxlen=history)

    def leaving(self) -> dict[tuple[str, str], Retiring]:
        """Old replicas of migrations still running, by (node id, replica id)."""
        return {(r.node_id, r.replica_id): r for m in self._running for r in m.old}

    def in_flight(self, model: str) -> bool:
        return any(m.model == model for m in self._running)

    def start(self, migration: Migration) -> None:
        self._running.append(migration)
        self.recent.append(migration)
        task = asyncio.create_task(self._run(migration))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def wait_idle(self) -> None:
        """Until every running migration has finished (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def _run(self, m: Migration) -> None:
        try:
            if await self._ready(m):
                m.state = DRAINING
                done = await asyncio.gather(*(self._unload(r) for r in m.old))
                m.state = DONE
                if not all(done):
                    m.detail = "an old replica did not unload; the next round retries it"
        finally:
            self._running.remove(m)

    async def _ready(self, m: Migration) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._ready_timeout_s
        while True:
            try:
                states = await self._states()
            except grpc.aio.AioRpcError as err:
                states = None
                log.warning(
                    "migration of %s: the scheduler did not list nodes (%s); still waiting",
                    m.model,
                    err.code().name,
                )
            if states is not None:
                waiting = [k for k in m.new if states.get(k) != common_pb2.REPLICA_STATE_READY]
                if not waiting:
                    return True
                failed = [k for k in waiting if states.get(k) == common_pb2.REPLICA_STATE_FAILED]
                if failed:
                    return self._abandon(
                        m, f"new replica {failed[0][1]} on {failed[0][0]} failed to start"
                    )
            if loop.time() >= deadline:
                return self._abandon(
                    m, f"new replica(s) not READY after {self._ready_timeout_s:g} s"
                )
            await asyncio.sleep(self._poll_s)

    def _abandon(self, m: Migration, why: str) -> bool:
        m.state, m.detail = ABANDONED, f"{why}; the old replica keeps serving"
        log.warning("migration of %s abandoned: %s", m.model, m.detail)
        return False
