"""The node manager's heartbeat carries interference and safety margin, per-tenant loads, the
workers' prefill rates and the step lines they learned (a malformed one dropped) to the scheduler:
a fake worker (in-process, port 0), the real heartbeat loop, replica set and dispatcher, and a
fake scheduler that records every HeartbeatRequest."""

from __future__ import annotations

import asyncio
import math

import pytest

from services.node.config import NodeConfig
from services.node.heartbeat import heartbeat_loop, interference_monitor
from strata.core.step_model import StepLine
from strata.node.dispatcher import Dispatcher
from strata.node.interference_monitor import StepCounters
from strata.node.replicas import Replica, ReplicaSet, State
from strata.node.worker_process import WorkerProcess
from strata.policy.clock import ManualClock, WallClock
from strata.policy.scheduling.fair_queue import FairQueue, QueueItem
from strata.policy.scheduling.slo import line_prefill_rate
from strata.rpc.server import Registration, start_server
from strata.v1 import scheduler_pb2, scheduler_pb2_grpc, worker_pb2, worker_pb2_grpc

MISMATCH = 2.0  # the worker's solo profile is twice too fast for this "machine"
SOLO_S = 0.8  # priced work between two heartbeats
QUIET, LOADED = 12, 4


class FakeWorker(worker_pb2_grpc.WorkerServicer):
    """Each GetStats is one heartbeat interval later (on the monitor's manual clock), with the
    counters grown by one interval of work slowed by the script's interference."""

    def __init__(self, clock: ManualClock, script: list[float]) -> None:
        self.clock = clock
        self.script = script
        self.calls = 0
        self.observed_s = self.solo_s = 0.0

    async def GetStats(self, request, context) -> worker_pb2.WorkerStats:
        factor = self.script[min(self.calls, len(self.script) - 1)]
        self.calls += 1
        self.clock.advance(1.0)
        self.observed_s += SOLO_S * MISMATCH * factor
        self.solo_s += SOLO_S
        return worker_pb2.WorkerStats(
            model="m",
            steps=self.calls,
            step_seconds_observed=self.observed_s,
            step_seconds_solo=self.solo_s,
        )


class FakeScheduler(scheduler_pb2_grpc.SchedulerServicer):
    def __init__(self, wanted: int, stop: asyncio.Event) -> None:
        self.beats: list[scheduler_pb2.HeartbeatRequest] = []
        self.wanted = wanted
        self.stop = stop

    async def Heartbeat(self, request, context) -> scheduler_pb2.HeartbeatResponse:
        self.beats.append(request)
        if len(self.beats) >= self.wanted:
            self.stop.set()
        return scheduler_pb2.HeartbeatResponse()


async def one_replica_node(node_id: str, worker, scheduler):
    """The fake worker and scheduler served on port 0, a node config reaching them, and a
    replica set holding one READY replica of model "m" on that worker."""
    worker_server = await start_server(
        [
            Registration(
                add=lambda s: worker_pb2_grpc.add_WorkerServicer_to_server(worker, s),
                service_name=worker_pb2.DESCRIPTOR.services_by_name["Worker"].full_name,
            )
        ]
    )
    scheduler_server = await start_server(
        [
            Registration(
                add=lambda s: scheduler_pb2_grpc.add_SchedulerServicer_to_server(scheduler, s),
                service_name="strata.v1.Scheduler",
            )
        ]
    )
    cfg = NodeConfig(
        node_id=node_id,
        node_bind="127.0.0.1:0",
        node_advertise=f"{node_id}.local:50053",
        internal_auth=False,
        scheduler_addr=(scheduler_server.address,),
        kvstore_addr="",
        otlp_endpoint="",
        node_memory_bytes=8 << 30,
        device="cpu",
        torch_threads=1,
        worker_ready_timeout_s=240.0,
        heartbeat_interval_s=0.01,
    )
    replicas = ReplicaSet({}, cfg.worker_ready_timeout_s)
    replica = Replica(
        "m-0",
        "m",
        worker_server.address,
        WorkerProcess("m-0", worker_server.address, {}),
        state=State.READY,
    )
    replica.connect()
    replicas.replicas[replica.replica_id] = replica
    return worker_server, scheduler_server, cfg, replicas, replica


async def test_heartbeats_carry_the_nodes_interference_and_safety_margin():
    clock = ManualClock()
    stop = asyncio.Event()
    worker = FakeWorker(clock, [1.0] * QUIET + [1.5] * LOADED)
    scheduler = FakeScheduler(QUIET + LOADED, stop)
    worker_server, scheduler_server, cfg, replicas, replica = await one_replica_node(
        "node-i", worker, scheduler
    )
    monitor = interference_monitor(cfg, clock)
    try:
        await asyncio.wait_for(heartbeat_loop(cfg, replicas, stop, monitor), timeout=240)
    finally:
        await worker_server.stop(0)
        await scheduler_server.stop(0)
    floor = cfg.margin_floor
    got = [(b.node.interference, b.node.safety_margin) for b in scheduler.beats]
    # The worker's counters reached the replica's stats the heartbeat read.
    assert replica.stats.counters.step_seconds_solo == pytest.approx(SOLO_S * (QUIET + LOADED))
    # A constant profile mismatch is the baseline: no interference while quiet.
    assert got[:QUIET] == [(1.0, floor)] * QUIET
    # The first loaded beat pools one quiet and one loaded interval, the next only loaded ones.
    assert got[QUIET] == pytest.approx((1.25, floor + 0.25))
    assert got[QUIET + 1 :] == [pytest.approx((1.5, floor + 0.5))] * (LOADED - 1)
    assert {b.node.node_id for b in scheduler.beats} == {"node-i"}


@pytest.mark.parametrize(("quantile", "interference"), [(0.25, 1.15), (0.5, 1.0)])
def test_no_interference_reads_as_the_configured_quantile_of_the_ratios(quantile, interference):
    # Steps alternate 1.0 and 1.3 of their price, one interval a second: the last two pool to
    # 1.15. Against the lower quartile (1.0) that is interference; against the median, none.
    clock = ManualClock()
    cfg = NodeConfig(interference_baseline_quantile=quantile, heartbeat_interval_s=1.0)
    monitor = interference_monitor(cfg, clock)
    observed = solo = 0.0
    monitor.update({"m-0": StepCounters(observed, solo)})
    for i in range(20):
        clock.advance(1.0)
        observed, solo = observed + (1.0, 1.3)[i % 2], solo + 1.0
        got = monitor.update({"m-0": StepCounters(observed, solo)})
    assert got.interference == pytest.approx(interference)


async def test_heartbeats_carry_tenant_loads_and_the_prefill_rate_from_the_dispatcher():
    stop = asyncio.Event()
    scheduler = FakeScheduler(1, stop)

    class RatedWorker(worker_pb2_grpc.WorkerServicer):
        async def GetStats(self, request, context) -> worker_pb2.WorkerStats:
            return worker_pb2.WorkerStats(model="m", max_seqs=1, prefill_tokens_per_s=750.0)

    worker_server, scheduler_server, cfg, replicas, replica = await one_replica_node(
        "node-t", RatedWorker(), scheduler
    )
    await replicas.refresh(replica)  # the cap (max_seqs 1) is known before dispatching
    dispatcher = Dispatcher(replicas, FairQueue(WallClock()), WallClock())
    # one chat request running (the only slot), one bulk request waiting for it
    lease = await dispatcher.acquire(QueueItem("a", "chat", "m", 2, 100, 20))
    waiting = asyncio.ensure_future(dispatcher.acquire(QueueItem("b", "bulk", "m", 0, 50, 10)))
    dispatcher.arrivals.received("route-a", dispatcher.clock.now())
    dispatcher.arrivals.received("route-b", dispatcher.clock.now())
    await asyncio.sleep(0)
    try:
        await asyncio.wait_for(
            heartbeat_loop(cfg, replicas, stop, dispatcher=dispatcher), timeout=240
        )
    finally:
        waiting.cancel()
        dispatcher.release(lease)
        await worker_server.stop(0)
        await scheduler_server.stop(0)
    node = scheduler.beats[0].node
    assert [(t.tenant, t.priority, t.running, t.queued, t.tokens) for t in node.tenants] == [
        ("bulk", 0, 0, 1, 60),
        ("chat", 2, 1, 0, 120),
    ]
    assert node.replicas[0].tokens_per_s == 750.0
    # the routes of the requests the report includes, for the scheduler's ledger
    assert list(scheduler.beats[0].arrived_routes) == ["route-a", "route-b"]


@pytest.mark.parametrize(
    "reported, kept",
    [
        (([0.03, 2e-3, 1.5e-3, 1.7e-6, 5.8e-6, 0.019], 1500), True),
        (([0.03, 2e-3, 1.5e-3], 1500), False),  # malformed: three coefficients
        (([0.03, 2e-3, 1.5e-3, math.inf, 5.8e-6, 0.019], 1500), False),  # malformed: infinite
        (([], 0), False),  # a worker that reports no line
    ],
)
async def test_heartbeats_carry_the_step_line_each_worker_learned(reported, kept):
    values, samples = reported
    stop = asyncio.Event()
    scheduler = FakeScheduler(1, stop)

    class LearningWorker(worker_pb2_grpc.WorkerServicer):
        async def GetStats(self, request, context) -> worker_pb2.WorkerStats:
            return worker_pb2.WorkerStats(model="m", step_line=values, step_line_samples=samples)

    worker_server, scheduler_server, cfg, replicas, replica = await one_replica_node(
        "node-s", LearningWorker(), scheduler
    )
    try:
        await asyncio.wait_for(heartbeat_loop(cfg, replicas, stop), timeout=240)
    finally:
        await worker_server.stop(0)
        await scheduler_server.stop(0)
    info = scheduler.beats[0].node.replicas[0]
    if kept:
        assert replica.stats.step_line == StepLine.from_coefficients(values, samples=samples)
        assert (list(info.step_line), info.step_line_samples) == (values, samples)
    else:
        assert replica.stats.step_line is None
        assert (list(info.step_line), info.step_line_samples) == ([], 0)


async def test_before_its_engine_measures_a_prefill_rate_a_replica_reports_its_lines():
    stop = asyncio.Event()
    scheduler = FakeScheduler(1, stop)
    values = [0.03, 2e-3, 1.5e-3, 1.7e-6, 5.8e-6, 0.019]

    class FreshWorker(worker_pb2_grpc.WorkerServicer):
        async def GetStats(self, request, context) -> worker_pb2.WorkerStats:
            return worker_pb2.WorkerStats(
                model="m",
                step_line=values,
                kv_block_size=16,
                max_batched_tokens=256,
            )

    worker_server, scheduler_server, cfg, replicas, _ = await one_replica_node(
        "node-f", FreshWorker(), scheduler
    )
    dispatcher = Dispatcher(replicas, FairQueue(WallClock()), WallClock())
    try:
        await asyncio.wait_for(
            heartbeat_loop(cfg, replicas, stop, dispatcher=dispatcher), timeout=240
        )
    finally:
        await worker_server.stop(0)
        await scheduler_server.stop(0)
    line = StepLine.from_coefficients(values)
    want = line_prefill_rate(line, 16, 256)
    assert want > 0
    assert scheduler.beats[0].node.replicas[0].tokens_per_s == pytest.approx(want)
