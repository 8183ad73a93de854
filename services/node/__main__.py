"""Run a node manager: python -m services.node"""

from __future__ import annotations

import asyncio
import logging

from services.node.config import PROG, NodeConfig
from services.node.heartbeat import LastReport, heartbeat_loop
from services.node.prom import node_families
from services.node.sampler import NodeSampler, sample_loop
from services.node.servicer import NodeManagerServicer
from strata.core.settings import load
from strata.node.energy import EnergyMeter, PowerModel, open_counter
from strata.node.replicas import ReplicaSet, State
from strata.node.worker_pids import WorkerPids
from strata.policy.placement.migration import routing_grace_s
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
from strata.v1 import kvstore_pb2_grpc, node_pb2, node_pb2_grpc

log = logging.getLogger("services.node")


async def main(cfg: NodeConfig) -> None:
    identity = cfg.security().identity("node")
    install(identity, multiplex=cfg.rpc_multiplex)
    init_tracing("node", cfg.otlp_endpoint, identity=identity)
    pids = WorkerPids(cfg.state_dir)
    reaped = pids.reap_leftovers()
    if reaped:
        log.warning(
            "reaped %d workers a previous node manager left running: %s",
            len(reaped),
            ", ".join(map(str, reaped)),
        )
    replicas = ReplicaSet(
        cfg.worker_settings(),
        cfg.worker_ready_timeout_s,
        routing_grace_s=routing_grace_s(cfg.heartbeat_interval_s),
        standby_per_model=cfg.node_standby,
        pids=pids,
    )
    servicer = NodeManagerServicer(cfg, replicas)
    running = await start_server(
        [
            Registration(
                add=lambda s: node_pb2_grpc.add_NodeManagerServicer_to_server(servicer, s),
                service_name=node_pb2.DESCRIPTOR.services_by_name["NodeManager"].full_name,
            )
        ],
        bind=cfg.node_bind,
        identity=identity,
        health_bind=cfg.health_bind,
    )
    stop = asyncio.Event()
    last = LastReport()
    prom = open_endpoint(cfg.node_prometheus_bind, lambda: node_families(last, replicas))
    beats = asyncio.create_task(
        heartbeat_loop(cfg, replicas, stop, dispatcher=servicer.dispatcher, last=last)
    )
    meter = EnergyMeter(
        open_counter(cfg.energy_source), PowerModel(cfg.power_idle_watts, cfg.power_tdp_watts)
    )
    kv_channel = channel(cfg.kvstore_addr)
    sampler = NodeSampler(cfg.node_id, replicas, meter, kvstore_pb2_grpc.KVStoreStub(kv_channel))
    samples = asyncio.create_task(
        sample_loop(sampler, cfg.metrics_addr, cfg.sample_interval_s, stop)
    )
    log.info(
        "node manager %s listening on %s (advertised as %s); energy from %s",
        cfg.node_id,
        cfg.node_bind,
        cfg.advertise,
        meter.source,
    )

    async def on_stop() -> None:
        stop.set()
        close_endpoint(prom)
        await asyncio.gather(beats, samples)
        await kv_channel.close()
        await replicas.stop_all()

    stopping = asyncio.Event()

    async def readiness() -> str | None:
        if stopping.is_set():
            return "stopping"
        states = [r.state for r in replicas.replicas.values() if r.state is not State.STANDBY]
        if states and State.READY not in states:
            return "no replica is ready yet"
        return None

    ready = asyncio.create_task(keep_ready(running, readiness, stop, what="replicas loaded"))

    async def hand_over() -> None:
        stopping.set()
        log.info("draining: the replicas leave routing and finish their streams")
        await replicas.drain_all(cfg.shutdown_grace_s)

    await serve_until_signal(
        running, on_stop=on_stop, grace=cfg.shutdown_grace_s, on_signal=hand_over
    )
    await ready


if __name__ == "__main__":
    settings = load(NodeConfig, PROG)  # --help and bad settings stop here
    run(lambda: main(settings))
