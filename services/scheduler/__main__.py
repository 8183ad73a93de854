"""Run the global scheduler: python -m services.scheduler"""

from __future__ import annotations

import asyncio
import logging
import random

from services.scheduler.config import PROG, SchedulerConfig
from services.scheduler.prom import RouteMetrics, registry_families
from services.scheduler.servicer import SchedulerServicer
from strata.core.settings import load
from strata.policy.clock import WallClock
from strata.policy.kv_index import PrefixIndex
from strata.policy.lease import LeaseTable
from strata.policy.registry import NodeRegistry
from strata.policy.routing import Router
from strata.rpc.channels import install
from strata.rpc.readiness import keep_ready
from strata.rpc.server import Registration, run, serve_until_signal, start_server
from strata.telemetry.prometheus import close_endpoint, open_endpoint
from strata.telemetry.setup import init_tracing
from strata.v1 import scheduler_pb2, scheduler_pb2_grpc

log = logging.getLogger("services.scheduler")


async def main(cfg: SchedulerConfig) -> None:
    identity = cfg.security().identity("scheduler")
    install(identity)
    init_tracing("scheduler", cfg.otlp_endpoint, identity=identity)
    registry = NodeRegistry(clock=WallClock(), ttl_s=cfg.node_ttl_s)
    # Unseeded on purpose: scheduler replicas must break ties differently, or they herd.
    router = Router(
        rng=random.Random(), sample_size=cfg.route_sample, tie_tolerance=cfg.route_tie_tolerance
    )
    metrics = RouteMetrics()
    index = PrefixIndex()
    servicer = SchedulerServicer(
        registry,
        router,
        cfg.heartbeat_interval_s,
        index=index,
        settings=cfg.settings(),
        metrics=metrics,
        leases=LeaseTable(registry.clock, cfg.lease_grace_s, cfg.lease_max_s),
    )
    log.info("scheduling mode %s", cfg.scheduler_mode)
    running = await start_server(
        [
            Registration(
                add=lambda s: scheduler_pb2_grpc.add_SchedulerServicer_to_server(servicer, s),
                service_name=scheduler_pb2.DESCRIPTOR.services_by_name["Scheduler"].full_name,
            )
        ],
        bind=cfg.scheduler_bind,
        identity=identity,
        health_bind=cfg.health_bind,
    )
    stop = asyncio.Event()
    prom = open_endpoint(
        cfg.scheduler_prometheus_bind, lambda: registry_families(registry, index), metrics.registry
    )
    expiry = asyncio.create_task(servicer.expire_until(stop, cfg.heartbeat_interval_s))
    log.info("scheduler listening on %s", cfg.scheduler_bind)

    async def readiness() -> str | None:
        return None if registry.nodes() else "no node has reported yet"

    ready = asyncio.create_task(keep_ready(running, readiness, stop, what="nodes report"))

    async def on_stop() -> None:
        stop.set()
        close_endpoint(prom)
        await expiry
        await ready

    await serve_until_signal(running, on_stop=on_stop)


if __name__ == "__main__":
    settings = load(SchedulerConfig, PROG)  # --help and bad settings stop here
    run(lambda: main(settings))
