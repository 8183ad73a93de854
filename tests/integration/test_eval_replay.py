"""A tiny Azure-format trace replayed through the real stack (compose's configuration, dummy
model): the run's server-side report must agree with the replay client's own measurements."""

import json
import time
from pathlib import Path

import pytest

from strata.client import cli
from strata.rpc.channels import sync_channel
from strata.v1 import metrics_pb2, metrics_pb2_grpc
from tests.integration.test_stack import _wait_model_ready

pytestmark = pytest.mark.integration
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "traces" / "azure_conv.csv"


def _report(stack, run_id: int, want: int) -> metrics_pb2.Report:
    with sync_channel(stack.addr("metrics"), stack.identity) as ch:
        stub = metrics_pb2_grpc.MetricsStub(ch)
        deadline = time.monotonic() + 240
        while True:
            rep = stub.GetReport(metrics_pb2.ReportRequest(run_id=run_id))
            if rep.request_layer.overall.requests >= want or time.monotonic() > deadline:
                return rep
            time.sleep(0.3)


def test_fixture_replay_report_agrees_with_the_client(stack, tmp_path, monkeypatch):
    _wait_model_ready(stack)
    monkeypatch.setenv("STRATA_DATA_DIR", str(stack.data_dir))
    rc = cli.main(
        [
            "--gateway",
            stack.addr("gateway"),
            "replay",
            "--trace",
            str(FIXTURE),
            "--format",
            "azure",
            "--model",
            "dummy-tiny",
            "--time-scale",
            "4",
            "--length-scale",
            "4",
            "--max-output",
            "48",
            "--out",
            str(tmp_path),
            "--name",
            "fixture",
        ]
    )
    assert rc == 0
    [run_dir] = tmp_path.glob("run-*")
    run_id = int(run_dir.name.removeprefix("run-"))
    client = json.loads((run_dir / "summary.json").read_text())
    assert client["succeeded"] == 12 and client["failed"] == 0  # every fixture row

    rep = _report(stack, run_id, client["succeeded"])
    overall = rep.request_layer.overall
    assert rep.run.run_id == run_id and rep.run.finished_unix_ms > 0
    assert overall.requests == client["succeeded"] and overall.errors == 0
    assert overall.completion_tokens == client["output_tokens"]
    assert overall.prompt_tokens == client["prompt_tokens"]
    # The gateway measures from the request's arrival to its last send; the client adds its own
    # stack and the loopback hops. Stated bound: server <= client + 1 ms, and within 25 ms or
    # 25% of the client's figure, whichever is larger, at the median; the P95 of 12 requests is
    # about their slowest, where one pause of the client's process on a busy 2-core machine
    # shows whole (seen: 34 ms), so there within 60 ms or 50%.
    bounds = {"p50": (25.0, 0.25), "p95": (60.0, 0.5)}
    for metric in ("ttft_ms", "e2e_ms"):
        for q, (floor_ms, share) in bounds.items():
            server = getattr(getattr(overall, metric), q)
            mine = client[metric][q]
            assert server <= mine + 1.0, (metric, q, server, mine)
            assert mine - server <= max(floor_ms, share * mine), (metric, q, server, mine)
    assert rep.cluster_layer.requests == client["succeeded"]
    assert rep.node_layer.nodes, "no node samples in the run's window"
