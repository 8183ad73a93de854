"""The replicas (decode workers) of one node: load, unload with draining, pick, watch, and
keep hot standbys.

    LOADING --serving--> READY --unload--> DRAINING --idle or timeout--> (stopped, removed)
        \\                  \\
         +---start failed---+--process died, no warm standby--> FAILED (reported once, removed)

    STANDBY --process died, a warm standby of the model--> the standby is READY under the dead
                                                           replica's id at once, no model load

Each model with a READY replica keeps `standby_per_model` standby workers: started in STANDBY
(loading, then warm: model loaded, kernels warmed up), never picked for a request. When a READY
worker dies the node promotes a warm one instead of loading the model again (seconds to minutes)
and starts a replacement standby in the background. The standby takes over the dead replica's
id, so the scheduler's routing by replica id and the placement planner's bookkeeping see the same
replica serving on; the takeover is logged and kept in `ReplicaSet.takeovers`.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import logging
import socket
import time
from collections import deque
from dataclasses import dataclass, field

import grpc

from strata.core.counters import EngineCounters
from strata.core.step_model import StepLine
from strata.node.worker_pids import WorkerPids
from strata.node.worker_process import WorkerProcess, WorkerStartError
from strata.policy.placement.migration import DrainRule
from strata.policy.scheduling.prefill_ahead import ClassTokens
from strata.rpc.channels import mux_channel
from strata.rpc.convert import class_tokens_from_pb, positive_or_zero, step_line_from_pb
from strata.v1 import worker_pb2, worker_pb2_grpc

log = logging.getLogger(__name__)


class State(enum.Enum):
    LOADING = "loading"
    READY = "ready"
    DRAINING = "draining"
    FAILED = "failed"
    STANDBY = "standby"  # a hot standby: loading, then warm; takes no request until promoted


@dataclass(slots=True)
class ReplicaStats:
    """A worker as its last GetStats saw it: gauges, and its cumulative counters."""

    running: int = 0
    waiting: int = 0
    queued_tokens: int = 0
    queued_by_class: ClassTokens = ()  # queued_tokens by priority (strata.engine.scheduler)
    blocks_total: int = 0
    blocks_free: int = 0
    context_length: int = 0
    memory_bytes: int = 0
    waiting_for_memory: int = 0  # admitted requests held back: no KV block free anywhere
    max_seqs: int = 0  # requests one engine step can hold (0 = not reported)
    max_batched_tokens: int = 0  # tokens one engine step computes at most (0 = not reported)
    block_size: int = 0  # tokens per KV block (0 = not reported)
    prefill_tokens_per_s: float = 0.0  # the engine's prefill throughput (0: not measured yet)
    counters: EngineCounters = field(default_factory=EngineCounters)
    # The step-time line the worker learned online (strata.core.step_model); None when it
    # reported none or a malformed one.
    step_line: StepLine | None = None
    # The longest step the worker's running decodes allowed lately, ms (0: nothing lent;
    # strata.policy.scheduling.slo.decode_allowance_ms).
    step_allowance_ms: float = 0.0


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
    stopping: bool = False  # past its routing grace: takes no new request
    warm: bool = False  # a standby whose model is loaded: it can take over at once
    _channel: object = None

    def connect(self) -> None:
        ch = mux_channel(self.address)
        self._channel = ch
        self.stub = worker_pb2_grpc.WorkerStub(ch)


@dataclass(slots=True)
class Takeover:
    """A warm standby promoted in place of a READY worker that died."""

    model: str
    replica_id: str  # the dead replica's id, which the standby serves under now
    standby_id: str  # the standby's id before its promotion
    failed_address: str
    address: str
    exit_code: int
    seconds: float  # from the node seeing the worker's exit to the standby READY
    unix_time: float


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ReplicaSet:
    def __init__(
        self,
        worker_settings: dict[str, object],
        ready_timeout_s: float = 600.0,
        routing_grace_s: float = 2.0,
        standby_per_model: int = 0,
        pids: WorkerPids | None = None,
    ):
        # Every worker's settings but its model, replica id and port (services.worker.config)
        self.worker_settings = worker_settings
        self.pids = pids  # where worker pids are recorded (None: nowhere)
        self.ready_timeout_s = ready_timeout_s
        self.standby_per_model = standby_per_model
        self.takeovers: deque[Takeover] = deque(maxlen=100)
        # How long a draining replica still takes requests routed to it by name: the scheduler
        # learns of the drain at this node's next heartbeat and routes here until then
        # (strata.policy.placement.migration.routing_grace_s).
        self.routing_grace_s = routing_grace_s
        self.replicas: dict[str, Replica] = {}
        self._ids = itertools.count()
        self._tasks: set[asyncio.Task] = set()

    def load(self, model: str, replica_id: str = "") -> Replica:
        """Start a worker for `model`; returns at once in LOADING (heartbeats report READY)."""
        rid = replica_id or f"{model}-{next(self._ids)}"
        if rid in self.replicas:
            return self.replicas[rid]
        return self._new_replica(model, rid, State.LOADING)

    def _new_replica(self, model: str, rid: str, state: State) -> Replica:
        address = f"127.0.0.1:{free_port()}"
        settings = {
            **self.worker_settings,
            "worker_bind": address,
            "model": model,
            "replica_id": rid,
        }
        replica = Replica(
            rid, model, address, WorkerProcess(rid, address, settings, self.pids), state=state
        )
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
        if replica.state is State.DRAINING:  # unloaded while it loaded
            await replica.process.stop()
            return
        replica.connect()
        await self.refresh(replica)
        if replica.state is State.STANDBY:
            replica.warm = True
            log.info(
                "standby %s of %s warm on %s", replica.replica_id, replica.model, replica.address
            )
        else:
            replica.state = State.READY
            log.info(
                "replica %s of %s ready on %s", replica.replica_id, replica.model, replica.address
            )
            self._ensure_standbys(replica.model)
        code = await replica.process.wait()
        self._exited(replica, code)

    def _exited(self, replica: Replica, code: int) -> None:
        """A worker process exited; unless we stopped it, that is a failure."""
        seen = time.perf_counter()
        if replica.state is State.DRAINING:
            return
        was_standby = replica.state is State.STANDBY
        replica.state = State.FAILED
        replica.error = f"worker process exited with code {code}"
        log.error(
            "%s %s died: %s",
            "standby" if was_standby else "replica",
            replica.replica_id,
            replica.error,
        )
        if not was_standby:
            self._take_over(replica, code, seen)
        self._ensure_standbys(replica.model)

    def _take_over(self, dead: Replica, code: int, seen: float) -> None:
        standby = next(
            (
                r
                for r in self.replicas.values()
                if r.model == dead.model and r.state is State.STANDBY and r.warm and r.process.alive
            ),
            None,
        )
        if standby is None or self.replicas.get(dead.replica_id) is not dead:
            return
        standby_id = standby.replica_id
        del self.replicas[standby_id]
        standby.replica_id = dead.replica_id
        standby.state = State.READY
        self.replicas[dead.replica_id] = standby  # in the dead one's place: never reported
        took = Takeover(
            dead.model,
            dead.replica_id,
            standby_id,
            dead.address,
            standby.address,
            code,
            time.perf_counter() - seen,
            time.time(),
        )
        self.takeovers.append(took)
        log.warning(
            "replica %s of %s: standby %s on %s took over from the dead worker on %s in %.2f ms",
            took.replica_id,
            took.model,
            standby_id,
            standby.address,
            dead.address,
            took.seconds * 1000,
        )

    def _ensure_standbys(self, model: str) -> None:
        """Start standbys until `model` has standby_per_model, while it has a READY replica."""
        if self.standby_per_model <= 0 or not any(
            r.model == model and r.state is State.READY for r in self.replicas.values()
        ):
            return
        have = sum(
            1 for r in self.replicas.values() if r.model == model and r.state is State.STANDBY
        )
        for _ in range(self.standby_per_model - have):
            self._new_replica(model, f"{model}-standby-{next(self._ids)}", State.STANDBY)

    def warm_standbys(self) -> int:
        """Standbys able to take over right now (NodeInfo.standby_workers)."""
        return sum(1 for r in self.replicas.values() if r.state is State.STANDBY and r.warm)

    async def unload(self, model: str, replica_id: str, drain_timeout_s: float) -> int:
        """Drain and stop `model`'s replicas (one when named); its standbys go too once no
        LOADING or READY replica of it is left. Returns how many replicas were unloaded."""
        mine = [r for r in self.replicas.values() if r.model == model]
        targets = [
            r
            for r in mine
            if (r.replica_id == replica_id if replica_id else r.state is not State.STANDBY)
        ]
        chosen = {id(r) for r in targets}
        serving_left = any(
            r.state in (State.LOADING, State.READY) and id(r) not in chosen for r in mine
        )
        standbys = (
            []
            if serving_left
            else [r for r in mine if r.state is State.STANDBY and id(r) not in chosen]
        )
        for r in targets + standbys:
            r.state = State.DRAINING  # from here on its exit is ours, not a failure
        await asyncio.gather(
            *(self._drain_and_stop(r, drain_timeout_s) for r in targets),
            *(self._drain_and_stop(r, 0.0) for r in standbys),
        )
        return len(targets)

    async def drain_all(self, timeout_s: float) -> None:
        """Drain every replica (the node is stopping): each reports DRAINING from now on, takes
        requests routed to it by name for the routing grace, and stops once idle or after
        `timeout_s`."""
        models = sorted({r.model for r in self.replicas.values()})
        await asyncio.gather(*(self.unload(m, "", timeout_s) for m in models))

    async def _drain_and_stop(self, replica: Replica, drain_timeout_s: float) -> None:
        loop = asyncio.get_running_loop()
        rule, start = DrainRule(self.routing_grace_s, drain_timeout_s), loop.time()
        while not rule.done(start, loop.time(), replica.in_flight):
            await asyncio.sleep(0.05)
        replica.stopping = True
        await replica.process.stop()
        if self.replicas.get(replica.replica_id) is replica:
            del self.replicas[replica.replica_id]

    def pick(self, model: str, replica_id: str = "") -> Replica | None:
        """The named replica if it takes requests (READY, or DRAINING within its routing grace:
        the scheduler routed by a heartbeat older than the drain), else the ready replica of
        `model` with least work."""
        if replica_id:
            r = self.replicas.get(replica_id)
            if (
                r is not None
                and r.model == model
                and (
                    r.state is State.READY
                    or (r.state is State.DRAINING and not r.stopping and r.stub is not None)
                )
            ):
                return r
        ready = [r for r in self.replicas.values() if r.model == model and r.state is State.READY]
        return min(ready, key=lambda r: (r.in_flight, r.stats.queued_tokens), default=None)

    async def refresh(self, replica: Replica) -> None:
        if replica.stub is None:
            return
        s = await replica.stub.GetStats(worker_pb2.GetStatsRequest(), timeout=2.0)
        replica.stats = ReplicaStats(
            running=s.running_requests,
            waiting=s.waiting_requests,
            queued_tokens=s.queued_tokens,
            queued_by_class=class_tokens_from_pb(s.queued_by_class),
            blocks_total=s.kv_blocks_total,
            blocks_free=s.kv_blocks_free,
            context_length=s.context_length,
            memory_bytes=s.memory_bytes,
            waiting_for_memory=s.waiting_for_memory,
            max_seqs=s.max_seqs,
            max_batched_tokens=s.max_batched_tokens,
            block_size=s.kv_block_size,
            prefill_tokens_per_s=s.prefill_tokens_per_s,
            counters=EngineCounters.from_pb(s),
            step_line=step_line_from_pb(s.step_line, s.step_line_samples),
            step_allowance_ms=positive_or_zero(s.step_allowance_ms),
        )

    async def refresh_ready(self) -> None:
        """Refresh every READY replica's stats; one that does not answer keeps its last ones."""
        for r in list(self.replicas.values()):
            if r.state is State.READY:
                try:
                    await self.refresh(r)
                except grpc.aio.AioRpcError as err:
                    log.warning(
                        "stats of replica %s unavailable: %s", r.replica_id, err.code().name
                    )

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
