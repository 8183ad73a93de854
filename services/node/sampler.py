"""The node manager's sampler: every STRATA_SAMPLE_INTERVAL_S, one NodeSample (engine counters,
KV blocks per tier, queue lengths, power and energy) to the metrics collector.

Workers report cumulative counters that start again at zero when a worker restarts; the node
sums their growth into node-wide counters that only grow while this node manager runs, which
is what the metrics collector's node layer expects. Samples the collector did not take (it is
restarting, or unreachable) are kept, up to MAX_PENDING, and sent with the next one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable

import grpc

from strata.core.counters import CounterSum, EngineCounters
from strata.node.energy import EnergyMeter
from strata.node.replicas import ReplicaSet, State
from strata.rpc.server import channel
from strata.v1 import (
    kvstore_pb2,
    kvstore_pb2_grpc,
    metrics_pb2,
    metrics_pb2_grpc,
    worker_pb2,
)

log = logging.getLogger(__name__)

MAX_PENDING = 900  # 30 minutes of samples at the default interval
STATS_TIMEOUT_S = 2.0


class NodeSampler:
    def __init__(
        self,
        node_id: str,
        replicas: ReplicaSet,
        meter: EnergyMeter,
        kvstore: kvstore_pb2_grpc.KVStoreStub | None,
        wall_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.node_id = node_id
        self.replicas = replicas
        self.meter = meter
        self.kvstore = kvstore
        self.counters = CounterSum()
        self._wall_ms = wall_ms
        self._monotonic = monotonic
        self._last_t = monotonic()
        self._tier_blocks = (0, 0)

    async def sample(self) -> metrics_pb2.NodeSample:
        """Measure now; interval figures cover the time since the previous sample."""
        step_tokens = budget = running = waiting = used = total = 0
        busy = 0.0
        # Percentiles do not add up across workers: the one that evicted most speaks for the node.
        most_evicted, lifetime_p50, lifetime_p99 = -1, 0.0, 0.0
        for r in list(self.replicas.replicas.values()):
            if r.state is not State.READY or r.stub is None:
                continue
            try:
                s = await r.stub.GetStats(worker_pb2.GetStatsRequest(), timeout=STATS_TIMEOUT_S)
            except grpc.aio.AioRpcError as err:
                log.warning(
                    "stats of replica %s unavailable for the node sample: %s",
                    r.replica_id,
                    err.code().name,
                )
                continue
            growth = self.counters.add(r.replica_id, EngineCounters.from_pb(s))
            step_tokens += growth.step_tokens
            budget += growth.step_token_budget
            busy += growth.busy_seconds
            running += s.running_requests
            waiting += s.waiting_requests
            total += s.kv_blocks_total
            used += s.kv_blocks_total - s.kv_blocks_free
            if s.kv_blocks_evicted > most_evicted:
                most_evicted = s.kv_blocks_evicted
                lifetime_p50, lifetime_p99 = s.block_lifetime_p50_s, s.block_lifetime_p99_s
        host_blocks, disk_blocks = await self._kv_tier_blocks()
        now = self._monotonic()
        interval, self._last_t = now - self._last_t, now
        # Workers on one node share its device: their summed busy time is the device's.
        utilization = min(1.0, busy / interval) if interval > 0 else 0.0
        energy = self.meter.read(utilization)
        c = self.counters.total
        return metrics_pb2.NodeSample(
            node_id=self.node_id,
            unix_ms=self._wall_ms(),
            utilization=utilization,
            batch_tokens=step_tokens,
            batch_budget=budget,
            kv_blocks_device_used=used,
            kv_blocks_device_total=total,
            kv_blocks_host=host_blocks,
            kv_blocks_disk=disk_blocks,
            running=running,
            waiting=waiting,
            preemptions=c.preemptions,
            power_watts=energy.watts,
            energy_joules=energy.joules,
            energy_source=energy.source,
            prefix_hit_tokens=c.prefix_hit_tokens,
            tier_hit_tokens=c.tier_hit_tokens,
            prompt_tokens=c.prompt_tokens,
            kv_blocks_evicted=c.kv_blocks_evicted,
            block_lifetime_sum_s=c.block_lifetime_sum_s,
            block_lifetime_p50_s=lifetime_p50,
            block_lifetime_p99_s=lifetime_p99,
            sparse_layer_steps=c.sparse_layer_steps,
            sparse_fallbacks=c.sparse_fallbacks,
        )

    async def _kv_tier_blocks(self) -> tuple[int, int]:
        """(host, disk) blocks of the node's KV tier store; each block is in exactly one."""
        if self.kvstore is None:
            return 0, 0
        try:
            stats = await self.kvstore.GetStats(
                kvstore_pb2.KVStatsRequest(), timeout=STATS_TIMEOUT_S
            )
        except grpc.aio.AioRpcError as err:
            log.warning(
                "KV tier store stats unavailable (%s): reporting the last known tier blocks",
                err.code().name,
            )
            return self._tier_blocks
        tiers = {t.tier: t.blocks for t in stats.tiers}
        self._tier_blocks = (tiers.get("host", stats.blocks), tiers.get("disk", 0))
        return self._tier_blocks


async def sample_loop(
    sampler: NodeSampler, metrics_addr: str, interval_s: float, stop: asyncio.Event
) -> None:
    pending: deque[metrics_pb2.NodeSample] = deque()
    failures = dropped = 0
    async with channel(metrics_addr) as ch:
        stub = metrics_pb2_grpc.MetricsStub(ch)
        while not stop.is_set():
            if len(pending) == MAX_PENDING:
                pending.popleft()
                dropped += 1
                if dropped == 1 or dropped % 100 == 0:
                    log.warning(
                        "metrics collector %s unreachable: %d node samples dropped",
                        metrics_addr,
                        dropped,
                    )
            pending.append(await sampler.sample())
            try:
                await stub.RecordNodeSamples(
                    metrics_pb2.NodeSamplesRequest(samples=list(pending)),
                    timeout=max(interval_s, 1.0),
                )
                pending.clear()
                if failures:
                    log.info("metrics collector %s reachable again", metrics_addr)
                failures = 0
            except grpc.aio.AioRpcError as err:
                failures += 1
                if failures == 1 or failures % 30 == 0:
                    log.warning(
                        "node samples to metrics collector %s failed (%d in a row): %s",
                        metrics_addr,
                        failures,
                        err.code().name,
                    )
                if err.code() == grpc.StatusCode.INVALID_ARGUMENT:
                    # The collector refuses this batch for good; resending it would block
                    # every later sample behind it.
                    log.error("metrics collector refused node samples: %s", err.details())
                    pending.clear()
            try:
                await asyncio.wait_for(stop.wait(), interval_s)
            except TimeoutError:
                pass
