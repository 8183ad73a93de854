"""The OpenAI HTTP API on the real stack (dummy-tiny, one node), through the real `openai` SDK:
streamed and non-streamed chat and completions, the same text as gRPC Generate for the same seed,
the SDK's typed errors where OpenAI raises them, n > 1, usage with cached tokens, a disconnect
that frees the request's blocks on the node, /metrics that counts what was served, and /ready
that follows the scheduler; every other service's /metrics counting the same requests."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time

import grpc
import httpx2
import openai
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from strata.client import cli
from strata.client.sdk import Client, build_request
from strata.core import defaults
from strata.rpc.channels import public_sync_channel, sync_channel
from strata.telemetry import names
from strata.v1 import admin_pb2, admin_pb2_grpc, gateway_pb2_grpc, node_pb2, node_pb2_grpc
from tests.integration.conftest import running_stack

pytestmark = pytest.mark.integration
MODEL = "dummy-tiny"
OVERRIDES = {
    "placement": {"STRATA_MODELS": MODEL, "STRATA_REPLAN_INTERVAL_S": "1.0"},
    "node": {"STRATA_TORCH_THREADS": "1", "STRATA_NODE_STANDBY": "0"},
}
MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Name three colours of the rainbow, please."},
]
WAIT_S = 240.0  # deadline of every wait on a busy 2-core machine
HTTP_TIMEOUT_S = 60.0  # one HTTP call's own deadline (polls retry after it)


def status(url: str) -> int | None:
    """The URL's HTTP status, or None when it does not answer in time (a poll tries again)."""
    try:
        return httpx2.get(url, timeout=HTTP_TIMEOUT_S).status_code
    except httpx2.HTTPError:
        return None


def wait_for(check, timeout_s: float, what: str, stack) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"{what} never happened:\n{stack.logs()}"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    with running_stack(tmp_path_factory.mktemp("openai"), OVERRIDES) as s:
        key = (s.data_dir / defaults.DEMO_KEY_FILE).read_text().strip()
        with Client(s.addr("gateway"), key) as c:
            wait_for(lambda: MODEL in {m.name for m in c.list_models()}, 240, "ready", s)
        yield s


@pytest.fixture(scope="module")
def key(stack) -> str:
    return (stack.data_dir / defaults.DEMO_KEY_FILE).read_text().strip()


@pytest.fixture(scope="module")
def client(stack, key) -> openai.OpenAI:
    return openai.OpenAI(base_url=stack.http_url() + "/v1", api_key=key, max_retries=0)


def grpc_text(stack, key: str, **options) -> str:
    with Client(stack.addr("gateway"), key) as c:
        return "".join(chunk.text for chunk in c.generate(MODEL, timeout=WAIT_S, **options))


def test_models_lists_what_the_pool_serves(client):
    models = client.models.list()
    assert MODEL in {m.id for m in models.data}
    assert all(m.object == "model" for m in models.data)


def test_chat_streamed_and_not_equal_grpc_generate_for_the_same_seed(stack, key, client):
    kwargs = {"temperature": 0.8, "seed": 7, "max_tokens": 12}
    whole = client.chat.completions.create(model=MODEL, messages=MESSAGES, **kwargs)
    choice = whole.choices[0]
    assert choice.message.role == "assistant" and choice.finish_reason == "length"
    assert whole.usage.completion_tokens == 12 and whole.usage.prompt_tokens > 0
    assert whole.usage.total_tokens == whole.usage.prompt_tokens + 12
    expected = grpc_text(
        stack, key, messages=[(m["role"], m["content"]) for m in MESSAGES], **kwargs
    )
    assert choice.message.content == expected
    chunks = list(
        client.chat.completions.create(
            model=MODEL,
            messages=MESSAGES,
            stream=True,
            stream_options={"include_usage": True},
            **kwargs,
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == expected
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 12


def test_completions_take_text_lists_and_token_ids(stack, key, client):
    one = client.completions.create(
        model=MODEL, prompt="The quick brown fox", max_tokens=6, temperature=0, seed=1
    )
    assert one.object == "text_completion" and one.usage.completion_tokens == 6
    assert one.choices[0].text == grpc_text(
        stack, key, prompt="The quick brown fox", max_tokens=6, temperature=0
    )
    many = client.completions.create(
        model=MODEL, prompt=["alpha beta", "gamma delta"], max_tokens=4, temperature=0
    )
    assert sorted(c.index for c in many.choices) == [0, 1]
    # Sampled at OpenAI's default temperature: the EOS may come early, so it is ignored.
    ids = client.completions.create(
        model=MODEL, prompt=[5, 6, 7, 8, 9], max_tokens=3, extra_body={"ignore_eos": True}
    )
    assert ids.usage.prompt_tokens == 5 and ids.usage.completion_tokens == 3
    streamed = list(
        client.completions.create(
            model=MODEL, prompt="The quick brown fox", max_tokens=6, temperature=0, stream=True
        )
    )
    assert "".join(c.choices[0].text for c in streamed) == one.choices[0].text


def test_n_choices_usage_and_cached_tokens(client):
    prompt = "a shared prefix that spans several KV blocks " * 8
    first = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": prompt}],
        n=3,
        max_tokens=5,
        temperature=1.0,
        seed=3,
    )
    assert sorted(c.index for c in first.choices) == [0, 1, 2]
    assert first.usage.completion_tokens == 15
    again = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": prompt}], max_tokens=5
    )
    assert again.usage.prompt_tokens_details.cached_tokens > 0
    logprobs = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=3, logprobs=True, top_logprobs=2
    )
    content = logprobs.choices[0].logprobs.content
    assert len(content) == 3 and all(len(t.top_logprobs) == 2 for t in content)
    assert all(t.logprob <= 0 for t in content)


def test_the_sdk_raises_openais_errors(stack, client):
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(
            base_url=stack.http_url() + "/v1", api_key="sk-wrong", max_retries=0
        ).models.list()
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="no-such-model", messages=MESSAGES, max_tokens=2)
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model=MODEL, messages=MESSAGES, temperature=5)
    assert bad.value.body["param"] == "temperature"
    admin_key = (stack.data_dir / defaults.ADMIN_KEY_FILE).read_text().strip()
    with public_sync_channel(stack.addr("gateway")) as ch:
        reply = admin_pb2_grpc.AdminStub(ch).CreateTenant(
            admin_pb2.CreateTenantRequest(
                tenant=admin_pb2.TenantRecord(name="slow", rate_limit_rps=0.01), issue_key=True
            ),
            metadata=(("authorization", f"Bearer {admin_key}"),),
            timeout=WAIT_S,
        )
    slow = openai.OpenAI(base_url=stack.http_url() + "/v1", api_key=reply.api_key, max_retries=0)
    with pytest.raises(openai.RateLimitError) as limited:
        for _ in range(200):  # past the burst allowance
            slow.completions.create(model=MODEL, prompt="hi", max_tokens=1)
    assert int(limited.value.response.headers["retry-after"]) >= 1


def _node_replica(stack):
    with sync_channel(stack.addr("node"), stack.identity) as ch:
        info = node_pb2_grpc.NodeManagerStub(ch).GetNodeStatus(node_pb2.GetNodeStatusRequest())
    return next(r for r in info.replicas if r.model == MODEL)


def test_a_client_that_disconnects_frees_its_blocks(stack, key):
    before = _node_replica(stack)
    body = {
        "model": MODEL,
        "prompt": "tell me a very long story " * 4,
        "max_tokens": 1900,  # within dummy-tiny's 2,048 positions: many seconds of decoding
        "ignore_eos": True,
        "stream": True,
    }
    headers = {"authorization": f"Bearer {key}"}
    with httpx2.stream(
        "POST", stack.http_url() + "/v1/completions", json=body, headers=headers, timeout=WAIT_S
    ) as r:
        assert r.status_code == 200, r.read()
        lines = r.iter_lines()
        got = [next(lines) for _ in range(6)]
        assert any(line.startswith("data: ") for line in got)
        wait_for(lambda: _node_replica(stack).running_requests >= 1, WAIT_S, "running", stack)
    # The stream is closed: the node's worker stops decoding it and frees its blocks.
    wait_for(
        lambda: (
            _node_replica(stack).running_requests == 0
            and _node_replica(stack).kv_blocks_free >= before.kv_blocks_free
        ),
        60,
        "blocks freed after the disconnect",
        stack,
    )


def test_metrics_count_what_was_served(stack, client):
    def scrape() -> dict:
        text = httpx2.get(stack.http_url() + "/metrics", timeout=HTTP_TIMEOUT_S).text
        return {f.name: f for f in text_string_to_metric_families(text)}

    def finished(families) -> float:
        fam = families.get("strata_gateway_requests")
        return sum(
            s.value
            for s in (fam.samples if fam else [])
            if s.name.endswith("_total") and s.labels.get("outcome") == "finished"
        )

    start = finished(scrape())
    n = 5
    for i in range(n):
        client.completions.create(model=MODEL, prompt=f"count me {i}", max_tokens=2)
    families = scrape()
    assert finished(families) - start == n
    ttft = families["strata_gateway_time_to_first_token_seconds"]
    buckets = [s for s in ttft.samples if s.name.endswith("_bucket")]
    by_labels: dict = {}
    for s in buckets:
        key = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
        by_labels.setdefault(key, []).append((float(s.labels["le"]), s.value))
    for series in by_labels.values():
        counts = [v for _, v in sorted(series)]
        assert counts == sorted(counts), "histogram buckets must not decrease"


def _gateway_serving(stack) -> bool:
    with public_sync_channel(stack.addr("gateway")) as ch:
        try:
            reply = health_pb2_grpc.HealthStub(ch).Check(
                health_pb2.HealthCheckRequest(service="strata.v1.Gateway"), timeout=HTTP_TIMEOUT_S
            )
        except grpc.RpcError:
            return False
    return reply.status == health_pb2.HealthCheckResponse.SERVING


# The gRPC service each internal process serves: its readiness (Kubernetes probes it by name).
INTERNAL_SERVICES = {
    "scheduler": "strata.v1.Scheduler",
    "node": "strata.v1.NodeManager",
    "kvstore": "strata.v1.KVStore",
    "placement": "strata.v1.Placement",
    "metrics": "strata.v1.Metrics",
}


def _internal_health(stack, process: str, service: str) -> int | None:
    """The health status of `service` on `process` (None: no answer)."""
    with sync_channel(stack.addr(process), stack.identity) as ch:
        try:
            reply = health_pb2_grpc.HealthStub(ch).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=HTTP_TIMEOUT_S
            )
        except grpc.RpcError:
            return None
    return reply.status


def test_readiness_follows_the_scheduler(stack):
    serving = health_pb2.HealthCheckResponse.SERVING
    ready = stack.http_url() + "/ready"
    wait_for(lambda: status(ready) == 200, WAIT_S, "ready", stack)
    # The gRPC health follows readiness within a second (the gateway checks it every second).
    wait_for(lambda: _gateway_serving(stack), WAIT_S, "SERVING", stack)
    for process, service in INTERNAL_SERVICES.items():
        wait_for(
            lambda p=process, s=service: _internal_health(stack, p, s) == serving,
            WAIT_S,
            f"{process} ready",
            stack,
        )
    scheduler = stack.processes["scheduler"].proc
    scheduler.send_signal(signal.SIGSTOP)  # no answers, as a scheduler that is down
    try:
        wait_for(lambda: status(ready) == 503, WAIT_S, "not ready", stack)
        wait_for(lambda: not _gateway_serving(stack), WAIT_S, "gRPC health NOT_SERVING", stack)
        assert status(stack.http_url() + "/health") == 200
        # The planner cannot plan without the scheduler's view: not ready either, alive still.
        wait_for(
            lambda: (
                _internal_health(stack, "placement", INTERNAL_SERVICES["placement"])
                == health_pb2.HealthCheckResponse.NOT_SERVING
            ),
            WAIT_S,
            "placement NOT_SERVING",
            stack,
        )
        assert _internal_health(stack, "placement", "") == serving
    finally:
        scheduler.send_signal(signal.SIGCONT)
    wait_for(lambda: status(ready) == 200, WAIT_S, "ready again", stack)
    wait_for(lambda: _gateway_serving(stack), WAIT_S, "SERVING again", stack)
    wait_for(
        lambda: _internal_health(stack, "placement", INTERNAL_SERVICES["placement"]) == serving,
        WAIT_S,
        "placement ready again",
        stack,
    )


def _scrape(url: str) -> dict:
    text = httpx2.get(url, timeout=HTTP_TIMEOUT_S).text
    return {f.name: f for f in text_string_to_metric_families(text)}


def _total(families: dict, name: str, **labels: str) -> float:
    fam = families.get(name)
    return sum(
        s.value
        for s in (fam.samples if fam else [])
        if s.name == name + "_total" and all(s.labels.get(k) == v for k, v in labels.items())
    )


def _endpoints(stack) -> dict[str, str]:
    out = {"gateway": stack.http_url() + "/metrics"}
    for name, p in stack.processes.items():
        bind = next((v for k, v in p.env.items() if k.endswith("_PROMETHEUS_BIND")), None)
        if bind:
            out[name] = f"http://{bind}/metrics"
    return out


def test_every_service_serves_prometheus_metrics_that_count_the_requests(stack, client):
    endpoints = _endpoints(stack)
    assert set(endpoints) == {"gateway", "scheduler", "node", "kvstore", "placement", "metrics"}
    before = {name: _scrape(url) for name, url in endpoints.items()}
    n = 4
    for i in range(n):
        client.completions.create(model=MODEL, prompt=f"scrape me {i}", max_tokens=3)
    after = {name: _scrape(url) for name, url in endpoints.items()}

    def grew(service: str, name: str, **labels: str) -> float:
        return _total(after[service], name, **labels) - _total(before[service], name, **labels)

    assert grew("scheduler", "strata_scheduler_route_decisions", outcome="routed") == n
    assert grew("gateway", "strata_gateway_requests", outcome="finished") == n
    wait_for(
        lambda: (
            _total(_scrape(endpoints["node"]), "strata_node_prompt_tokens")
            > _total(before["node"], "strata_node_prompt_tokens")
        ),
        30,
        "the node's counters to follow the requests",
        stack,
    )
    assert after["placement"]["strata_placement_plan_version"].samples[0].value >= 1
    assert "strata_kvstore_blocks" in after["kvstore"]
    assert _total(after["metrics"], "strata_metrics_spans_received") > 0
    node = after["node"]
    running = {s.labels["model"] for s in node["strata_node_requests_running"].samples}
    assert running == {MODEL}
    assert not any("request_id" in s.labels for f in node.values() for s in f.samples)


def test_promtool_accepts_every_services_metrics(stack):
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian: apt install prometheus)")
    for name, url in _endpoints(stack).items():
        text = httpx2.get(url, timeout=HTTP_TIMEOUT_S).text
        done = subprocess.run(
            [promtool, "check", "metrics"], input=text, capture_output=True, text=True
        )
        # promtool warns about naming conventions on stdout; errors fail the check.
        assert done.returncode == 0, f"{name}: {done.stdout}{done.stderr}"


def test_replay_measures_an_openai_server_with_the_same_client(stack, tmp_path, monkeypatch):
    monkeypatch.setenv("STRATA_DATA_DIR", str(stack.data_dir))
    sizes = ["--prompt-tokens", "24", "--output-tokens", "6"]
    args = ["--format", "poisson", "--rate", "8", "--max-requests", "12", *sizes, "--seed", "5",
            "--prompt-seed", "5", "--model", MODEL]  # fmt: skip
    runs = {}
    for target in ("openai", "grpc"):
        extra = ["--target", "openai", "--url", stack.http_url()] if target == "openai" else []
        out = tmp_path / target
        code = cli.main(["--gateway", stack.addr("gateway"), "replay", *args, *extra,
                         "--out", str(out)])  # fmt: skip
        assert code == 0
        [run_dir] = list(out.iterdir())
        runs[target] = [
            json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines()
        ]
    openai_rows, grpc_rows = runs["openai"], runs["grpc"]
    assert len(openai_rows) == len(grpc_rows) == 12
    assert all(r["status"] == "OK" and r["ttft_s"] > 0 for r in openai_rows)
    # The same requests: the same token counts, whichever front measured them.
    key = "index", "output_tokens", "prompt_tokens"
    assert [tuple(r[k] for k in key) for r in openai_rows] == [
        tuple(r[k] for k in key) for r in grpc_rows
    ]


def test_a_request_may_ask_for_a_lower_class_never_a_higher_one(stack, key, client):
    def asking(cls: str) -> openai.OpenAI:
        return openai.OpenAI(
            base_url=stack.http_url() + "/v1",
            api_key=key,
            max_retries=0,
            default_headers={names.SLA_CLASS_METADATA: cls},
        )

    # The demo key is of the standard class: batch is lower, interactive higher.
    done = asking("batch").completions.create(model=MODEL, prompt="lower", max_tokens=2)
    assert done.usage.completion_tokens == 2
    with pytest.raises(openai.PermissionDeniedError, match="only for a lower one"):
        asking("interactive").completions.create(model=MODEL, prompt="higher", max_tokens=2)
    with pytest.raises(openai.BadRequestError, match="unknown SLA class"):
        asking("platinum").completions.create(model=MODEL, prompt="unknown", max_tokens=2)
    # The same rule on gRPC, from the call's metadata.
    with public_sync_channel(stack.addr("gateway")) as ch:
        stub = gateway_pb2_grpc.GatewayStub(ch)
        call = stub.Generate(
            build_request(MODEL, "higher", max_tokens=2),
            metadata=(
                ("authorization", f"Bearer {key}"),
                (names.SLA_CLASS_METADATA, "interactive"),
            ),
            timeout=WAIT_S,
        )
        with pytest.raises(grpc.RpcError) as err:
            list(call)
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
