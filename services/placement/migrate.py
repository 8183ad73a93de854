"""The planner's driver of make-before-break migrations (strata.policy.placement.migration):
it polls the replica phases the scheduler lists until each migration's new replicas are READY,
then unloads the old ones through the node managers. The state machine is the policy's; this
module only supplies the wall clock's loop and the RPCs."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence

import grpc

from strata.policy.placement import Assignment
from strata.policy.placement.migration import (
    Migration,
    MigrationBook,
    ReplicaKey,
    Retiring,
)
from strata.policy.registry import ReplicaPhase

log = logging.getLogger(__name__)

ReplicaPhases = Callable[[], Awaitable[Mapping[ReplicaKey, ReplicaPhase]]]
Unloader = Callable[[Retiring], Awaitable[bool]]


class Migrations:
    def __init__(
        self, book: MigrationBook, phases: ReplicaPhases, unload: Unloader, poll_s: float = 0.25
    ) -> None:
        self.book = book
        self._phases = phases
        self._unload = unload
        self._poll_s = poll_s
        self._tasks: set[asyncio.Task] = set()
        self._driver: asyncio.Task | None = None

    def start(
        self, loaded: Sequence[Assignment], replaced: Sequence[Retiring], version: int
    ) -> list[Migration]:
        started = self.book.start(loaded, replaced, version)
        for m in started:
            log.info(
                "moving %s: %s drain(s) once %s READY",
                m.model,
                ", ".join(f"{r.replica_id}@{r.node_id}" for r in m.old),
                ", ".join(f"{rid}@{nid}" for nid, rid in m.new),
            )
        if started and (self._driver is None or self._driver.done()):
            self._driver = self._spawn(self._drive())
        return started

    async def wait_idle(self) -> None:
        """Until every running migration has finished (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)
        self.book.cancel_all("the planner stopped")

    def _spawn(self, work: Awaitable[None]) -> asyncio.Task:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _drive(self) -> None:
        while self.book.loading():
            try:
                phases: Mapping[ReplicaKey, ReplicaPhase] | None = await self._phases()
            except grpc.aio.AioRpcError as err:
                phases = None
                log.warning(
                    "migrations: the scheduler did not list nodes (%s); still waiting",
                    err.code().name,
                )
            progress = self.book.advance(phases)
            for m in progress.abandoned:
                log.warning("migration of %s abandoned: %s", m.model, m.detail)
            for m in progress.drain:
                self._spawn(self._retire(m))
            if self.book.loading():
                await asyncio.sleep(self._poll_s)

    async def _retire(self, m: Migration) -> None:
        done = await asyncio.gather(*(self._unload(r) for r in m.old))
        self.book.finish(m, all(done))
