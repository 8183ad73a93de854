"""The security model on the real stack (compose's commands and environment, dummy-tiny):

- every internal service refuses a caller without the cluster's credential: plaintext fails the
  TLS handshake, a client without a certificate the cluster CA signed fails it too, and a
  certificate without the internal token is UNAUTHENTICATED; the node manager never serves a
  Submit with a faked tenant and priority from outside;
- a tenant key reads only its own tenant's report, traces and runs through the gateway, cannot
  name another tenant, and no key reads nothing; the admin key reads everything;
- cached prefixes are private per tenant;
- the gateway's public port serves TLS when given a certificate, to the SDK and the CLI.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import (
    trace_service_pb2,
    trace_service_pb2_grpc,
)

from benchmarks.common.ports import free_port
from benchmarks.common.stack import ROOT, StackProcess
from strata.client import cli
from strata.client.sdk import Client
from strata.core import defaults
from strata.core.lifeline import child_env
from strata.rpc.channels import public_sync_channel, sync_channel
from strata.security.identity import ClusterIdentity
from strata.security.secrets import ensure_secrets
from strata.v1 import (
    common_pb2,
    kvstore_pb2,
    kvstore_pb2_grpc,
    metrics_pb2,
    metrics_pb2_grpc,
    node_pb2,
    node_pb2_grpc,
    placement_pb2,
    placement_pb2_grpc,
    scheduler_pb2_grpc,
    worker_pb2,
    worker_pb2_grpc,
)
from tests.integration.conftest import DUMMY_OVERRIDES, running_stack
from tests.integration.test_stack import MODEL, _node_replica, _poll, _wait_model_ready

pytestmark = pytest.mark.integration
PROMPT = "The quick brown fox jumps over the lazy dog. " * 8  # several KV blocks


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    with running_stack(tmp_path_factory.mktemp("security"), DUMMY_OVERRIDES) as s:
        _wait_model_ready(s)
        yield s


@pytest.fixture(scope="module")
def tenants(stack):
    """Two tenants, a and b, each with a key; the admin key."""
    admin = (stack.data_dir / defaults.ADMIN_KEY_FILE).read_text().strip()
    keys = {}
    for name in ("a", "b"):
        args = [
            "--gateway",
            stack.addr("gateway"),
            "tenants",
            "create",
            f"sec-{name}",
            "--issue-key",
            "--json",
            "--admin-key",
            admin,
        ]
        out = subprocess.run(
            [sys.executable, "-m", "strata.client.cli", *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert out.returncode == 0, out.stderr
        keys[name] = json.loads(out.stdout)["api_key"]
    return keys, admin


def _internal_calls(stack):
    """(service, address, call(channel)) for a real RPC of every internal service."""
    worker = _node_replica(stack).worker_address
    otlp = stack.processes["metrics"].env["STRATA_OTLP_BIND"]
    faked = node_pb2.SubmitRequest(
        request_id="x",
        tenant="somebody-else",
        priority=100,
        spec=common_pb2.GenerationSpec(model=MODEL, prompt="hi", max_tokens=2),
    )
    return [
        (
            "scheduler",
            stack.addr("scheduler"),
            lambda ch: scheduler_pb2_grpc.SchedulerStub(ch).ListModels(
                common_pb2.ListModelsRequest(), timeout=240
            ),
        ),
        (
            "node",
            stack.addr("node"),
            lambda ch: list(node_pb2_grpc.NodeManagerStub(ch).Submit(faked, timeout=240)),
        ),
        (
            "kvstore",
            stack.addr("kvstore"),
            lambda ch: kvstore_pb2_grpc.KVStoreStub(ch).GetStats(
                kvstore_pb2.KVStatsRequest(), timeout=240
            ),
        ),
        (
            "placement",
            stack.addr("placement"),
            lambda ch: placement_pb2_grpc.PlacementStub(ch).GetPlan(
                placement_pb2.GetPlanRequest(), timeout=240
            ),
        ),
        (
            "metrics",
            stack.addr("metrics"),
            lambda ch: metrics_pb2_grpc.MetricsStub(ch).GetReport(
                metrics_pb2.ReportRequest(), timeout=240
            ),
        ),
        (
            "otlp",
            otlp,
            lambda ch: trace_service_pb2_grpc.TraceServiceStub(ch).Export(
                trace_service_pb2.ExportTraceServiceRequest(), timeout=240
            ),
        ),
        (
            "worker",
            worker,
            lambda ch: worker_pb2_grpc.WorkerStub(ch).GetStats(
                worker_pb2.GetStatsRequest(), timeout=240
            ),
        ),
    ]


def _code(call, ch) -> grpc.StatusCode:
    try:
        call(ch)
    except grpc.RpcError as err:
        return err.code()
    return grpc.StatusCode.OK


def test_internal_services_refuse_callers_without_the_cluster_credential(stack, tmp_path):
    operator = stack.identity
    no_token = ClusterIdentity(
        "operator", "a-guessed-token", operator.ca, operator.cert, operator.key
    )
    ensure_secrets(tmp_path / "other")  # a CA the cluster never heard of
    stranger = ClusterIdentity.load(str(tmp_path / "other"), "operator")
    stranger = ClusterIdentity(
        "operator", operator.token, operator.ca, stranger.cert, stranger.key
    )  # even with the right token
    seen = {}
    for service, address, call in _internal_calls(stack):
        with sync_channel(address, operator) as ch:
            allowed = _code(call, ch)
        with public_sync_channel(address) as ch:
            plaintext = _code(call, ch)
        with grpc.secure_channel(address, grpc.ssl_channel_credentials(operator.ca)) as ch:
            no_cert = _code(call, ch)
        with sync_channel(address, stranger) as ch:
            foreign_cert = _code(call, ch)
        with sync_channel(address, no_token) as ch:
            wrong_token = _code(call, ch)
        seen[service] = (allowed, plaintext, no_cert, foreign_cert, wrong_token)
    refused = grpc.StatusCode.UNAVAILABLE  # the TLS handshake fails
    for service, (allowed, plaintext, no_cert, foreign_cert, wrong_token) in seen.items():
        assert allowed not in (refused, grpc.StatusCode.UNAUTHENTICATED), (service, allowed)
        assert (plaintext, no_cert, foreign_cert, wrong_token) == (
            refused,
            refused,
            refused,
            grpc.StatusCode.UNAUTHENTICATED,
        ), (service, seen[service])


def test_a_tenant_reads_only_its_own_report_traces_and_runs(stack, tenants):
    keys, admin = tenants
    gateway = stack.addr("gateway")
    traces = {}
    for name, key in keys.items():
        with Client(gateway, key) as client:
            *_, last = client.generate(MODEL, prompt=f"hello from {name}", max_tokens=4)
        traces[name] = last.trace_id

    def stub_call(method, request, key):
        with public_sync_channel(gateway) as ch:
            meta = (("authorization", f"Bearer {key}"),) if key else ()
            return getattr(metrics_pb2_grpc.MetricsStub(ch), method)(
                request, metadata=meta, timeout=240
            )

    def code(method, request, key):
        try:
            stub_call(method, request, key)
        except grpc.RpcError as err:
            return err.code()
        return grpc.StatusCode.OK

    def own_report():
        reply = stub_call("GetReport", metrics_pb2.ReportRequest(), keys["a"])
        return reply if reply.tenants else None

    report = _poll(own_report)
    assert [t.tenant for t in report.tenants] == ["sec-a"]
    assert {g.key for g in report.request_layer.tenants} == {"sec-a"}
    assert not report.HasField("cluster_layer") and not report.HasField("node_layer")
    assert (
        code("GetReport", metrics_pb2.ReportRequest(tenant="sec-b"), keys["a"])
        == grpc.StatusCode.PERMISSION_DENIED
    )
    for method, request in (
        ("GetReport", metrics_pb2.ReportRequest()),
        ("GetTrace", metrics_pb2.GetTraceRequest(trace_id=traces["a"])),
        ("ListRuns", metrics_pb2.ListRunsRequest()),
    ):
        assert code(method, request, None) == grpc.StatusCode.UNAUTHENTICATED
        assert code(method, request, "sk-strata-made-up") == grpc.StatusCode.UNAUTHENTICATED
    # Traces: a's own is found; b's is as if it did not exist
    own = _poll(
        lambda: (
            code("GetTrace", metrics_pb2.GetTraceRequest(trace_id=traces["a"]), keys["a"])
            == grpc.StatusCode.OK
        )
    )
    assert own
    # b's spans land with the gateway's next batch: wait until the admin sees b's trace, so
    # that a's NOT_FOUND below means "hidden", not "not stored yet".
    stored = _poll(
        lambda: (
            code("GetTrace", metrics_pb2.GetTraceRequest(trace_id=traces["b"]), admin)
            == grpc.StatusCode.OK
        )
    )
    assert stored, "b's trace never reached the metrics store"
    assert (
        code("GetTrace", metrics_pb2.GetTraceRequest(trace_id=traces["b"]), keys["a"])
        == grpc.StatusCode.NOT_FOUND
    )
    # b's request row lands when the gateway's next span batch does: wait for it.
    everyone = _poll(
        lambda: (lambda r: r if {"sec-a", "sec-b"} <= {t.tenant for t in r.tenants} else None)(
            stub_call("GetReport", metrics_pb2.ReportRequest(), admin)
        )
    )
    assert everyone is not None, "the admin report never held both tenants"
    assert {"sec-a", "sec-b"} <= {t.tenant for t in everyone.tenants}
    assert everyone.HasField("cluster_layer")
    # Runs: b neither sees nor closes a's run, nor reads its report
    run = stub_call("StartRun", metrics_pb2.StartRunRequest(name="a's run"), keys["a"])
    assert run.run_id in [
        r.run_id for r in stub_call("ListRuns", metrics_pb2.ListRunsRequest(), keys["a"]).runs
    ]
    assert run.run_id not in [
        r.run_id for r in stub_call("ListRuns", metrics_pb2.ListRunsRequest(), keys["b"]).runs
    ]
    assert (
        code("FinishRun", metrics_pb2.FinishRunRequest(run_id=run.run_id), keys["b"])
        == grpc.StatusCode.NOT_FOUND
    )
    assert (
        code("GetReport", metrics_pb2.ReportRequest(run_id=run.run_id), keys["b"])
        == grpc.StatusCode.NOT_FOUND
    )
    # the cluster's own RPCs are not served to callers at all
    assert (
        code("GetArrivalCurves", metrics_pb2.ArrivalCurvesRequest(), admin)
        == grpc.StatusCode.PERMISSION_DENIED
    )


def test_cached_prefixes_are_private_per_tenant(stack, tenants):
    keys, _ = tenants
    gateway = stack.addr("gateway")

    def cached(key: str) -> int:
        with Client(gateway, key) as client:
            *_, last = client.generate(MODEL, prompt=PROMPT, max_tokens=2)
        return last.usage.cached_prompt_tokens

    cached(keys["a"])
    assert cached(keys["a"]) > 0  # a's second request reuses a's blocks
    assert cached(keys["b"]) == 0  # b's identical prompt finds none of them


def test_the_public_port_serves_tls_to_the_sdk_and_the_cli(
    stack, tenants, tmp_path, monkeypatch, capsys
):
    keys, _ = tenants
    secrets = stack.data_dir / "secrets"
    address = f"127.0.0.1:{free_port()}"
    env = {
        **stack.processes["gateway"].env,
        "STRATA_GATEWAY_BIND": address,
        "STRATA_GATEWAY_HTTP_BIND": f"127.0.0.1:{free_port()}",
        "STRATA_GATEWAY_TLS_CERT": str(secrets / "gateway.pem"),
        "STRATA_GATEWAY_TLS_KEY": str(secrets / "gateway-key.pem"),
    }
    p = StackProcess("gateway-tls", list(stack.processes["gateway"].command), env, address)
    p.log_path = tmp_path / "gateway-tls.log"
    p.proc = subprocess.Popen(
        [sys.executable, "-m", "services.gateway"],
        cwd=ROOT,
        env=child_env({**os.environ, **env}),
        stdout=open(p.log_path, "w"),
        stderr=subprocess.STDOUT,
    )
    try:
        ca = (secrets / "ca.pem").read_bytes()
        deadline_client = Client(address, keys["a"], tls_ca=ca)
        assert _poll(lambda: _serves(deadline_client)), p.log_path.read_text()
        *_, last = deadline_client.generate(MODEL, prompt="over TLS", max_tokens=3)
        assert last.finish_reason == common_pb2.FINISH_REASON_LENGTH
        deadline_client.close()
        with Client(address, keys["a"]) as plaintext:  # no TLS: the handshake fails
            with pytest.raises(grpc.RpcError) as err:
                plaintext.list_models(timeout=240)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        monkeypatch.setenv("STRATA_API_KEY", keys["a"])
        assert (
            cli.main(
                [
                    "--gateway",
                    address,
                    "--tls-ca",
                    str(secrets / "ca.pem"),
                    "generate",
                    "--model",
                    MODEL,
                    "--max-tokens",
                    "3",
                    "tls",
                ]
            )
            == 0
        )
        assert "finish_reason=length" in capsys.readouterr().err
    finally:
        p.proc.terminate()
        p.proc.wait(30)


def _serves(client: Client) -> bool:
    try:
        return MODEL in {m.name for m in client.list_models(timeout=240)}
    except grpc.RpcError:
        return False
