"""Run the metrics collector: python -m services.metrics"""

from __future__ import annotations

import asyncio
import os

from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from services.metrics.config import PROG, MetricsConfig
from services.metrics.prom import receiver_families
from services.metrics.servicer import MetricsServicer
from strata.core.defaults import DEMO_KEY_FILE, DEMO_TENANT
from strata.core.settings import load
from strata.rpc.channels import install
from strata.rpc.readiness import keep_ready
from strata.rpc.server import Registration, run, serve_until_signal, start_server
from strata.store.db import create_all, make_engine, session_factory
from strata.store.sla_classes import seed_sla_classes
from strata.store.spans import span_sink
from strata.store.tenants import ensure_demo_tenant
from strata.telemetry.prometheus import close_endpoint, open_endpoint
from strata.telemetry.receiver import OtlpReceiver
from strata.telemetry.setup import init_tracing
from strata.v1 import metrics_pb2, metrics_pb2_grpc

DB_CHECK_TIMEOUT_S = 2.0  # a readiness probe's query; the probe runs every second


async def main(cfg: MetricsConfig) -> None:
    identity = cfg.security().identity("metrics")
    install(identity)
    init_tracing("metrics", cfg.tracing_endpoint, identity=identity)
    data_dir = cfg.resolved_data_dir()
    engine = make_engine(cfg.database_url(data_dir))
    await create_all(engine)
    sessions = session_factory(engine)
    async with sessions() as session:
        # STRATA_SLA_CLASSES is the seed: once the table holds classes, they are the definition.
        await seed_sla_classes(session, cfg.sla)
        key = await ensure_demo_tenant(session, os.path.join(data_dir, DEMO_KEY_FILE))
    print(f"demo tenant '{DEMO_TENANT}' api key: {key}", flush=True)

    receiver = OtlpReceiver(
        span_sink(sessions), capacity=cfg.metrics_queue_spans, batch_size=cfg.metrics_batch_spans
    )
    await receiver.start(cfg.otlp_bind, identity)
    servicer = MetricsServicer(sessions, receiver, cfg.layer_settings())
    running = await start_server(
        [
            Registration(
                add=lambda s: metrics_pb2_grpc.add_MetricsServicer_to_server(servicer, s),
                service_name=metrics_pb2.DESCRIPTOR.services_by_name["Metrics"].full_name,
            )
        ],
        bind=cfg.metrics_bind,
        identity=identity,
        health_bind=cfg.health_bind,
    )
    host, otlp_host = cfg.metrics_bind.rsplit(":", 1)[0], cfg.otlp_bind.rsplit(":", 1)[0]
    print(
        f"metrics listening on {host}:{running.port} "
        f"(OTLP receiver on {otlp_host}:{receiver.port})",
        flush=True,
    )

    prom = open_endpoint(cfg.metrics_prometheus_bind, lambda: receiver_families(receiver))
    stop = asyncio.Event()

    async def readiness() -> str | None:
        try:
            async with asyncio.timeout(DB_CHECK_TIMEOUT_S):
                async with engine.connect() as conn:
                    await conn.execute(text("SELECT 1"))
        except (SQLAlchemyError, OSError, TimeoutError) as err:
            return f"the database does not answer ({type(err).__name__}); check STRATA_DB_URL"
        return None

    ready = asyncio.create_task(keep_ready(running, readiness, stop, what="database answers"))

    async def on_stop() -> None:
        stop.set()
        await ready
        close_endpoint(prom)
        await receiver.stop()
        await engine.dispose()

    await serve_until_signal(running, on_stop)


if __name__ == "__main__":
    settings = load(MetricsConfig, PROG)  # --help and bad settings stop here
    run(lambda: main(settings))
