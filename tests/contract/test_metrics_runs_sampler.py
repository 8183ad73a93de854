"""Node samples end to end: the node manager's sampler reads (test-only) workers' GetStats and
the KV tier store's stats over gRPC, folds worker restarts into node counters, and its loop
delivers the samples to the real metrics servicer, resending what the collector missed."""

import asyncio

import pytest

from benchmarks.common.ports import free_port
from services.metrics.servicer import MetricsServicer
from services.node.sampler import NodeSampler, sample_loop
from strata.node.energy import EnergyMeter, PowerModel
from strata.node.replicas import Replica, ReplicaSet, State
from strata.node.worker_process import WorkerProcess
from strata.rpc.server import Registration, channel, start_server
from strata.store.db import create_all, make_engine, session_factory
from strata.store.samples import samples_between
from strata.store.spans import span_sink
from strata.telemetry.receiver import OtlpReceiver
from strata.v1 import (
    kvstore_pb2,
    kvstore_pb2_grpc,
    metrics_pb2,
    metrics_pb2_grpc,
    worker_pb2,
    worker_pb2_grpc,
)

T0_MS = 1_700_000_000_000


class ScriptedWorker(worker_pb2_grpc.WorkerServicer):
    """Answers GetStats with the next scripted WorkerStats (the last one repeats). Test-only."""

    def __init__(self, script: list[worker_pb2.WorkerStats]) -> None:
        self.script = script

    async def GetStats(self, request, context):
        return self.script.pop(0) if len(self.script) > 1 else self.script[0]


class FixedKV(kvstore_pb2_grpc.KVStoreServicer):
    async def GetStats(self, request, context):
        return kvstore_pb2.KVStats(
            blocks=20,
            tiers=[
                kvstore_pb2.TierStats(tier="host", blocks=17),
                kvstore_pb2.TierStats(tier="disk", blocks=3),
            ],
        )


def stats(
    steps: int,
    busy: float,
    prompt: int,
    prefix: int,
    preempt: int = 0,
    running: int = 1,
    free: int = 40,
    evicted: tuple[int, float, float, float] = (0, 0.0, 0.0, 0.0),
) -> worker_pb2.WorkerStats:
    """evicted: blocks evicted, their lifetime sum, recent lifetime p50 and p99."""
    return worker_pb2.WorkerStats(
        running_requests=running,
        waiting_requests=2,
        kv_blocks_total=64,
        kv_blocks_free=free,
        steps=steps,
        step_tokens=steps * 100,
        step_token_budget=steps * 256,
        busy_seconds=busy,
        prompt_tokens=prompt,
        prefix_hit_tokens=prefix,
        tier_hit_tokens=prefix // 2,
        preemptions=preempt,
        max_batched_tokens=256,
        kv_blocks_evicted=evicted[0],
        block_lifetime_sum_s=evicted[1],
        block_lifetime_p50_s=evicted[2],
        block_lifetime_p99_s=evicted[3],
    )


class Clocks:
    def __init__(self) -> None:
        self.t = 0.0

    def wall_ms(self) -> int:
        return T0_MS + round(self.t * 1000)

    def mono(self) -> float:
        return self.t


@pytest.fixture
async def node(tmp_path):
    servers, channels = [], []

    async def serve(add, name: str) -> str:
        running = await start_server([Registration(add=add, service_name=name)])
        servers.append(running)
        return running.address

    w0 = ScriptedWorker(
        [
            stats(10, 1.0, 1000, 400, evicted=(8, 16.0, 1.5, 3.0)),
            stats(30, 2.0, 3000, 900, preempt=1, evicted=(20, 50.0, 2.0, 4.5)),
        ]
    )
    # w1 restarts between the first and second read: its counters start again from zero.
    w1 = ScriptedWorker(
        [
            stats(50, 1.5, 5000, 100, evicted=(12, 6.0, 0.5, 0.9)),
            stats(5, 0.5, 200, 100, running=0, evicted=(3, 1.5, 0.25, 0.5)),
        ]
    )
    replicas = ReplicaSet({})
    for rid, servicer in (("r0", w0), ("r1", w1)):
        addr = await serve(
            lambda s, w=servicer: worker_pb2_grpc.add_WorkerServicer_to_server(w, s),
            "strata.v1.Worker",
        )
        replica = Replica(rid, "m", addr, WorkerProcess(rid, addr, {}), state=State.READY)
        replica.connect()
        replicas.replicas[rid] = replica
    replicas.replicas["loading"] = Replica(
        "loading", "m", "127.0.0.1:1", WorkerProcess("loading", "127.0.0.1:1", {})
    )
    kv_addr = await serve(
        lambda s: kvstore_pb2_grpc.add_KVStoreServicer_to_server(FixedKV(), s), "strata.v1.KVStore"
    )
    kv_channel = channel(kv_addr)
    channels.append(kv_channel)
    clocks = Clocks()
    meter = EnergyMeter(None, PowerModel(100.0, 300.0), clocks.mono)
    sampler = NodeSampler(
        "node-7",
        replicas,
        meter,
        kvstore_pb2_grpc.KVStoreStub(kv_channel),
        wall_ms=clocks.wall_ms,
        monotonic=clocks.mono,
    )
    yield sampler, clocks
    for r in replicas.replicas.values():
        if r.stub is not None:
            await r._channel.close()
    for ch in channels:
        await ch.close()
    for s in servers:
        await s.stop(0)


async def test_samples_carry_interval_figures_and_restart_safe_counters(node):
    sampler, clocks = node
    clocks.t = 4.0
    first = await sampler.sample()
    assert (first.node_id, first.unix_ms) == ("node-7", T0_MS + 4000)
    # Both workers grew from zero: 60 steps, 2.5 busy seconds in 4 s.
    assert (first.batch_tokens, first.batch_budget) == (6000, 60 * 256)
    assert first.utilization == pytest.approx(2.5 / 4)
    assert (first.prompt_tokens, first.prefix_hit_tokens, first.tier_hit_tokens) == (6000, 500, 250)
    assert (first.running, first.waiting) == (2, 4)
    assert (first.kv_blocks_device_used, first.kv_blocks_device_total) == (48, 128)
    assert (first.kv_blocks_host, first.kv_blocks_disk) == (17, 3)
    assert (first.energy_source, first.power_watts) == ("model", 225.0)
    assert first.energy_joules == 900.0
    # Evictions and lifetimes add up; percentiles are r1's, which evicted more (12 > 8).
    assert (first.kv_blocks_evicted, first.block_lifetime_sum_s) == (20, 22.0)
    assert (first.block_lifetime_p50_s, first.block_lifetime_p99_s) == (0.5, 0.9)
    clocks.t = 6.0
    second = await sampler.sample()
    # r0 grew by 20 steps and 1.0 s; r1 restarted: its new 5 steps and 0.5 s are growth.
    assert (second.batch_tokens, second.batch_budget) == (2500, 25 * 256)
    assert second.utilization == pytest.approx(1.5 / 2)
    assert (second.prompt_tokens, second.prefix_hit_tokens, second.preemptions) == (
        6000 + 2000 + 200,
        500 + 500 + 100,
        1,
    )
    assert second.energy_joules == 900.0 + 250.0 * 2
    # r0 evicted 12 more blocks living 34 s in all; r1's 3 since its restart lived 1.5 s.
    assert (second.kv_blocks_evicted, second.block_lifetime_sum_s) == (20 + 12 + 3, 57.5)
    assert (second.block_lifetime_p50_s, second.block_lifetime_p99_s) == (2.0, 4.5)


async def test_the_loop_delivers_samples_and_resends_what_the_collector_missed(node, tmp_path):
    sampler, clocks = node
    produced: list[int] = []
    take = sampler.sample

    async def ticking():
        clocks.t += 1.0
        sample = await take()
        produced.append(sample.unix_ms)
        return sample

    sampler.sample = ticking
    port = free_port()
    stop = asyncio.Event()
    loop = asyncio.create_task(sample_loop(sampler, f"127.0.0.1:{port}", 0.05, stop))
    await asyncio.sleep(0.3)  # the collector is not up: samples wait
    missed = len(produced)
    assert missed >= 2

    engine = make_engine(f"sqlite+aiosqlite:///{tmp_path / 'strata.db'}")
    await create_all(engine)
    sessions = session_factory(engine)
    metrics = MetricsServicer(sessions, OtlpReceiver(span_sink(sessions)))
    running = await start_server(
        [
            Registration(
                add=lambda s: metrics_pb2_grpc.add_MetricsServicer_to_server(metrics, s),
                service_name=metrics_pb2.DESCRIPTOR.services_by_name["Metrics"].full_name,
            )
        ],
        bind=f"127.0.0.1:{port}",
    )
    try:
        stored = []
        for _ in range(200):
            async with sessions() as session:
                stored = await samples_between(session, 0, T0_MS * 2)
            if len(stored) > missed:
                break
            await asyncio.sleep(0.05)
        stop.set()
        await loop
        async with sessions() as session:
            stored = await samples_between(session, 0, T0_MS * 2)
    finally:
        await running.stop(0)
        await engine.dispose()
    assert len(produced) > missed
    assert [s.unix_ms for s in stored] == produced  # none lost, none twice
    assert {s.node_id for s in stored} == {"node-7"}
    assert stored[-1].kv_blocks_host == 17
