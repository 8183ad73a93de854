"""Run the placement planner: python -m services.placement"""

from __future__ import annotations

import asyncio
import logging
import os
import signal

from services.placement.config import PlacementConfig
from services.placement.planner import NodeClients, Planner
from services.placement.servicer import PlacementServicer
from strata.policy.clock import WallClock
from strata.rpc.server import Registration, channel, run, serve_until_signal, start_server
from strata.rpc.v1 import placement_pb2, placement_pb2_grpc, scheduler_pb2_grpc
from strata.telemetry.setup import init_tracing

log = logging.getLogger("services.placement")


async def main() -> None:
    cfg = PlacementConfig.from_env()
    init_tracing("placement", cfg.otlp_endpoint)
    scheduler_channel, nodes = channel(cfg.scheduler_addr), NodeClients()
    planner = Planner(
        scheduler=scheduler_pb2_grpc.SchedulerStub(scheduler_channel),
        scheduler_addr=cfg.scheduler_addr, nodes=nodes, models=cfg.models, replicas=cfg.replicas,
        memory_overrides=cfg.memory_overrides, clock=WallClock(), rpc_timeout_s=cfg.rpc_timeout_s,
        load_timeout_s=cfg.load_timeout_s, drain_timeout_ms=cfg.drain_timeout_ms)
    servicer = PlacementServicer(planner)
    running = await start_server([Registration(
        add=lambda s: placement_pb2_grpc.add_PlacementServicer_to_server(servicer, s),
        service_name=placement_pb2.DESCRIPTOR.services_by_name["Placement"].full_name)],
        bind=cfg.bind)
    stop = asyncio.Event()
    loop = asyncio.create_task(planner.run_until(stop, cfg.replan_interval_s))
    # A bug in the loop must stop the service loudly, not leave it serving a stale plan.
    loop.add_done_callback(
        lambda t: t.cancelled() or t.exception() is None or os.kill(os.getpid(), signal.SIGTERM))
    log.info("placement listening on %s", cfg.bind)

    async def on_stop() -> None:
        stop.set()
        await loop             # re-raises the loop's error, if that is why we stopped
        await nodes.close()
        await scheduler_channel.close()

    await serve_until_signal(running, on_stop=on_stop)


if __name__ == "__main__":
    run(main)
