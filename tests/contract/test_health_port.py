"""The plaintext health port (start_server's health_bind, STRATA_HEALTH_BIND): a probe without
the cluster's certificate reads the same health as the mutual-TLS port, including readiness
changes, and reaches nothing else there."""

from __future__ import annotations

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from strata.rpc.server import Registration, start_server
from strata.security.identity import ClusterIdentity
from strata.security.secrets import ensure_secrets
from strata.v1 import common_pb2, scheduler_pb2_grpc

CALL_TIMEOUT_S = 240.0  # a call's deadline on a busy 2-core machine


async def _status(address: str, service: str) -> int:
    async with grpc.aio.insecure_channel(address) as ch:
        reply = await health_pb2_grpc.HealthStub(ch).Check(
            health_pb2.HealthCheckRequest(service=service), timeout=CALL_TIMEOUT_S
        )
    return reply.status


async def test_a_probe_without_the_certificate_reads_health_and_nothing_else(tmp_path):
    ensure_secrets(tmp_path)
    identity = ClusterIdentity.load(str(tmp_path), "scheduler")
    running = await start_server(
        [
            Registration(
                add=lambda s: scheduler_pb2_grpc.add_SchedulerServicer_to_server(
                    scheduler_pb2_grpc.SchedulerServicer(), s
                ),
                service_name="strata.v1.Scheduler",
            )
        ],
        identity=identity,
        health_bind="127.0.0.1:0",
    )
    probe = f"127.0.0.1:{running.health_port}"
    serving, not_serving = (
        health_pb2.HealthCheckResponse.SERVING,
        health_pb2.HealthCheckResponse.NOT_SERVING,
    )
    try:
        assert await _status(probe, "") == serving
        assert await _status(probe, "strata.v1.Scheduler") == serving
        await running.health.set("strata.v1.Scheduler", not_serving)  # readiness lost
        assert await _status(probe, "strata.v1.Scheduler") == not_serving
        assert await _status(probe, "") == serving  # liveness stays
        async with grpc.aio.insecure_channel(probe) as ch:
            try:
                await scheduler_pb2_grpc.SchedulerStub(ch).ListModels(
                    common_pb2.ListModelsRequest(), timeout=CALL_TIMEOUT_S
                )
            except grpc.aio.AioRpcError as err:
                assert err.code() == grpc.StatusCode.UNIMPLEMENTED
            else:
                raise AssertionError("the health port served a scheduler RPC")
    finally:
        await running.stop(0)
