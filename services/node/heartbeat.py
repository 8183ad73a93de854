"""The node manager's heartbeat: refresh worker stats, report the node to the scheduler."""

from __future__ import annotations

import asyncio
import logging

import grpc

from services.node.config import NodeConfig
from services.node.servicer import node_info
from strata.node.replicas import ReplicaSet, State
from strata.rpc.server import channel
from strata.rpc.v1 import common_pb2, scheduler_pb2, scheduler_pb2_grpc

log = logging.getLogger(__name__)


async def heartbeat_loop(cfg: NodeConfig, replicas: ReplicaSet, stop: asyncio.Event) -> None:
    interval = cfg.heartbeat_interval_s
    failures = 0
    async with channel(cfg.scheduler_addr) as ch:
        stub = scheduler_pb2_grpc.SchedulerStub(ch)
        while not stop.is_set():
            await replicas.refresh_ready()
            info = node_info(cfg, replicas)
            models = [common_pb2.ModelInfo(name=r.model, context_length=r.stats.context_length,
                                           memory_bytes=r.stats.memory_bytes)
                      for r in replicas.replicas.values() if r.state is State.READY]
            try:
                resp = await stub.Heartbeat(scheduler_pb2.HeartbeatRequest(
                    node=info, models=models), timeout=max(interval, 1.0))
                replicas.reap_failed()  # FAILED replicas were reported: forget them now
                if failures:
                    log.info("scheduler %s reachable again", cfg.scheduler_addr)
                failures = 0
                if resp.heartbeat_interval_ms > 0:
                    interval = resp.heartbeat_interval_ms / 1000
            except grpc.aio.AioRpcError as err:
                failures += 1
                if failures == 1 or failures % 30 == 0:
                    log.warning("heartbeat to scheduler %s failed (%d in a row): %s",
                                cfg.scheduler_addr, failures, err.code().name)
            try:
                await asyncio.wait_for(stop.wait(), interval)
            except TimeoutError:
                pass
