"""Run the KV tier store: python -m services.kvstore"""

from __future__ import annotations

import asyncio
import logging
import time

from services.kvstore.config import PROG, KVStoreConfig
from services.kvstore.events import EventPublisher
from services.kvstore.peers import PeerPuller
from services.kvstore.prom import store_families
from services.kvstore.servicer import KVStoreServicer
from strata.core import cpu_priority
from strata.core.cpu_priority import CpuClass
from strata.core.settings import load
from strata.kvtier.disk_tier import DiskTier
from strata.kvtier.migrator import Migrator
from strata.kvtier.shm_segment import ShmSegment, segment_path
from strata.kvtier.tiered_store import TieredStore
from strata.policy.kv_tiering import make_policy
from strata.rpc.channels import channel, install
from strata.rpc.readiness import keep_ready
from strata.rpc.server import Registration, run, serve_until_signal, start_server
from strata.telemetry.prometheus import close_endpoint, open_endpoint
from strata.telemetry.setup import init_tracing
from strata.v1 import kvstore_pb2, kvstore_pb2_grpc

log = logging.getLogger("services.kvstore")


async def main(cfg: KVStoreConfig) -> None:
    identity = cfg.security().identity("kvstore")
    install(identity)
    idle = cfg.kvstore_cpu_priority is CpuClass.IDLE
    if idle:
        cpu_priority.to_background()  # threads started below inherit the class
    init_tracing("kvstore", cfg.otlp_endpoint, identity=identity)
    port = int(cfg.kvstore_bind.rsplit(":", 1)[1])
    segment = ShmSegment(
        segment_path(cfg.kvstore_shm_dir, cfg.kvstore_node_id, port),
        cfg.kvstore_host_bytes,
        create=True,
    )
    # Opening the disk tier replays its manifest: after a crash the directory comes back from
    # it, and blocks whose files fail their checksums are dropped before anything is served.
    disk = (
        DiskTier(cfg.disk_dir, cfg.kvstore_disk_bytes, durable=cfg.kvstore_disk_durable)
        if cfg.kvstore_disk_bytes
        else None
    )
    store = TieredStore(
        segment,
        cfg.slab_bytes,
        disk,
        make_policy(cfg.kvstore_policy),
        time.monotonic,
        cfg.kvstore_high_watermark,
        cfg.kvstore_low_watermark,
    )
    migrator = Migrator(store).start()
    peers = PeerPuller(store, channel)
    servicer = KVStoreServicer(store, peers, str(segment.path))
    running = await start_server(
        [
            Registration(
                add=lambda s: kvstore_pb2_grpc.add_KVStoreServicer_to_server(servicer, s),
                service_name=kvstore_pb2.DESCRIPTOR.services_by_name["KVStore"].full_name,
            )
        ],
        bind=cfg.kvstore_bind,
        identity=identity,
        health_bind=cfg.health_bind,
    )
    if idle:
        cpu_priority.to_background()  # and the gRPC runtime's own threads
    prom = open_endpoint(cfg.kvstore_prometheus_bind, lambda: store_families(store))
    publisher = None
    if cfg.scheduler_addr:
        publisher = EventPublisher(
            store,
            cfg.scheduler_addr,
            cfg.kvstore_node_id,
            cfg.advertise,
            cfg.kvstore_events_interval_s,
        )
        events = asyncio.create_task(publisher.run())
    log.info(
        "kvstore listening on %s (host tier %d MiB in %s, disk tier %d MiB in %s, "
        "%d blocks recovered, %d dropped as corrupt, CPU class %s)",
        cfg.kvstore_bind,
        cfg.kvstore_host_bytes >> 20,
        segment.path,
        cfg.kvstore_disk_bytes >> 20,
        cfg.disk_dir if disk is not None else "-",
        store.counters.recovered,
        store.counters.dropped_corrupt,
        cpu_priority.scheduling_class(),
    )
    stop = asyncio.Event()

    async def readiness() -> str | None:
        if migrator.alive:
            return None
        return "the tier migrator stopped: promotions and lease expiry no longer run; restart"

    ready = asyncio.create_task(keep_ready(running, readiness, stop, what="tiers open"))
    try:
        await serve_until_signal(running)
    finally:
        stop.set()
        await ready
        close_endpoint(prom)
        if publisher is not None:
            events.cancel()
            await publisher.close()
        await peers.close()
        migrator.stop()
        if disk is not None:
            disk.close()
        segment.close()


if __name__ == "__main__":
    settings = load(KVStoreConfig, PROG)  # --help and bad settings stop here
    run(lambda: main(settings))
