"""The whole stack as processes (compose's commands and environment), serving dummy-tiny."""

import time

import grpc
import pytest
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

from strata.client.sdk import Client
from strata.core import defaults
from strata.rpc.channels import public_sync_channel, sync_channel
from strata.v1 import (
    common_pb2,
    kvstore_pb2,
    kvstore_pb2_grpc,
    metrics_pb2,
    metrics_pb2_grpc,
    node_pb2,
    node_pb2_grpc,
)

pytestmark = pytest.mark.integration
MODEL = "dummy-tiny"


def _key(stack) -> str:
    return (stack.data_dir / defaults.DEMO_KEY_FILE).read_text().strip()


def _client(stack, key=None) -> Client:
    return Client(stack.addr("gateway"), key or _key(stack))


def _wait_model_ready(stack, timeout_s=240):
    deadline = time.monotonic() + timeout_s
    client = _client(stack)
    while time.monotonic() < deadline:
        if MODEL in {m.name for m in client.list_models()}:
            return
        time.sleep(0.3)
    raise AssertionError(f"{MODEL} never became ready:\n{stack.logs()}")


def _node_replica(stack) -> common_pb2.ReplicaInfo:
    with sync_channel(stack.addr("node"), stack.identity) as ch:
        info = node_pb2_grpc.NodeManagerStub(ch).GetNodeStatus(node_pb2.GetNodeStatusRequest())
    # the serving replica (compose keeps a hot standby of it too)
    [replica] = [
        r for r in info.replicas if r.model == MODEL and r.state == common_pb2.REPLICA_STATE_READY
    ]
    return replica


def _poll(fn, timeout_s=240.0, interval=0.2):
    """fn()'s first truthy value, or its last value once `timeout_s` has passed (a deadline
    for a busy 2-core machine)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = fn()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


def _trace(stack, trace_id):
    with sync_channel(stack.addr("metrics"), stack.identity) as ch:
        stub = metrics_pb2_grpc.MetricsStub(ch)
        try:
            return stub.GetTrace(metrics_pb2.GetTraceRequest(trace_id=trace_id)).spans
        except grpc.RpcError as err:
            if err.code() == grpc.StatusCode.NOT_FOUND:
                return []
            raise


@pytest.fixture(scope="module")
def ready(stack):
    _wait_model_ready(stack)
    return stack


def test_streamed_generation_through_the_gateway(ready):
    chunks = list(_client(ready).generate(MODEL, prompt="Hello, Strata!", max_tokens=12))
    assert len(chunks) == 12  # one chunk per token, streamed as decoded
    assert all(len(c.token_ids) == 1 for c in chunks)
    last = chunks[-1]
    assert last.finish_reason == common_pb2.FINISH_REASON_LENGTH
    assert last.usage.completion_tokens == 12
    assert last.usage.prompt_tokens == len(b"Hello, Strata!")
    assert len({c.request_id for c in chunks}) == 1
    assert len(last.trace_id) == 32


def test_one_trace_spans_every_hop_and_the_request_lands_in_the_report(ready):
    chunks = list(_client(ready).generate(MODEL, messages=[("user", "trace me")], max_tokens=4))
    trace_id = chunks[-1].trace_id
    # each service exports its spans in batches, so a service's grpc server span can land
    # before its own generate span: wait for the named spans, not just for every service
    want = {
        "strata.gateway.generate",
        "strata.scheduler.route",
        "strata.node.submit",
        "strata.worker.generate",
    }
    spans = _poll(
        lambda: (lambda s: s if want <= {x.name for x in s} else [])(_trace(ready, trace_id))
    )
    assert spans, f"trace {trace_id} never had all of {want}:\n{_trace(ready, trace_id)}"
    assert {s.trace_id for s in spans} == {trace_id}
    assert {"gateway", "scheduler", "node", "worker"} <= {s.service for s in spans}

    def report_row():
        with sync_channel(ready.addr("metrics"), ready.identity) as ch:
            rep = metrics_pb2_grpc.MetricsStub(ch).GetReport(
                metrics_pb2.ReportRequest(tenant=defaults.DEMO_TENANT)
            )
        return [t for t in rep.tenants if t.tenant == defaults.DEMO_TENANT and t.requests >= 1]

    [row] = _poll(report_row)
    assert row.ttft_ms.p50 > 0 and row.e2e_ms.p99 >= row.ttft_ms.p50
    assert row.completion_tokens >= 4
    # the request id (what `strata replay` stores per request) finds the same trace
    by_request = _trace(ready, chunks[-1].request_id)
    assert {s.trace_id for s in by_request} == {trace_id}
    assert {s.span_id for s in spans} <= {s.span_id for s in by_request}


def test_unknown_api_key_is_refused(ready):
    with pytest.raises(grpc.RpcError) as err:
        list(_client(ready, key="sk-strata-not-a-real-key").generate(MODEL, prompt="hi"))
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "unknown or revoked API key" in err.value.details()


def test_bad_requests_get_precise_statuses(ready):
    client = _client(ready)
    with pytest.raises(grpc.RpcError) as err:
        list(client.generate(MODEL, prompt="hi", max_tokens=0))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details() == "max_tokens must be between 1 and 32768, got 0"
    with pytest.raises(grpc.RpcError) as err:
        list(client.generate("no-such-model", prompt="hi", max_tokens=4))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert MODEL in err.value.details()  # the message lists what is served
    with pytest.raises(grpc.RpcError) as err:  # the worker knows the context length (2048)
        list(client.generate(MODEL, prompt="x" * 2000, max_tokens=100))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "exceeds the model's context" in err.value.details()


def test_cancelled_stream_frees_its_kv_blocks(ready):
    before = _poll(
        lambda: (lambda r: r if r.running_requests == 0 else None)(_node_replica(ready))
    ).kv_blocks_free
    stream = _client(ready).generate(MODEL, prompt="a long one " * 20, max_tokens=1800)
    got = [next(stream), next(stream)]
    assert all(c.token_ids for c in got)
    busy = _poll(lambda: (lambda r: r if r.kv_blocks_free < before else None)(_node_replica(ready)))
    assert busy is not None, "the running request holds no blocks?"
    stream.close()  # cancels the call: gateway -> node manager -> worker abort
    freed = _poll(
        lambda: (lambda r: r if r.kv_blocks_free == before and r.running_requests == 0 else None)(
            _node_replica(ready)
        )
    )
    assert freed is not None, "blocks were not returned after the stream was cancelled"


def test_concurrent_requests_are_batched_not_serialized(ready):
    import concurrent.futures as cf

    barrier = __import__("threading").Barrier(4)

    def one(i):
        client = _client(ready)
        barrier.wait()
        # ~0.5 s each on dummy-tiny: long enough that arrival skew cannot explain an overlap
        # (ignore_eos: dummy-tiny's random weights end "request 1 ..." after 11 tokens)
        return list(
            client.generate(MODEL, prompt=f"request {i} " * 4, max_tokens=300, ignore_eos=True)
        )

    with cf.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(one, range(4)))
    trace_ids = [r[-1].trace_id for r in results]
    spans = []
    for tid in trace_ids:
        got = _poll(
            lambda tid=tid: [s for s in _trace(ready, tid) if s.name == "strata.worker.generate"]
        )
        spans.extend(got)
    assert len(spans) == 4
    # Every pair of worker spans overlaps in time: the engine decoded them in shared steps.
    for a in spans:
        for b in spans:
            assert a.start_unix_nano < b.end_unix_nano and b.start_unix_nano < a.end_unix_nano


def test_evicted_blocks_go_to_the_kv_tier_and_come_back_on_a_prefix_hit(ready):
    client = _client(ready)
    first = "The quick brown fox jumps over the lazy dog. " * 8  # 360 bytes: 22 blocks
    list(client.generate(MODEL, prompt=first, max_tokens=2))
    for i in range(14):  # other long prompts push the first one's blocks out of the 256
        list(
            client.generate(MODEL, prompt=f"{i} filler text that differs {i}. " * 12, max_tokens=2)
        )
    with sync_channel(ready.addr("kvstore"), ready.identity) as ch:
        stats = kvstore_pb2_grpc.KVStoreStub(ch).GetStats(kvstore_pb2.KVStatsRequest())
    assert stats.blocks > 0, "no evicted block reached the KV tier store"
    again = list(client.generate(MODEL, prompt=first, max_tokens=2))
    # 359 of 360 prompt tokens are eligible (the last is recomputed): 22 full blocks of 16
    assert again[-1].usage.cached_prompt_tokens == 22 * 16
    with sync_channel(ready.addr("kvstore"), ready.identity) as ch:
        after = kvstore_pb2_grpc.KVStoreStub(ch).GetStats(kvstore_pb2.KVStatsRequest())
    assert after.hits >= stats.hits + 1


def test_every_service_serves_health_and_reflection(ready):
    worker = _node_replica(ready).worker_address
    addresses = {name: ready.addr(name) for name in ready.processes} | {"worker": worker}
    assert len(addresses) == 7
    for name, address in addresses.items():
        with (
            public_sync_channel(address)
            if name == "gateway"
            else sync_channel(address, ready.identity)
        ) as ch:
            db = ProtoReflectionDescriptorDatabase(ch)
            services = set(db.get_services())
        assert "grpc.health.v1.Health" in services, name
        assert any(s.startswith("strata.v1.") for s in services), (name, services)
