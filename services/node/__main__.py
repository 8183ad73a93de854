"""Run a node manager: python -m services.node"""

from __future__ import annotations

import asyncio
import logging

from services.node.config import NodeConfig
from services.node.heartbeat import heartbeat_loop
from services.node.servicer import NodeManagerServicer
from strata.node.replicas import ReplicaSet
from strata.rpc.server import Registration, run, serve_until_signal, start_server
from strata.rpc.v1 import node_pb2, node_pb2_grpc
from strata.telemetry.setup import init_tracing

log = logging.getLogger("services.node")


async def main() -> None:
    cfg = NodeConfig.from_env()
    init_tracing("node", cfg.otlp_endpoint)
    replicas = ReplicaSet(cfg.worker_env(), cfg.worker_ready_timeout_s)
    servicer = NodeManagerServicer(cfg, replicas)
    running = await start_server([Registration(
        add=lambda s: node_pb2_grpc.add_NodeManagerServicer_to_server(servicer, s),
        service_name=node_pb2.DESCRIPTOR.services_by_name["NodeManager"].full_name)],
        bind=cfg.bind)
    stop = asyncio.Event()
    beats = asyncio.create_task(heartbeat_loop(cfg, replicas, stop))
    log.info("node manager %s listening on %s (advertised as %s)", cfg.node_id, cfg.bind,
             cfg.advertise)

    async def on_stop() -> None:
        stop.set()
        await beats
        await replicas.stop_all()

    await serve_until_signal(running, on_stop=on_stop)


if __name__ == "__main__":
    run(main)
