"""Run the placement planner: python -m services.placement"""

from __future__ import annotations

import asyncio
import logging
import os
import signal

from services.placement.actions import NodeClients
from services.placement.config import PlacementConfig
from services.placement.curves_source import MetricsCurves
from services.placement.planner import Planner
from services.placement.policies import BatchAwarePolicy, FfdPolicy, PlacementPolicy
from services.placement.profiles import load_profiles
from services.placement.servicer import PlacementServicer
from strata.envconfig import ConfigError
from strata.policy.clock import WallClock
from strata.policy.placement import BatchAwareSettings, MigrationCost
from strata.rpc.identity import install
from strata.rpc.server import Registration, channel, run, serve_until_signal, start_server
from strata.rpc.v1 import metrics_pb2_grpc, placement_pb2, placement_pb2_grpc, scheduler_pb2_grpc
from strata.telemetry.setup import init_tracing

log = logging.getLogger("services.placement")


def make_policy(cfg: PlacementConfig) -> PlacementPolicy:
    if cfg.policy == "ffd":
        return FfdPolicy()
    try:
        profiles = load_profiles(cfg.profiles)
    except ValueError as err:
        raise ConfigError(f"STRATA_PLACEMENT_PROFILES: {err}") from None
    log.info("batch-aware placement; engine profiles: %s", profiles.describe())
    return BatchAwarePolicy(profiles, BatchAwareSettings(
        MigrationCost(cfg.load_bytes_per_s, cfg.warmup_s, cfg.planning_horizon_s),
        cfg.max_moves), lookahead=cfg.lookahead_windows)


async def main() -> None:
    cfg = PlacementConfig.from_env()
    identity = cfg.security.identity("placement")
    install(identity)
    init_tracing("placement", cfg.otlp_endpoint, identity=identity)
    policy = make_policy(cfg)
    scheduler_channel, metrics_channel, nodes = (channel(cfg.scheduler_addr),
                                                 channel(cfg.metrics_addr), NodeClients())
    curves = MetricsCurves(metrics_pb2_grpc.MetricsStub(metrics_channel), cfg.metrics_addr,
                           cfg.window_s, cfg.windows, cfg.curve_days, cfg.rpc_timeout_s,
                           burst_s=cfg.burst_s)
    planner = Planner(
        scheduler=scheduler_pb2_grpc.SchedulerStub(scheduler_channel),
        scheduler_addr=cfg.scheduler_addr, nodes=nodes, models=cfg.models, replicas=cfg.replicas,
        memory_overrides=cfg.memory_overrides, clock=WallClock(), rpc_timeout_s=cfg.rpc_timeout_s,
        load_timeout_s=cfg.load_timeout_s, drain_timeout_ms=cfg.drain_timeout_ms, policy=policy,
        curves=curves)
    servicer = PlacementServicer(planner)
    running = await start_server([Registration(
        add=lambda s: placement_pb2_grpc.add_PlacementServicer_to_server(servicer, s),
        service_name=placement_pb2.DESCRIPTOR.services_by_name["Placement"].full_name)],
        bind=cfg.bind, identity=identity)
    stop = asyncio.Event()
    loop = asyncio.create_task(planner.run_until(stop, cfg.replan_interval_s))
    # A bug in the loop must stop the service loudly, not leave it serving a stale plan.
    loop.add_done_callback(
        lambda t: t.cancelled() or t.exception() is None or os.kill(os.getpid(), signal.SIGTERM))
    log.info("placement listening on %s (policy %s)", cfg.bind, cfg.policy)

    async def on_stop() -> None:
        stop.set()
        await loop             # re-raises the loop's error, if that is why we stopped
        await planner.close()
        await nodes.close()
        await metrics_channel.close()
        await scheduler_channel.close()

    await serve_until_signal(running, on_stop=on_stop)


if __name__ == "__main__":
    run(main)
