"""Run the gateway: python -m services.gateway"""

from __future__ import annotations

import logging
import time

from services.gateway.admin import AdminServicer
from services.gateway.config import GatewayConfig
from services.gateway.servicer import GatewayServicer
from strata.gateway.admin_key import ensure_admin_key
from strata.gateway.auth import Authenticator
from strata.gateway.prefix_hashes import PrefixHasher
from strata.gateway.tenant_directory import TenantDirectory
from strata.gateway.validation import max_request_bytes
from strata.policy.clock import WallClock
from strata.policy.ratelimit import TenantRateLimiter
from strata.rpc.server import Registration, channel, run, serve_until_signal, start_server
from strata.rpc.v1 import (admin_pb2, admin_pb2_grpc, gateway_pb2, gateway_pb2_grpc,
                           scheduler_pb2_grpc)
from strata.store.db import create_all, make_engine, session_factory
from strata.store.sla_classes import seed_sla_classes
from strata.telemetry.setup import init_tracing

log = logging.getLogger("services.gateway")


async def main() -> None:
    cfg = GatewayConfig.from_env()
    init_tracing("gateway", cfg.otlp_endpoint)
    db = make_engine(cfg.db_url)
    await create_all(db)
    sessions = session_factory(db)
    async with sessions() as session:
        await seed_sla_classes(session, cfg.sla_seed)
    admin_key = ensure_admin_key(cfg.admin_key_file)
    scheduler = channel(cfg.scheduler_addr)
    auth = Authenticator(sessions, time.monotonic)
    tenants = TenantDirectory(sessions, time.monotonic, cfg.tenant_policy_ttl_s, cfg.sla_seed)
    servicer = GatewayServicer(
        scheduler_pb2_grpc.SchedulerStub(scheduler), auth,
        TenantRateLimiter(WallClock(), cfg.rate_limit_rps, cfg.rate_limit_burst),
        cfg.request_timeout_s, PrefixHasher(block_size=cfg.block_size), tenants)
    admin = AdminServicer(sessions, admin_key, auth, tenants, cfg.sla_seed)
    running = await start_server([
        Registration(add=lambda s: gateway_pb2_grpc.add_GatewayServicer_to_server(servicer, s),
                     service_name=gateway_pb2.DESCRIPTOR.services_by_name["Gateway"].full_name),
        Registration(add=lambda s: admin_pb2_grpc.add_AdminServicer_to_server(admin, s),
                     service_name=admin_pb2.DESCRIPTOR.services_by_name["Admin"].full_name)],
        bind=cfg.bind, max_receive_bytes=max_request_bytes())
    log.info("gateway listening on %s (admin key in %s)", cfg.bind, cfg.admin_key_file)

    async def on_stop() -> None:
        await servicer.close()
        await scheduler.close()
        await db.dispose()

    await serve_until_signal(running, on_stop=on_stop)


if __name__ == "__main__":
    run(main)
