"""Tenants through the whole stack as processes: the gateway writes its admin key at start,
`strata tenants` creates a tenant whose class (as stored in SQL) reaches the real scheduler, and
a revoked key fails at the next request."""

import json
import os
import stat
import time

import grpc
import pytest

from strata.client import cli
from strata.client.sdk import Client
from strata.core import defaults
from strata.rpc.channels import sync_channel
from strata.telemetry import names
from strata.v1 import metrics_pb2, metrics_pb2_grpc

pytestmark = pytest.mark.integration
MODEL = "dummy-tiny"


def _route_span(stack, trace_id: str, timeout_s: float = 240.0):
    deadline = time.monotonic() + timeout_s
    with sync_channel(stack.addr("metrics"), stack.identity) as ch:
        stub = metrics_pb2_grpc.MetricsStub(ch)
        while time.monotonic() < deadline:
            try:
                spans = stub.GetTrace(metrics_pb2.GetTraceRequest(trace_id=trace_id)).spans
            except grpc.RpcError as err:
                if err.code() != grpc.StatusCode.NOT_FOUND:
                    raise
                spans = []
            routes = [s for s in spans if s.name == names.SPAN_SCHEDULER_ROUTE]
            if routes:
                return json.loads(routes[0].attributes_json)
            time.sleep(0.3)
    raise AssertionError(f"no route span for trace {trace_id}:\n{stack.logs()}")


def _wait_model_ready(client: Client, timeout_s: float = 240.0) -> None:
    deadline = time.monotonic() + timeout_s
    while MODEL not in {m.name for m in client.list_models()}:
        if time.monotonic() > deadline:
            raise AssertionError(f"{MODEL} never became ready")
        time.sleep(0.3)


def test_a_tenant_created_with_the_cli_is_served_with_its_class_then_revoked(
    stack, monkeypatch, capsys
):
    key_file = stack.data_dir / defaults.ADMIN_KEY_FILE
    assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600
    monkeypatch.setenv("STRATA_DATA_DIR", str(stack.data_dir))
    gateway = ["--gateway", stack.addr("gateway")]
    demo = (stack.data_dir / defaults.DEMO_KEY_FILE).read_text().strip()
    _wait_model_ready(Client(stack.addr("gateway"), demo))

    assert cli.main([*gateway, "tenants", "classes", "--json"]) == 0
    [interactive] = [
        c for c in json.loads(capsys.readouterr().out)["classes"] if c["name"] == "interactive"
    ]
    assert (
        cli.main(
            [
                *gateway,
                "tenants",
                "create",
                "chat",
                "--class",
                "interactive",
                "--weight",
                "2",
                "--issue-key",
                "--json",
            ]
        )
        == 0
    )
    created = json.loads(capsys.readouterr().out)
    assert (created["sla_class"], created["weight"], created["active_keys"]) == (
        "interactive",
        2.0,
        1,
    )
    client = Client(stack.addr("gateway"), created["api_key"])
    chunks = list(client.generate(MODEL, prompt="Hello", max_tokens=4))
    assert chunks[-1].usage.completion_tokens == 4
    route = _route_span(stack, chunks[-1].trace_id)
    # the class's priority as the SQL table holds it (compose seeds the table from the metrics
    # service's STRATA_SLA_CLASSES)
    assert (route[names.TENANT], route[names.SLA_CLASS], route[names.PRIORITY]) == (
        "chat",
        "interactive",
        interactive["priority"],
    )

    assert cli.main([*gateway, "tenants", "revoke-key", created["api_key"]]) == 0
    with pytest.raises(grpc.RpcError) as err:
        list(client.generate(MODEL, prompt="Hello", max_tokens=4))
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
