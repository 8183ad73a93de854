"""`python -m strata.client.healthcheck ADDR`: exit 0 only while the server reports SERVING."""

from __future__ import annotations

import asyncio
import subprocess
import sys

from grpc_health.v1 import health_pb2

from benchmarks.common.ports import free_port
from strata.client import healthcheck
from strata.rpc.server import start_server


async def probe(*argv: str) -> int:
    return await asyncio.to_thread(healthcheck.main, list(argv))


async def test_serving_then_not_serving(capsys):
    running = await start_server([])
    try:
        assert await probe(running.address) == 0
        assert capsys.readouterr().out == f"{running.address}: SERVING\n"
        await running.health.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
        assert await probe(running.address) == 1
        assert capsys.readouterr().err == f"{running.address}: NOT_SERVING\n"
    finally:
        await running.stop(0)


async def test_unknown_service_and_unreachable_server_are_unhealthy(capsys):
    running = await start_server([])
    try:
        assert await probe(running.address, "--service", "strata.v1.Nope") == 1
        assert capsys.readouterr().err.startswith(f"{running.address}: NOT_FOUND: ")
    finally:
        await running.stop(0)
    closed = f"127.0.0.1:{free_port()}"
    assert await probe(closed, "--timeout", "1") == 1
    assert capsys.readouterr().err.startswith(f"{closed}: UNAVAILABLE: ")


async def test_runs_as_a_module_with_the_exit_code_as_status():
    running = await start_server([])
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "strata.client.healthcheck",
            running.address,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        out, _ = await asyncio.wait_for(proc.communicate(), timeout=30)
    finally:
        await running.stop(0)
    assert proc.returncode == 0
    assert out.decode() == f"{running.address}: SERVING\n"
