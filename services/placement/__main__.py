"""Run the placement planner: python -m services.placement"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket

from services.placement.actions import NodeClients
from services.placement.config import PROG, PlacementConfig, PolicyName
from services.placement.curves_source import MetricsCurves
from services.placement.lease import PlannerLease
from services.placement.planner import Planner, PlannerSettings, SchedulerLink
from services.placement.policies import BatchAwarePolicy, FfdPolicy, PlacementPolicy
from services.placement.prom import planner_families
from services.placement.servicer import PlacementServicer
from strata.core.settings import SettingsError, load
from strata.policy.clock import WallClock
from strata.policy.placement import BatchAwareSettings, MigrationCost
from strata.policy.placement.profiles import load_profiles
from strata.rpc.channels import install
from strata.rpc.readiness import keep_ready
from strata.rpc.server import (
    Registration,
    channel,
    run,
    serve_until_signal,
    start_server,
)
from strata.telemetry.prometheus import close_endpoint, open_endpoint
from strata.telemetry.setup import init_tracing
from strata.v1 import (
    metrics_pb2_grpc,
    placement_pb2,
    placement_pb2_grpc,
    scheduler_pb2_grpc,
)

log = logging.getLogger("services.placement")


def make_policy(cfg: PlacementConfig) -> PlacementPolicy:
    if cfg.placement_policy is PolicyName.FFD:
        return FfdPolicy()
    try:
        profiles = load_profiles(cfg.placement_profiles)
    except ValueError as err:
        raise SettingsError(f"STRATA_PLACEMENT_PROFILES: {err}") from None
    log.info("batch-aware placement; engine profiles: %s", profiles.describe())
    return BatchAwarePolicy(
        profiles,
        BatchAwareSettings(
            MigrationCost(
                cfg.placement_load_bytes_per_s, cfg.placement_warmup_s, cfg.planning_horizon_s
            ),
            cfg.placement_max_moves,
        ),
        lookahead=cfg.placement_lookahead_windows,
    )


async def main(cfg: PlacementConfig) -> None:
    identity = cfg.security().identity("placement")
    install(identity)
    init_tracing("placement", cfg.otlp_endpoint, identity=identity)
    policy = make_policy(cfg)
    scheduler = cfg.scheduler_addr[0]
    scheduler_channel, metrics_channel, nodes = (
        channel(scheduler),
        channel(cfg.metrics_addr),
        NodeClients(),
    )
    curves = MetricsCurves(
        metrics_pb2_grpc.MetricsStub(metrics_channel),
        cfg.metrics_addr,
        cfg.placement_window_s,
        cfg.placement_windows,
        cfg.placement_curve_days,
        cfg.placement_rpc_timeout_s,
        burst_s=cfg.placement_burst_s,
    )
    scheduler_stub = scheduler_pb2_grpc.SchedulerStub(scheduler_channel)
    planner = Planner(
        SchedulerLink(scheduler_stub, scheduler),
        nodes,
        PlannerSettings(
            models=cfg.models,
            replicas=cfg.replica_counts,
            memory_overrides=cfg.memory_overrides,
            rpc_timeout_s=cfg.placement_rpc_timeout_s,
            load_timeout_s=cfg.placement_load_timeout_s,
            drain_timeout_ms=cfg.placement_drain_timeout_ms,
        ),
        WallClock(),
        policy=policy,
        curves=curves,
        # Of several planner processes only the lease's holder applies plans; it renews the
        # lease every round, so a lease of three rounds outlives a slow one.
        lease=PlannerLease(
            scheduler_stub,
            scheduler,
            f"{socket.gethostname()}/{os.getpid()}",
            3 * cfg.replan_interval_s + cfg.placement_rpc_timeout_s,
            WallClock(),
            cfg.placement_rpc_timeout_s,
        ),
    )
    servicer = PlacementServicer(planner)
    running = await start_server(
        [
            Registration(
                add=lambda s: placement_pb2_grpc.add_PlacementServicer_to_server(servicer, s),
                service_name=placement_pb2.DESCRIPTOR.services_by_name["Placement"].full_name,
            )
        ],
        bind=cfg.placement_bind,
        identity=identity,
        health_bind=cfg.health_bind,
    )
    stop = asyncio.Event()
    prom = open_endpoint(cfg.placement_prometheus_bind, lambda: planner_families(planner))
    loop = asyncio.create_task(planner.run_until(stop, cfg.replan_interval_s))
    # A bug in the loop must stop the service loudly, not leave it serving a stale plan.
    loop.add_done_callback(
        lambda t: t.cancelled() or t.exception() is None or os.kill(os.getpid(), signal.SIGTERM)
    )
    log.info("placement listening on %s (policy %s)", cfg.placement_bind, cfg.placement_policy)

    async def readiness() -> str | None:
        if planner.problem is not None:
            return planner.problem
        return None if planner.latest is not None else "no plan yet"

    ready = asyncio.create_task(keep_ready(running, readiness, stop, what="planning"))

    async def on_stop() -> None:
        stop.set()
        close_endpoint(prom)
        await ready
        await loop  # re-raises the loop's error, if that is why we stopped
        await planner.close()
        await nodes.close()
        await metrics_channel.close()
        await scheduler_channel.close()

    await serve_until_signal(running, on_stop=on_stop)


if __name__ == "__main__":
    settings = load(PlacementConfig, PROG)  # --help and bad settings stop here
    run(lambda: main(settings))
