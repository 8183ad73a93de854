"""Run the KV tier store: python -m services.kvstore"""

from __future__ import annotations

import logging

from services.kvstore.config import KVStoreConfig
from services.kvstore.servicer import KVStoreServicer
from strata.kvtier.host_tier import HostTier
from strata.rpc.server import Registration, run, serve_until_signal, start_server
from strata.rpc.v1 import kvstore_pb2, kvstore_pb2_grpc
from strata.telemetry.setup import init_tracing

log = logging.getLogger("services.kvstore")


async def main() -> None:
    cfg = KVStoreConfig.from_env()
    init_tracing("kvstore", cfg.otlp_endpoint)
    servicer = KVStoreServicer(HostTier(cfg.host_capacity_bytes))
    running = await start_server([Registration(
        add=lambda s: kvstore_pb2_grpc.add_KVStoreServicer_to_server(servicer, s),
        service_name=kvstore_pb2.DESCRIPTOR.services_by_name["KVStore"].full_name)],
        bind=cfg.bind)
    log.info("kvstore listening on %s (host tier %d MiB)", cfg.bind,
             cfg.host_capacity_bytes >> 20)
    await serve_until_signal(running)


if __name__ == "__main__":
    run(main)
