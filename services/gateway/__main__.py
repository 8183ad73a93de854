"""Run the gateway: python -m services.gateway"""

from __future__ import annotations

import asyncio
import logging
import time

from services.gateway.admin import AdminServicer
from services.gateway.config import PROG, GatewayConfig
from services.gateway.http_app import OpenAIFront
from services.gateway.http_server import HttpServer
from services.gateway.metrics_proxy import MetricsProxyServicer
from services.gateway.servicer import GatewayServicer
from strata.core.settings import load
from strata.gateway.admin_key import ensure_admin_key
from strata.gateway.auth import Authenticator
from strata.gateway.metrics import GatewayMetrics
from strata.gateway.node_clients import NodeClients
from strata.gateway.pipeline import RequestPipeline
from strata.gateway.prefix_hashes import PrefixHasher
from strata.gateway.scheduler_client import SchedulerClient
from strata.gateway.tenant_directory import TenantDirectory
from strata.gateway.validation import max_request_bytes
from strata.policy.clock import WallClock
from strata.policy.ratelimit import TenantRateLimiter
from strata.policy.scheduling.stale_routing import StaleRouter
from strata.rpc.channels import install
from strata.rpc.readiness import keep_ready
from strata.rpc.server import (
    Registration,
    channel,
    run,
    serve_until_signal,
    start_server,
)
from strata.store.db import create_all, make_engine, session_factory
from strata.store.sla_classes import seed_sla_classes
from strata.telemetry.setup import init_tracing
from strata.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    gateway_pb2,
    gateway_pb2_grpc,
    metrics_pb2,
    metrics_pb2_grpc,
)

log = logging.getLogger("services.gateway")
READINESS_INTERVAL_S = 1.0


def _registration(pb2, name: str, add, servicer) -> Registration:
    return Registration(
        add=lambda s: add(servicer, s), service_name=pb2.DESCRIPTOR.services_by_name[name].full_name
    )


async def main(cfg: GatewayConfig) -> None:
    identity = cfg.security().identity("gateway")
    install(identity, multiplex=cfg.rpc_multiplex)
    init_tracing("gateway", cfg.otlp_endpoint, identity=identity)
    db = make_engine(cfg.database_url(cfg.resolved_data_dir()))
    await create_all(db)
    sessions = session_factory(db)
    async with sessions() as session:
        await seed_sla_classes(session, cfg.sla_seed)
    admin_key = ensure_admin_key(cfg.admin_key_file)
    auth = Authenticator(sessions, time.monotonic)
    tenants = TenantDirectory(sessions, time.monotonic, cfg.tenant_policy_ttl_s, cfg.sla_seed)
    schedulers = SchedulerClient(
        cfg.scheduler_addr, StaleRouter(WallClock(), cfg.gateway_stale_route_s)
    )
    gateway_metrics = GatewayMetrics()
    pipeline = RequestPipeline(
        auth,
        tenants,
        TenantRateLimiter(WallClock(), cfg.rate_limit_rps, cfg.rate_limit_burst),
        PrefixHasher(),
        schedulers,
        NodeClients(),
        cfg.request_timeout_s,
        gateway_metrics,
    )
    metrics = channel(cfg.metrics_addr)
    running = await start_server(
        [
            _registration(
                gateway_pb2,
                "Gateway",
                gateway_pb2_grpc.add_GatewayServicer_to_server,
                GatewayServicer(pipeline),
            ),
            _registration(
                admin_pb2,
                "Admin",
                admin_pb2_grpc.add_AdminServicer_to_server,
                AdminServicer(
                    sessions, admin_key, auth, tenants, cfg.sla_seed, gateway_metrics.forget_tenant
                ),
            ),
            _registration(
                metrics_pb2,
                "Metrics",
                metrics_pb2_grpc.add_MetricsServicer_to_server,
                MetricsProxyServicer(metrics_pb2_grpc.MetricsStub(metrics), auth, admin_key),
            ),
        ],
        bind=cfg.gateway_bind,
        max_receive_bytes=max_request_bytes(),
        tls=cfg.public_tls(),
        health_bind=cfg.health_bind,
        multiplex=False,  # tenants' port: one call per request, as every public client makes
    )
    stop = asyncio.Event()
    views = asyncio.create_task(schedulers.refresh_forever(stop))

    async def readiness() -> str | None:
        return schedulers.readiness(time.monotonic())

    http = HttpServer(
        OpenAIFront(pipeline, readiness).app(),
        cfg.gateway_http_bind,
        cfg.gateway_tls_cert,
        cfg.gateway_tls_key,
        cfg.shutdown_grace_s,
    )
    await http.start()
    ready = asyncio.create_task(
        keep_ready(
            running, readiness, stop, READINESS_INTERVAL_S,
            "a scheduler answers and a model has a ready replica",
        )
    )  # fmt: skip
    log.info(
        "gateway listening on %s (gRPC) and %s (HTTP: OpenAI API, /metrics)%s (admin key in %s)",
        cfg.gateway_bind,
        cfg.gateway_http_bind,
        " with TLS" if cfg.gateway_tls_cert else "",
        cfg.admin_key_file,
    )

    async def on_stop() -> None:
        stop.set()
        await http.stop()  # already stopped by the signal: a no-op
        await ready
        await views
        await pipeline.close()
        await metrics.close()
        await db.dispose()

    await serve_until_signal(
        running, on_stop=on_stop, grace=cfg.shutdown_grace_s, on_signal=http.stop
    )


if __name__ == "__main__":
    settings = load(GatewayConfig, PROG)  # --help and bad settings stop here
    run(lambda: main(settings))
