"""The replicas (decode workers) of one node: load, unload with draining, pick, watch.

    LOADING --serving--> READY --unload--> DRAINING --idle or timeout--> (stopped, removed)
        \\                  \\
         +---start failed---+--process died--> FAILED (reported once, then removed)
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import logging
import socket
from dataclasses import dataclass, field

import grpc

from strata.node.worker_process import WorkerProcess, WorkerStartError
from strata.rpc.server import channel
from strata.rpc.v1 import worker_pb2, worker_pb2_grpc

log = logging.getLogger(__name__)


class State(enum.Enum):
    LOADING = "loading"
    READY = "ready"
    DRAINING = "draining"
    FAILED = "failed"


@dataclass(slots=True)
class ReplicaStats:
    running: int = 0
    waiting: int = 0
    queued_tokens: int = 0
    blocks_total: int = 0
    blocks_free: int = 0
    context_length: int = 0
    memory_bytes: int = 0
    waiting_for_memory: int = 0     # admitted requests held back: no KV block free anywhere
    max_seqs: int = 0               # requests one engine step can hold (0 = not reported)
    step_tokens: int = 0            # cumulative tokens computed by the engine's steps
    busy_seconds: float = 0.0       # cumulative wall time inside steps
    priority_preemptions: int = 0   # cumulative: running requests preempted for a higher class
    step_seconds_observed: float = 0.0  # cumulative: steps the worker priced, as measured ...
    step_seconds_solo: float = 0.0      # ... and as its solo profile predicts (interference)


@dataclass(slots=True)
class Replica:
    replica_id: str
    model: str
    address: str
    process: WorkerProcess
    state: State = State.LOADING
    in_flight: int = 0
    error: str = ""
    stats: ReplicaStats = field(default_factory=ReplicaStats)
    stub: worker_pb2_grpc.WorkerStub | None = None
    stopping: bool = False          # past its routing grace: takes no new request
    _channel: object = None

    def connect(self) -> None:
        ch = channel(self.address)
        self._channel = ch
        self.stub = worker_pb2_grpc.WorkerStub(ch)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ReplicaSet:
    def __init__(self, worker_env: dict[str, str], ready_timeout_s: float = 600.0,
                 routing_grace_s: float = 2.0):
        self.worker_env = worker_env
        self.ready_timeout_s = ready_timeout_s
        # How long a draining replica still takes requests routed to it by name: the scheduler
        # learns of the drain at this node's next heartbeat and routes here until then.
        self.routing_grace_s = routing_grace_s
        self.replicas: dict[str, Replica] = {}
        self._ids = itertools.count()
        self._tasks: set[asyncio.Task] = set()

    def load(self, model: str, replica_id: str = "") -> Replica:
        """Start a worker for `model`; returns at once in LOADING (heartbeats report READY)."""
        rid = replica_id or f"{model}-{next(self._ids)}"
        if rid in self.replicas:
            return self.replicas[rid]
        address = f"127.0.0.1:{free_port()}"
        env = {**self.worker_env, "STRATA_WORKER_BIND": address, "STRATA_MODEL": model,
               "STRATA_REPLICA_ID": rid}
        replica = Replica(rid, model, address, WorkerProcess(rid, address, env))
        self.replicas[rid] = replica
        self._spawn(self._start(replica))
        return replica

    async def _start(self, replica: Replica) -> None:
        try:
            await replica.process.start(self.ready_timeout_s)
        except WorkerStartError as err:
            replica.state, replica.error = State.FAILED, str(err)
            log.error("replica %s failed to start: %s", replica.replica_id, err)
            return
        replica.connect()
        await self.refresh(replica)
        replica.state = State.READY
        log.info("replica %s of %s ready on %s", replica.replica_id, replica.model,
                 replica.address)
        code = await replica.process.wait()
        if replica.state is not State.DRAINING:
            replica.state = State.FAILED
            replica.error = f"worker process exited with code {code}"
            log.error("replica %s died: %s", replica.replica_id, replica.error)

    async def unload(self, model: str, replica_id: str, drain_timeout_s: float) -> int:
        targets = [r for r in self.replicas.values()
                   if r.model == model and (not replica_id or r.replica_id == replica_id)]
        for r in targets:
            r.state = State.DRAINING
        await asyncio.gather(*(self._drain_and_stop(r, drain_timeout_s) for r in targets))
        return len(targets)

    async def _drain_and_stop(self, replica: Replica, drain_timeout_s: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + drain_timeout_s
        settled = loop.time() + min(self.routing_grace_s, drain_timeout_s)
        while (replica.in_flight or loop.time() < settled) and loop.time() < deadline:
            await asyncio.sleep(0.05)
        replica.stopping = True
        await replica.process.stop()
        self.replicas.pop(replica.replica_id, None)

    def pick(self, model: str, replica_id: str = "") -> Replica | None:
        """The named replica if it takes requests (READY, or DRAINING within its routing grace:
        the scheduler routed by a heartbeat older than the drain), else the ready replica of
        `model` with least work."""
        if replica_id:
            r = self.replicas.get(replica_id)
            if r is not None and r.model == model and (
                    r.state is State.READY or (r.state is State.DRAINING and not r.stopping
                                               and r.stub is not None)):
                return r
        ready = [r for r in self.replicas.values() if r.model == model and r.state is State.READY]
        return min(ready, key=lambda r: (r.in_flight, r.stats.queued_tokens), default=None)

    async def refresh(self, replica: Replica) -> None:
        if replica.stub is None:
            return
        s = await replica.stub.GetStats(worker_pb2.GetStatsRequest(), timeout=2.0)
        replica.stats = ReplicaStats(
            running=s.running_requests, waiting=s.waiting_requests,
            queued_tokens=s.queued_tokens, blocks_total=s.kv_blocks_total,
            blocks_free=s.kv_blocks_free, context_length=s.context_length,
            memory_bytes=s.memory_bytes, waiting_for_memory=s.waiting_for_memory,
            max_seqs=s.max_seqs, step_tokens=s.step_tokens, busy_seconds=s.busy_seconds,
            priority_preemptions=s.priority_preemptions,
            step_seconds_observed=s.step_seconds_observed, step_seconds_solo=s.step_seconds_solo)

    async def refresh_ready(self) -> None:
        """Refresh every READY replica's stats; one that does not answer keeps its last ones."""
        for r in list(self.replicas.values()):
            if r.state is State.READY:
                try:
                    await self.refresh(r)
                except grpc.aio.AioRpcError as err:
                    log.warning("stats of replica %s unavailable: %s", r.replica_id,
                                err.code().name)

    def reap_failed(self) -> list[Replica]:
        """Remove FAILED replicas (after they were reported once) and return them."""
        failed = [r for r in self.replicas.values() if r.state is State.FAILED]
        for r in failed:
            del self.replicas[r.replica_id]
        return failed

    async def stop_all(self) -> None:
        for r in self.replicas.values():
            r.state = State.DRAINING  # an exit from here on is ours, not a failure
        await asyncio.gather(*(r.process.stop() for r in self.replicas.values()))
        for t in self._tasks:
            t.cancel()

    def _spawn(self, coro) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
