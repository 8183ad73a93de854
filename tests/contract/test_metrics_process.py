"""The metrics collector as a process: creates the schema, prints the demo key (the same one on
every start with the same data dir), serves reports, exits cleanly on SIGTERM."""

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

from strata.rpc.server import channel
from strata.rpc.v1 import metrics_pb2, metrics_pb2_grpc
from strata.store.db import make_engine, session_factory
from strata.store.tenants import authenticate

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def start(data_dir: str) -> tuple[subprocess.Popen, str, int]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRATA_")}
    env.update(STRATA_DATA_DIR=data_dir, STRATA_METRICS_BIND="127.0.0.1:0",
               STRATA_OTLP_BIND="127.0.0.1:0")
    proc = subprocess.Popen([sys.executable, "-m", "services.metrics"], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    # A collector that hangs before printing fails the test instead of hanging it.
    watchdog = threading.Timer(20, proc.kill)
    watchdog.start()
    try:
        key_line = proc.stdout.readline()
        listen_line = proc.stdout.readline()
    finally:
        watchdog.cancel()
    key = re.fullmatch(r"demo tenant 'demo' api key: (sk-strata-\S+)\n", key_line)
    port = re.fullmatch(r"metrics listening on 127\.0\.0\.1:(\d+) "
                        r"\(OTLP receiver on 127\.0\.0\.1:\d+\)\n", listen_line)
    assert key and port, (key_line, listen_line)
    return proc, key.group(1), int(port.group(1))


def stop(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=15)
    proc.stdout.close()
    return code


async def report(port: int) -> metrics_pb2.Report:
    # An answered call also proves the SIGTERM handler is installed: the server only runs once
    # __main__ waits in serve_until_signal.
    async with channel(f"127.0.0.1:{port}") as ch:
        return await metrics_pb2_grpc.MetricsStub(ch).GetReport(metrics_pb2.ReportRequest(),
                                                                 timeout=10)


async def test_demo_key_survives_restart_and_service_answers(tmp_path):
    proc, first_key, port = start(str(tmp_path))
    try:
        got = await report(port)
        assert (list(got.tenants), got.spans_received, got.spans_dropped) == ([], 0, 0)
    finally:
        assert stop(proc) == 0
    proc, second_key, port = start(str(tmp_path))
    try:
        await report(port)
    finally:
        assert stop(proc) == 0
    assert second_key == first_key
    assert Path(tmp_path / "demo_api_key").read_text().strip() == first_key
    engine = make_engine(f"sqlite+aiosqlite:///{tmp_path / 'strata.db'}")
    async with session_factory(engine)() as s:
        assert await authenticate(s, first_key) == "demo"
    await engine.dispose()
