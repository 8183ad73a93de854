"""Run the gateway: python -m services.gateway"""

from __future__ import annotations

import logging
import time

from services.gateway.config import GatewayConfig
from services.gateway.servicer import GatewayServicer
from strata.gateway.auth import Authenticator
from strata.gateway.prefix_hashes import PrefixHasher
from strata.policy.clock import WallClock
from strata.policy.ratelimit import TenantRateLimiter
from strata.rpc.server import Registration, channel, run, serve_until_signal, start_server
from strata.rpc.v1 import gateway_pb2, gateway_pb2_grpc, scheduler_pb2_grpc
from strata.store.db import create_all, make_engine, session_factory
from strata.telemetry.setup import init_tracing

log = logging.getLogger("services.gateway")


async def main() -> None:
    cfg = GatewayConfig.from_env()
    init_tracing("gateway", cfg.otlp_endpoint)
    db = make_engine(cfg.db_url)
    await create_all(db)
    scheduler = channel(cfg.scheduler_addr)
    servicer = GatewayServicer(
        scheduler_pb2_grpc.SchedulerStub(scheduler),
        Authenticator(session_factory(db), time.monotonic),
        TenantRateLimiter(WallClock(), cfg.rate_limit_rps, cfg.rate_limit_burst),
        cfg.request_timeout_s, PrefixHasher(block_size=cfg.block_size))
    running = await start_server([Registration(
        add=lambda s: gateway_pb2_grpc.add_GatewayServicer_to_server(servicer, s),
        service_name=gateway_pb2.DESCRIPTOR.services_by_name["Gateway"].full_name)],
        bind=cfg.bind)
    log.info("gateway listening on %s", cfg.bind)

    async def on_stop() -> None:
        await servicer.close()
        await scheduler.close()
        await db.dispose()

    await serve_until_signal(running, on_stop=on_stop)


if __name__ == "__main__":
    run(main)
