"""The node manager's heartbeat: refresh worker stats, estimate interference from them, report
the node (with its interference and safety margin) to the scheduler."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import grpc

from services.node.config import NodeConfig
from services.node.servicer import node_info
from strata.node.dispatcher import Dispatcher
from strata.node.interference_monitor import InterferenceMonitor, StepCounters
from strata.node.replicas import ReplicaSet, State
from strata.policy.clock import Clock, WallClock
from strata.policy.scheduling.interference import EstimatorSettings, MarginSettings
from strata.rpc.server import channel
from strata.v1 import common_pb2, scheduler_pb2, scheduler_pb2_grpc

log = logging.getLogger(__name__)


@dataclass(slots=True)
class LastReport:
    """The node as its last heartbeat reported it (the Prometheus endpoint reads it)."""

    info: common_pb2.NodeInfo | None = None


def interference_monitor(cfg: NodeConfig, clock: Clock = WallClock()) -> InterferenceMonitor:
    # The window pools two heartbeats, so one late beat does not leave it empty.
    window = min(cfg.interference_baseline_s, max(2.0, 2 * cfg.heartbeat_interval_s))
    return InterferenceMonitor(
        EstimatorSettings(
            window_s=window,
            baseline_window_s=cfg.interference_baseline_s,
            baseline_quantile=cfg.interference_baseline_quantile,
        ),
        MarginSettings(
            floor=cfg.margin_floor, cap=cfg.margin_cap, half_life_s=cfg.margin_half_life_s
        ),
        clock,
    )


def step_counters(replicas: ReplicaSet) -> dict[str, StepCounters]:
    return {
        r.replica_id: StepCounters(
            r.stats.counters.step_seconds_observed, r.stats.counters.step_seconds_solo
        )
        for r in replicas.replicas.values()
        if r.state is State.READY
    }


async def heartbeat_loop(
    cfg: NodeConfig,
    replicas: ReplicaSet,
    stop: asyncio.Event,
    monitor: InterferenceMonitor | None = None,
    dispatcher: Dispatcher | None = None,
    last: LastReport | None = None,
) -> None:
    """Report the node every interval to every scheduler: replicas, per-tenant loads and replica
    rates (from the dispatcher), interference and safety margin (from the monitor). FAILED
    replicas are forgotten once a scheduler has heard of them (to the others they are gone)."""
    interval = cfg.heartbeat_interval_s
    if monitor is None:
        monitor = interference_monitor(cfg)
    channels = [channel(a) for a in cfg.scheduler_addr]
    stubs = [scheduler_pb2_grpc.SchedulerStub(ch) for ch in channels]
    failures = [0] * len(stubs)
    try:
        while not stop.is_set():
            await replicas.refresh_ready()
            info = node_info(cfg, replicas, dispatcher)
            estimate = monitor.update(step_counters(replicas))
            info.interference = estimate.interference
            info.safety_margin = estimate.safety_margin
            if last is not None:
                last.info = info
            models = [
                common_pb2.ModelInfo(
                    name=r.model,
                    context_length=r.stats.context_length,
                    memory_bytes=r.stats.memory_bytes,
                )
                for r in replicas.replicas.values()
                if r.state is State.READY
            ]
            arrived = dispatcher.arrivals.recent(dispatcher.clock.now()) if dispatcher else ()
            request = scheduler_pb2.HeartbeatRequest(
                node=info, models=models, arrived_routes=arrived
            )
            replies = await asyncio.gather(
                *(s.Heartbeat(request, timeout=max(interval, 1.0)) for s in stubs),
                return_exceptions=True,
            )
            for i, reply in enumerate(replies):
                address = cfg.scheduler_addr[i]
                if isinstance(reply, grpc.aio.AioRpcError):
                    failures[i] += 1
                    if failures[i] == 1 or failures[i] % 30 == 0:
                        log.warning(
                            "heartbeat to scheduler %s failed (%d in a row): %s",
                            address,
                            failures[i],
                            reply.code().name,
                        )
                    continue
                if isinstance(reply, BaseException):
                    raise reply
                if failures[i]:
                    log.info("scheduler %s reachable again", address)
                failures[i] = 0
                if reply.heartbeat_interval_ms > 0:
                    interval = reply.heartbeat_interval_ms / 1000
            if any(f == 0 for f in failures):
                replicas.reap_failed()  # FAILED replicas were reported: forget them now
            try:
                await asyncio.wait_for(stop.wait(), interval)
            except TimeoutError:
                pass
    finally:
        for ch in channels:
            await ch.close()
