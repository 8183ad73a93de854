"""Failover of a streaming request: when the decode worker serving it dies mid-stream, the
request resumes on the replica that takes over (the node's promoted hot standby) right after the
tokens already passed on, so the caller's stream completes as one uninterrupted run would have;
when none takes over in time it fails with how far it got, never silently.

    worker A: t1 t2 t3 t4 x (process died)
    worker B:             resume_output_ids=[t1..t4] -> t5 t6 ... (max_tokens counts t1..t4)
    caller:   t1 t2 t3 t4 t5 t6 ...
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import grpc

from strata.node.replicas import Replica, ReplicaSet, State
from strata.v1 import common_pb2, worker_pb2

log = logging.getLogger(__name__)

# How a dead worker's stream ends: the connection drops (UNAVAILABLE), or the transport breaks
# mid-message (INTERNAL, UNKNOWN, CANCELLED). The worker's process state decides, not the code.
FAILOVER_CODES = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.CANCELLED,
    }
)
EXIT_GRACE_S = 0.5  # a broken stream may be seen before the node reaps the worker's exit
TAKEOVER_WAIT_S = 2.0  # a promotion takes milliseconds; longer means no standby was warm
POLL_S = 0.005


class WorkerLost(Exception):
    """The worker died mid-stream and no replica took over in time (UNAVAILABLE)."""


async def generate_with_failover(
    replicas: ReplicaSet,
    replica: Replica,
    request: worker_pb2.WorkerGenerateRequest,
    timeout_s: float | None,
    *,
    node_id: str = "",
    takeover_wait_s: float = TAKEOVER_WAIT_S,
) -> AsyncIterator[common_pb2.GenerationChunk]:
    """Stream `request` from `replica`, resuming on a takeover replica if its worker dies.

    A worker error with the worker alive, or a non-failover code, is raised as is; so is the
    caller's cancel (it arrives as CancelledError, and closing this generator cancels the worker
    call it has open, so a cancel never fails over)."""
    loop = asyncio.get_running_loop()
    deadline = None if timeout_s is None else loop.time() + timeout_s
    streamed = list(request.resume_output_ids)
    already = len(streamed)
    current, dead = replica, []
    while True:
        target = current
        attempt = request if target is replica else _resumed(request, streamed)
        stub = target.stub
        if stub is None:
            raise RuntimeError(
                f"replica {target.replica_id} has no connection to its worker; only a "
                f"connected replica takes requests"
            )
        if target is not replica:
            target.in_flight += 1  # the caller counts the replica it picked, we the others
        call = stub.Generate(attempt, timeout=_left(loop, deadline))
        try:
            async for chunk in call:
                streamed.extend(chunk.token_ids)
                yield chunk
            return
        except grpc.aio.AioRpcError as err:
            if err.code() not in FAILOVER_CODES or not await _died(loop, target, deadline):
                raise
            dead.append(target)
            wait = (
                takeover_wait_s
                if deadline is None
                else max(0.0, min(takeover_wait_s, deadline - loop.time()))
            )
            log.warning(
                "worker %s (%s) died after %d tokens of request %s (%s); waiting up to "
                "%.1f s for a replica to take over",
                target.replica_id,
                target.address,
                len(streamed) - already,
                request.request_id,
                err.code().name,
                wait,
            )
            successor = await _successor(loop, replicas, target, dead, loop.time() + wait)
            if successor is None:
                raise WorkerLost(
                    f"worker {target.replica_id} of node {node_id} failed after "
                    f"{len(streamed) - already} tokens and no replica took over within "
                    f"{wait:.1f} s; retry"
                ) from err
            current = successor
            log.warning(
                "request %s resumes on %s (%s) after %d tokens",
                request.request_id,
                current.replica_id,
                current.address,
                len(streamed) - already,
            )
        finally:
            if not call.done():
                call.cancel()  # the caller went away: stop the worker's generation
            if target is not replica:
                target.in_flight -= 1


def _resumed(
    request: worker_pb2.WorkerGenerateRequest, streamed: list[int]
) -> worker_pb2.WorkerGenerateRequest:
    again = worker_pb2.WorkerGenerateRequest()
    again.CopyFrom(request)
    del again.resume_output_ids[:]
    again.resume_output_ids.extend(streamed)
    return again


def _left(loop: asyncio.AbstractEventLoop, deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - loop.time())


async def _died(loop: asyncio.AbstractEventLoop, replica: Replica, deadline: float | None) -> bool:
    """Whether the replica's worker is gone (FAILED or its process exited), allowing the node a
    moment to notice an exit that broke the stream first."""
    until = loop.time() + EXIT_GRACE_S
    if deadline is not None:
        until = min(until, deadline)
    while True:
        if replica.state is State.FAILED or not replica.process.alive:
            return True
        if loop.time() >= until:
            return False
        await asyncio.sleep(POLL_S)


async def _successor(
    loop: asyncio.AbstractEventLoop,
    replicas: ReplicaSet,
    failed: Replica,
    dead: list[Replica],
    until: float,
) -> Replica | None:
    """A READY replica of the model to resume on: the standby promoted under the failed
    replica's id when there is one, else the least busy other READY replica."""
    while True:
        # The named pick may still be the failed replica itself (a dead DRAINING one is routable
        # by name): then any other READY one.
        for r in (replicas.pick(failed.model, failed.replica_id), replicas.pick(failed.model)):
            if r is not None and r.stub is not None and all(r is not d for d in dead):
                return r
        if loop.time() >= until:
            return None
        await asyncio.sleep(POLL_S)
