"""The metrics collector as a process (on uvloop, as deployed): creates the schema and the
cluster secrets, prints the demo key (the same one on every start with the same data dir),
stores spans exported to it with the cluster credential and reports them, refuses both ports to
a caller without it, exits cleanly on SIGTERM."""

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import grpc
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from strata.rpc.channels import channel
from strata.security.identity import TOKEN_METADATA, ClusterIdentity
from strata.store.db import make_engine, session_factory
from strata.store.tenants import authenticate
from strata.telemetry import names
from strata.v1 import metrics_pb2, metrics_pb2_grpc

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def start(data_dir: str) -> tuple[subprocess.Popen, str, int, int]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRATA_")}
    env.update(
        STRATA_DATA_DIR=data_dir, STRATA_METRICS_BIND="127.0.0.1:0", STRATA_OTLP_BIND="127.0.0.1:0"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "services.metrics"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    # A collector that hangs before printing fails the test instead of hanging it.
    watchdog = threading.Timer(20, proc.kill)
    watchdog.start()
    try:
        key_line = proc.stdout.readline()
        listen_line = proc.stdout.readline()
    finally:
        watchdog.cancel()
    key = re.fullmatch(r"demo tenant 'demo' api key: (sk-strata-\S+)\n", key_line)
    port = re.fullmatch(
        r"metrics listening on 127\.0\.0\.1:(\d+) "
        r"\(OTLP receiver on 127\.0\.0\.1:(\d+)\)\n",
        listen_line,
    )
    assert key and port, (key_line, listen_line)
    return proc, key.group(1), int(port.group(1)), int(port.group(2))


def stop(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=15)
    proc.stdout.close()
    return code


def operator(data_dir) -> ClusterIdentity:
    return ClusterIdentity.load(str(Path(data_dir) / "secrets"), "operator")


async def report(port: int, identity: ClusterIdentity | None) -> metrics_pb2.Report:
    # An answered call also proves the SIGTERM handler is installed: the server only runs once
    # __main__ waits in serve_until_signal.
    async with channel(f"127.0.0.1:{port}", identity) as ch:
        return await metrics_pb2_grpc.MetricsStub(ch).GetReport(
            metrics_pb2.ReportRequest(), timeout=10
        )


def export_one_request(otlp_port: int, identity: ClusterIdentity, tenant: str = "acme") -> bool:
    provider = TracerProvider(resource=Resource.create({"service.name": "gateway"}))
    provider.add_span_processor(
        BatchSpanProcessor(
            OTLPSpanExporter(
                endpoint=f"127.0.0.1:{otlp_port}",
                insecure=False,
                credentials=identity.channel_credentials(),
                headers=((TOKEN_METADATA, identity.token),),
                timeout=10,
            )
        )
    )
    span = provider.get_tracer("test").start_span(
        names.SPAN_GATEWAY_GENERATE,
        attributes={names.TENANT: tenant, names.REQUEST_ID: "r1", names.E2E_MS: 42.0},
    )
    span.end()
    flushed = provider.force_flush(timeout_millis=10_000)
    provider.shutdown()
    return flushed


async def test_demo_key_survives_restart_and_spans_are_stored(tmp_path):
    proc, first_key, port, otlp_port = start(str(tmp_path))
    identity = operator(tmp_path)
    try:
        got = await report(port, identity)
        assert (list(got.tenants), got.spans_received, got.spans_dropped) == ([], 0, 0)
        assert export_one_request(otlp_port, identity)
        got = await report(port, identity)
        assert [(t.tenant, t.requests, t.e2e_ms.p50) for t in got.tenants] == [("acme", 1, 42.0)]
        assert (got.spans_received, got.spans_dropped) == (1, 0)
    finally:
        assert stop(proc) == 0
    proc, second_key, port, _ = start(str(tmp_path))
    try:
        got = await report(port, identity)  # rows persist; the counters are this process's
        assert [(t.tenant, t.requests) for t in got.tenants] == [("acme", 1)]
        assert got.spans_received == 0
    finally:
        assert stop(proc) == 0
    assert second_key == first_key
    assert Path(tmp_path / "demo_api_key").read_text().strip() == first_key
    engine = make_engine(f"sqlite+aiosqlite:///{tmp_path / 'strata.db'}")
    async with session_factory(engine)() as s:
        assert await authenticate(s, first_key) == "demo"
    await engine.dispose()


async def test_both_ports_refuse_a_caller_without_the_cluster_credential(tmp_path):
    proc, _, port, otlp_port = start(str(tmp_path))
    identity = operator(tmp_path)
    try:
        with pytest.raises(grpc.aio.AioRpcError) as plain:  # no TLS, no token
            await report(port, None)
        assert plain.value.code() == grpc.StatusCode.UNAVAILABLE
        no_token = ClusterIdentity(
            identity.service, "not-the-token", identity.ca, identity.cert, identity.key
        )
        with pytest.raises(grpc.aio.AioRpcError) as wrong:  # TLS, a wrong token
            await report(port, no_token)
        assert wrong.value.code() == grpc.StatusCode.UNAUTHENTICATED
        # spans from a stranger (a wrong token) are not stored
        export_one_request(otlp_port, no_token, tenant="intruder")
        got = await report(port, identity)
        assert [t.tenant for t in got.tenants] == [] and got.spans_received == 0
    finally:
        assert stop(proc) == 0
