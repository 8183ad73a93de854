"""The placement planner's lease on the scheduler: of several planner processes, only the one
holding "placement" applies plans (strata.policy.lease keeps the table).

The planner renews the lease before it applies each plan (`hold`), for a time to live of a few
replan intervals, and releases it when it stops; a standby planner's `hold` raises NotHolder
until the holder stops renewing, then it takes over. A holder trusts its lease until the time
it asked plus the time to live granted, never longer than the table holds it.
"""

from __future__ import annotations

import logging

import grpc

from strata.policy.clock import Clock
from strata.v1 import scheduler_pb2, scheduler_pb2_grpc

log = logging.getLogger(__name__)

LEASE_NAME = "placement"


class NotHolder(Exception):
    """This planner does not hold the lease now; the message says who does, or why not."""


class PlannerLease:
    def __init__(
        self,
        stub: scheduler_pb2_grpc.SchedulerStub,
        address: str,
        holder: str,
        ttl_s: float,
        clock: Clock,
        rpc_timeout_s: float,
    ) -> None:
        self.holder = holder
        self.ttl_s = ttl_s
        self._stub = stub
        self._address = address
        self._clock = clock
        self._rpc_timeout_s = rpc_timeout_s
        self.until = 0.0  # clock time the lease is trusted until (0: not held)

    @property
    def held(self) -> bool:
        return self._clock.now() < self.until

    async def hold(self) -> None:
        """Acquire or renew the lease; NotHolder when another planner holds it or the
        scheduler does not answer."""
        asked = self._clock.now()
        try:
            reply = await self._stub.AcquireLease(
                scheduler_pb2.LeaseRequest(name=LEASE_NAME, holder=self.holder, ttl_s=self.ttl_s),
                timeout=self._rpc_timeout_s,
            )
        except grpc.aio.AioRpcError as err:
            self.until = 0.0
            raise NotHolder(
                f"cannot renew the placement lease: the scheduler at {self._address} did not "
                f"answer ({err.code().name})"
            ) from None
        if not reply.granted:
            self.until = 0.0
            who = f"planner {reply.holder}" if reply.holder else "no planner yet"
            raise NotHolder(
                f"standby: {who} holds the placement lease ({reply.remaining_s:.0f} s left)"
            )
        self.until = asked + min(self.ttl_s, reply.remaining_s)

    async def release(self) -> None:
        """Give the lease up (a stopping planner), so a standby takes over at once."""
        if not self.until:
            return
        self.until = 0.0
        try:
            await self._stub.AcquireLease(
                scheduler_pb2.LeaseRequest(name=LEASE_NAME, holder=self.holder, ttl_s=0.0),
                timeout=self._rpc_timeout_s,
            )
        except grpc.aio.AioRpcError as err:
            log.warning("the placement lease was not released (%s): it expires", err.code().name)
