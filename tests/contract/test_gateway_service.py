"""Gateway in-process on port 0 with a real SQLite key store and the real scheduler servicer; a
fake node manager (test-only) answers Submit with three chunks and records what it received.

Checked: API-key auth, each validation sentence, rate limiting with retry-after-ms, NOT_FOUND
from the scheduler, chunk forwarding with request and trace ids, the gateway span's attributes,
node failures and cancellation.
"""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import grpc
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from services.scheduler.servicer import SchedulerServicer
from strata.gateway.auth import Authenticator
from strata.policy.clock import ManualClock
from strata.policy.ratelimit import TenantRateLimiter
from strata.policy.registry import NodeRegistry
from strata.policy.routing import Router
from strata.rpc.server import Registration, channel, start_server
from strata.store.db import create_all, make_engine, session_factory
from strata.store.tenants import create_tenant, issue_api_key, revoke_api_key
from strata.telemetry import names
from strata.v1 import (
    common_pb2,
    gateway_pb2,
    gateway_pb2_grpc,
    node_pb2_grpc,
    scheduler_pb2,
    scheduler_pb2_grpc,
)
from tests.contract.helpers import gateway_servicer, global_spans, spans_named

MODEL = "dummy-tiny"
TENANT = "acme"
PIECES = ["Paris", " is", " lovely."]
STOP = common_pb2.FINISH_REASON_STOP
GAP_S = 0.03
MISSING_KEY = "missing API key: send metadata 'authorization: Bearer <key>'"
BAD_KEY = "unknown or revoked API key; ask your admin for a valid key"


class FakeNode(node_pb2_grpc.NodeManagerServicer):
    """Streams PIECES one token each, GAP_S apart; `fail` makes Submit abort instead. Test-only."""

    def __init__(self) -> None:
        self.submits: list = []
        self.fail: tuple[grpc.StatusCode, str] | None = None
        self.cancelled = asyncio.Event()

    async def Submit(self, request, context):
        self.submits.append(request)
        if self.fail is not None:
            await context.abort(*self.fail)
        if request.spec.prompt == "endless":
            try:
                while True:
                    yield common_pb2.GenerationChunk(
                        request_id=request.request_id, text="x", token_ids=[1]
                    )
                    await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
        for i, piece in enumerate(PIECES):
            if i:
                await asyncio.sleep(GAP_S)
            chunk = common_pb2.GenerationChunk(
                request_id=request.request_id, text=piece, token_ids=[100 + i]
            )
            if i == len(PIECES) - 1:
                chunk.finish_reason = STOP
                chunk.usage.CopyFrom(
                    common_pb2.Usage(
                        prompt_tokens=9, completion_tokens=3, cached_prompt_tokens=4, queue_ms=7.5
                    )
                )
            yield chunk


@dataclass
class Env:
    gateway: gateway_pb2_grpc.GatewayStub
    node: FakeNode
    key: str
    sessions: async_sessionmaker[AsyncSession]
    auth_clock: ManualClock
    rate_clock: ManualClock
    # (rate, burst) -> another gateway on the same store, scheduler and node
    start_gateway: Callable[[float, float], Awaitable[gateway_pb2_grpc.GatewayStub]]


@pytest.fixture
async def env(tmp_path):
    db = make_engine(f"sqlite+aiosqlite:///{tmp_path / 'strata.db'}")
    await create_all(db)
    sessions = session_factory(db)
    async with sessions() as session:
        await create_tenant(session, TENANT)
        key = await issue_api_key(session, TENANT)

    servers, channels = [], []

    async def serve(registration: Registration) -> str:
        running = await start_server([registration])
        servers.append(running)
        return running.address

    def connect(address: str) -> grpc.aio.Channel:
        ch = channel(address)
        channels.append(ch)
        return ch

    node = FakeNode()
    node_addr = await serve(
        Registration(
            add=lambda s: node_pb2_grpc.add_NodeManagerServicer_to_server(node, s),
            service_name="strata.v1.NodeManager",
        )
    )
    # The scheduler holds the tenants' rates across gateways on its registry's clock: the same
    # clock as the gateways' own limiters, so the tests move both.
    auth_clock, rate_clock = ManualClock(), ManualClock()
    scheduler = SchedulerServicer(
        NodeRegistry(clock=rate_clock), Router(rng=random.Random(0)), heartbeat_interval_s=1.0
    )
    scheduler_addr = await serve(
        Registration(
            add=lambda s: scheduler_pb2_grpc.add_SchedulerServicer_to_server(scheduler, s),
            service_name="strata.v1.Scheduler",
        )
    )
    await scheduler_pb2_grpc.SchedulerStub(connect(scheduler_addr)).Heartbeat(
        scheduler_pb2.HeartbeatRequest(
            node=common_pb2.NodeInfo(
                node_id="node-1",
                address=node_addr,
                replicas=[
                    common_pb2.ReplicaInfo(
                        model=MODEL,
                        replica_id="node-1-r0",
                        state=common_pb2.REPLICA_STATE_READY,
                        kv_blocks_total=64,
                        kv_blocks_free=64,
                    )
                ],
            ),
            models=[common_pb2.ModelInfo(name=MODEL, context_length=2048, memory_bytes=1_000_000)],
        )
    )
    gateways: list = []

    async def start_gateway(rate: float, burst: float) -> gateway_pb2_grpc.GatewayStub:
        servicer = gateway_servicer(
            scheduler_addr,
            Authenticator(sessions, auth_clock.now, ttl_s=10.0),
            TenantRateLimiter(rate_clock, rate, burst),
            request_timeout_s=10.0,
        )
        gateways.append(servicer)
        addr = await serve(
            Registration(
                add=lambda s: gateway_pb2_grpc.add_GatewayServicer_to_server(servicer, s),
                service_name=gateway_pb2.DESCRIPTOR.services_by_name["Gateway"].full_name,
            )
        )
        return gateway_pb2_grpc.GatewayStub(connect(addr))

    stub = await start_gateway(1000.0, 1000.0)
    yield Env(stub, node, key, sessions, auth_clock, rate_clock, start_gateway)
    for servicer in gateways:
        await servicer.close()  # waits for tokenizer loads its requests started
    for ch in channels:
        await ch.close()
    for running in reversed(servers):
        await running.stop(0)
    await db.dispose()


def auth(key: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {key}"),)


def request(**overrides) -> gateway_pb2.GenerateRequest:
    fields = dict(
        model=MODEL,
        prompt="What is the capital of France?",
        max_tokens=16,
        sampling=common_pb2.SamplingParams(temperature=0.5, top_p=0.9, seed=7),
        stop=["\n\n"],
    )
    fields.update(overrides)
    return gateway_pb2.GenerateRequest(**fields)


async def collect(stub, req: gateway_pb2.GenerateRequest, metadata) -> list:
    return [c async for c in stub.Generate(req, metadata=metadata)]


async def rpc_error(coro) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await coro
    return err.value


async def test_missing_and_unknown_keys_are_unauthenticated(env):
    for metadata, details in [
        ((), MISSING_KEY),
        ((("authorization", "Basic abc"),), MISSING_KEY),
        (auth("sk-strata-not-issued"), BAD_KEY),
        (auth("hunter2"), BAD_KEY),
    ]:
        err = await rpc_error(collect(env.gateway, request(), metadata))
        assert (err.code(), err.details()) == (grpc.StatusCode.UNAUTHENTICATED, details)
        err = await rpc_error(
            env.gateway.ListModels(common_pb2.ListModelsRequest(), metadata=metadata)
        )
        assert (err.code(), err.details()) == (grpc.StatusCode.UNAUTHENTICATED, details)
    assert env.node.submits == []


async def test_a_revoked_key_keeps_working_until_the_auth_cache_expires(env):
    assert len(await collect(env.gateway, request(), auth(env.key))) == 3
    async with env.sessions() as session:
        assert await revoke_api_key(session, env.key) is True
    env.auth_clock.advance(9.9)  # the positive answer is cached for 10 s
    assert len(await collect(env.gateway, request(), auth(env.key))) == 3
    env.auth_clock.advance(0.2)
    err = await rpc_error(collect(env.gateway, request(), auth(env.key)))
    assert (err.code(), err.details()) == (grpc.StatusCode.UNAUTHENTICATED, BAD_KEY)


@pytest.mark.parametrize(
    ("overrides", "details"),
    [
        (dict(max_tokens=0), "max_tokens must be between 1 and 32768, got 0"),
        (
            dict(sampling=common_pb2.SamplingParams(temperature=3)),
            "temperature must be between 0 and 2, got 3",
        ),
        (
            dict(sampling=common_pb2.SamplingParams(temperature=1e-45)),
            "temperature must be 0 (greedy) or at least 1e-05, got 1.4013e-45; "
            "a smaller one samples "
            "the most likely token anyway",
        ),
        (
            dict(sampling=common_pb2.SamplingParams(repetition_penalty=float("nan"))),
            "repetition_penalty must be positive (0 or 1 disables it), got nan",
        ),
        (
            dict(messages=[common_pb2.ChatMessage(role="user", content="Hi")]),
            "give exactly one of prompt, messages or prompt token ids",
        ),
        (
            dict(prompt="", messages=[common_pb2.ChatMessage(role="robot", content="Hi")]),
            "messages[0].role must be system, user, assistant or tool, got 'robot'",
        ),
        (dict(stop=["\n", ""]), "stop strings must not be empty"),
        (dict(model=""), "model is required; call ListModels to see what this deployment serves"),
    ],
)
async def test_invalid_requests_name_the_problem(env, overrides, details):
    err = await rpc_error(collect(env.gateway, request(**overrides), auth(env.key)))
    assert (err.code(), err.details()) == (grpc.StatusCode.INVALID_ARGUMENT, details)
    assert env.node.submits == []


async def test_unknown_model_is_not_found_from_the_scheduler(env):
    exporter = global_spans()
    err = await rpc_error(collect(env.gateway, request(model="llama-9000"), auth(env.key)))
    assert err.code() == grpc.StatusCode.NOT_FOUND
    assert (
        err.details() == f"model 'llama-9000' is not served by this cluster; known models: {MODEL}"
    )
    (span,) = spans_named(exporter, names.SPAN_GATEWAY_GENERATE)
    assert span.attributes[names.ERROR_CODE] == "NOT_FOUND"
    assert span.attributes[names.GEN_AI_REQUEST_MODEL] == "llama-9000"
    assert (span.status.status_code.name, span.status.description) == ("ERROR", err.details())
    assert env.node.submits == []


async def test_over_the_rate_the_tenant_gets_resource_exhausted_with_retry_after(env):
    limited = await env.start_gateway(1.0, 1.0)
    assert len(await collect(limited, request(), auth(env.key))) == 3
    err = await rpc_error(collect(limited, request(), auth(env.key)))
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert err.details() == "tenant 'acme' is over its request rate; retry in 1000 ms"
    assert [(k, v) for k, v in err.trailing_metadata() if k == "retry-after-ms"] == [
        ("retry-after-ms", "1001")
    ]
    env.rate_clock.advance(0.5)
    err = await rpc_error(collect(limited, request(), auth(env.key)))
    assert err.details() == "tenant 'acme' is over its request rate; retry in 500 ms"
    env.rate_clock.advance(0.5)
    assert len(await collect(limited, request(), auth(env.key))) == 3
    assert len(env.node.submits) == 2


async def test_a_tenants_rate_holds_across_gateways_through_their_scheduler(env):
    # Each gateway allows the tenant 1/s; the scheduler both route through holds one bucket.
    first, second = await env.start_gateway(1.0, 1.0), await env.start_gateway(1.0, 1.0)
    assert len(await collect(first, request(), auth(env.key))) == 3
    err = await rpc_error(collect(second, request(), auth(env.key)))
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert err.details() == (
        "tenant 'acme' is over its request rate of 1/s (across every gateway); retry in 1000 ms"
    )
    trailers = dict(err.trailing_metadata())
    assert (trailers["retry-after-ms"], trailers["x-strata-refusal-reason"]) == ("1001", "rate")
    env.rate_clock.advance(1.0)
    assert len(await collect(second, request(), auth(env.key))) == 3


async def test_chunks_are_forwarded_with_request_and_trace_ids(env):
    exporter = global_spans()
    chunks = await collect(env.gateway, request(), auth(env.key))
    assert [(c.text, list(c.token_ids), c.finish_reason) for c in chunks] == [
        ("Paris", [100], 0),
        (" is", [101], 0),
        (" lovely.", [102], STOP),
    ]
    assert [c.usage for c in chunks[:-1]] == [common_pb2.Usage()] * 2
    usage = chunks[-1].usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.cached_prompt_tokens) == (9, 3, 4)
    [submit] = env.node.submits
    assert {c.request_id for c in chunks} == {submit.request_id}
    assert re.fullmatch(r"[0-9a-f]{32}", submit.request_id)
    (trace_id,) = {c.trace_id for c in chunks}
    assert re.fullmatch(r"[0-9a-f]{32}", trace_id) and trace_id != "0" * 32

    assert (submit.tenant, submit.replica_id) == (TENANT, "node-1-r0")
    assert submit.spec == common_pb2.GenerationSpec(
        model=MODEL,
        prompt="What is the capital of France?",
        max_tokens=16,
        stop=["\n\n"],
        sampling=common_pb2.SamplingParams(temperature=0.5, top_p=0.9, seed=7),
    )

    (span,) = spans_named(exporter, names.SPAN_GATEWAY_GENERATE)
    assert format(span.context.trace_id, "032x") == trace_id
    attrs = dict(span.attributes)
    timings = {
        k: attrs.pop(k)
        for k in (
            names.TTFT_MS,
            names.TPOT_MS,
            names.E2E_MS,
            names.ITL_P50_MS,
            names.ITL_P95_MS,
            names.ITL_P99_MS,
        )
    }
    assert attrs == {
        names.GEN_AI_SYSTEM: "strata",
        names.GEN_AI_OPERATION: "text_completion",
        names.TENANT: TENANT,
        names.REQUEST_ID: submit.request_id,
        names.GEN_AI_REQUEST_MODEL: MODEL,
        names.GEN_AI_REQUEST_MAX_TOKENS: 16,
        names.GEN_AI_REQUEST_TEMPERATURE: pytest.approx(0.5),
        names.NODE_ID: "node-1",
        names.GEN_AI_USAGE_INPUT_TOKENS: 9,
        names.GEN_AI_USAGE_OUTPUT_TOKENS: 3,
        names.CACHED_TOKENS: 4,
        names.QUEUE_MS: 7.5,
        names.GEN_AI_RESPONSE_FINISH_REASONS: ("stop",),
    }
    ttft, tpot, e2e = timings[names.TTFT_MS], timings[names.TPOT_MS], timings[names.E2E_MS]
    # three tokens sent GAP_S apart: two gaps between the first token and the last
    assert 0 < ttft < e2e
    assert tpot > GAP_S * 1000 / 2
    assert e2e == pytest.approx(ttft + 2 * tpot)
    assert span.status.status_code.name == "UNSET"


async def test_chat_messages_are_passed_on_and_named_chat_on_the_span(env):
    exporter = global_spans()
    messages = [
        common_pb2.ChatMessage(role="system", content="Be brief."),
        common_pb2.ChatMessage(role="user", content="Capital of France?"),
    ]
    chunks = await collect(env.gateway, request(prompt="", messages=messages), auth(env.key))
    assert "".join(c.text for c in chunks) == "Paris is lovely."
    [submit] = env.node.submits
    assert [(m.role, m.content) for m in submit.spec.messages] == [
        ("system", "Be brief."),
        ("user", "Capital of France?"),
    ]
    assert submit.spec.prompt == ""
    (span,) = spans_named(exporter, names.SPAN_GATEWAY_GENERATE)
    assert span.attributes[names.GEN_AI_OPERATION] == "chat"


async def test_list_models_comes_from_the_scheduler(env):
    reply = await env.gateway.ListModels(common_pb2.ListModelsRequest(), metadata=auth(env.key))
    assert [(m.name, m.context_length, m.memory_bytes) for m in reply.models] == [
        (MODEL, 2048, 1_000_000)
    ]


async def test_a_node_failing_unavailable_is_passed_on_and_recorded(env):
    exporter = global_spans()
    env.node.fail = (grpc.StatusCode.UNAVAILABLE, "node node-1 is draining; retry")
    err = await rpc_error(collect(env.gateway, request(), auth(env.key)))
    assert (err.code(), err.details()) == (
        grpc.StatusCode.UNAVAILABLE,
        "node node-1 is draining; retry",
    )
    (span,) = spans_named(exporter, names.SPAN_GATEWAY_GENERATE)
    assert span.attributes[names.ERROR_CODE] == "UNAVAILABLE"
    assert span.attributes[names.NODE_ID] == "node-1"
    assert (span.status.status_code.name, span.status.description) == (
        "ERROR",
        "node node-1 is draining; retry",
    )
    assert names.GEN_AI_RESPONSE_FINISH_REASONS not in span.attributes


async def test_a_cancelled_call_cancels_the_node_call_and_is_recorded(env):
    exporter = global_spans()
    call = env.gateway.Generate(request(prompt="endless"), metadata=auth(env.key))
    assert (await call.read()).text == "x"
    call.cancel()
    await asyncio.wait_for(env.node.cancelled.wait(), timeout=5)
    for _ in range(100):
        if spans_named(exporter, names.SPAN_GATEWAY_GENERATE):
            break
        await asyncio.sleep(0.01)
    (span,) = spans_named(exporter, names.SPAN_GATEWAY_GENERATE)
    assert span.attributes[names.ERROR_CODE] == "CANCELLED"
    assert span.attributes[names.GEN_AI_RESPONSE_FINISH_REASONS] == ("aborted",)
