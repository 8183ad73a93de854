"""Gateway in-process on port 0 in front of the real scheduler servicer (recording each Route) and
a fake node manager (test-only, recording each Submit): the gateway sends the prompt's block hash
chain, the scheduler steers the request to the node holding the prefix, and the route's KV source
reaches the node. Unknown models and prompts that do not tokenize are routed without hashes."""

from __future__ import annotations

import random
from dataclasses import dataclass

import grpc
import pytest

from services.scheduler.servicer import SchedulerServicer
from strata.engine.dummy import load_dummy
from strata.engine.prompt import prompt_ids
from strata.gateway.auth import Authenticator
from strata.gateway.prefix_hashes import PrefixHasher, load_engine_tokenizer
from strata.kvtier.hashing import HashKeys, chain_hashes
from strata.policy.clock import ManualClock
from strata.policy.ratelimit import TenantRateLimiter
from strata.policy.registry import NodeRegistry
from strata.policy.routing import Router
from strata.policy.scheduling.stale_routing import StaleRouter
from strata.rpc.server import Registration, channel, start_server
from strata.store.db import create_all, make_engine, session_factory
from strata.store.tenants import create_tenant, issue_api_key
from strata.v1 import (
    common_pb2,
    gateway_pb2,
    gateway_pb2_grpc,
    node_pb2_grpc,
    scheduler_pb2,
    scheduler_pb2_grpc,
)
from tests.contract.helpers import gateway_servicer

MODEL = "dummy-tiny"
TENANT = "acme"
PROMPT = "The tiered KV store keeps hot blocks on the device and cold ones below. " * 2


class RecordingScheduler(SchedulerServicer):
    def __init__(self) -> None:
        super().__init__(
            NodeRegistry(clock=ManualClock()),
            Router(rng=random.Random(0)),
            heartbeat_interval_s=1.0,
        )
        self.routes: list[scheduler_pb2.RouteRequest] = []

    async def Route(self, request, context):
        self.routes.append(request)
        return await super().Route(request, context)


class FakeNode(node_pb2_grpc.NodeManagerServicer):
    """Answers every Submit with one token. Test-only."""

    def __init__(self) -> None:
        self.submits: list = []

    async def Submit(self, request, context):
        self.submits.append(request)
        yield common_pb2.GenerationChunk(
            request_id=request.request_id,
            text="ok",
            token_ids=[1],
            finish_reason=common_pb2.FINISH_REASON_STOP,
        )


class RefusingTokenizer:
    """A tokenizer that cannot encode anything (as a checkpoint's broken template would)."""

    def encode(self, text: str) -> list[int]:
        raise ValueError("this tokenizer cannot encode")


class Loader:
    """The gateway's own tokenizer loader, counted; `refuse` swaps in RefusingTokenizer."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.refuse = False

    def __call__(self, model: str):
        self.calls.append(model)
        named = load_engine_tokenizer(model)
        if self.refuse:
            named = type(named)(named.name, RefusingTokenizer())
        return named


@dataclass
class Env:
    gateway: gateway_pb2_grpc.GatewayStub
    servicer: object
    scheduler: RecordingScheduler
    scheduler_stub: scheduler_pb2_grpc.SchedulerStub
    node: FakeNode
    node_addr: str
    hasher: PrefixHasher
    loader: Loader
    metadata: tuple[tuple[str, str], ...]


def heartbeat(
    node_id: str, address: str, queued: int = 0, block_size: int = 16
) -> scheduler_pb2.HeartbeatRequest:
    return scheduler_pb2.HeartbeatRequest(
        node=common_pb2.NodeInfo(
            node_id=node_id,
            address=address,
            replicas=[
                common_pb2.ReplicaInfo(
                    model=MODEL,
                    replica_id=f"{node_id}-r0",
                    queued_tokens=queued,
                    state=common_pb2.REPLICA_STATE_READY,
                    kv_blocks_total=64,
                    kv_blocks_free=64,
                    kv_block_size=block_size,
                )
            ],
        ),
        models=[common_pb2.ModelInfo(name=MODEL, context_length=2048)],
    )


@pytest.fixture
async def env(tmp_path):
    db = make_engine(f"sqlite+aiosqlite:///{tmp_path / 'strata.db'}")
    await create_all(db)
    sessions = session_factory(db)
    async with sessions() as session:
        await create_tenant(session, TENANT)
        key = await issue_api_key(session, TENANT)
    node, scheduler = FakeNode(), RecordingScheduler()
    servers = [
        await start_server(
            [
                Registration(
                    add=lambda s: node_pb2_grpc.add_NodeManagerServicer_to_server(node, s),
                    service_name="strata.v1.NodeManager",
                )
            ]
        ),
        await start_server(
            [
                Registration(
                    add=lambda s: scheduler_pb2_grpc.add_SchedulerServicer_to_server(scheduler, s),
                    service_name="strata.v1.Scheduler",
                )
            ]
        ),
    ]
    channels = [channel(servers[1].address)]
    loader = Loader()
    hasher = PrefixHasher(loader=loader)
    gateway = gateway_servicer(
        servers[1].address,
        Authenticator(sessions, ManualClock().now, ttl_s=10.0),
        TenantRateLimiter(ManualClock(), 1000.0, 1000.0),
        request_timeout_s=10.0,
        prefixes=hasher,
        stale=StaleRouter(ManualClock(), 30.0),
    )
    servers.append(
        await start_server(
            [
                Registration(
                    add=lambda s: gateway_pb2_grpc.add_GatewayServicer_to_server(gateway, s),
                    service_name=gateway_pb2.DESCRIPTOR.services_by_name["Gateway"].full_name,
                )
            ]
        )
    )
    channels.append(channel(servers[2].address))
    yield Env(
        gateway_pb2_grpc.GatewayStub(channels[1]),
        gateway,
        scheduler,
        scheduler_pb2_grpc.SchedulerStub(channels[0]),
        node,
        servers[0].address,
        hasher,
        loader,
        (("authorization", f"Bearer {key}"),),
    )
    await gateway.close()
    for ch in channels:
        await ch.close()
    for running in reversed(servers):
        await running.stop(0)
    await db.dispose()


async def generate(env: Env, **fields) -> list[gateway_pb2.GenerateResponse]:
    req = gateway_pb2.GenerateRequest(
        **{"model": MODEL, "prompt": PROMPT, "max_tokens": 4, **fields}
    )
    return [c async for c in env.gateway.Generate(req, metadata=env.metadata)]


def worker_view(prompt: str, tenant: str = TENANT) -> tuple[int, list[int]]:
    """Prompt length and block hashes as the decode worker computes them."""
    ids = prompt_ids(load_dummy(MODEL).tokenizer, prompt, [])
    return len(ids), chain_hashes(ids[:-1], 16, HashKeys.for_request(MODEL, tenant, False))


async def test_the_prompts_hashes_steer_routing_and_the_kv_source_reaches_the_node(env):
    await env.scheduler_stub.Heartbeat(heartbeat("node-1", env.node_addr))
    await env.scheduler_stub.Heartbeat(heartbeat("node-2", env.node_addr, queued=100))
    tokens, hashes = worker_view(PROMPT)
    assert (tokens, len(hashes)) == (144, 8)

    # First request: the tokenizer is not loaded yet, so no hashes; routed by load to node-1.
    assert [c.text for c in await generate(env)] == ["ok"]
    first = env.scheduler.routes[-1]
    assert (list(first.prefix_hashes), first.prompt_tokens_estimate) == ([], len(PROMPT) // 4)
    assert env.node.submits[-1].replica_id == "node-1-r0"
    await env.hasher.close()  # the load the first request started
    assert env.loader.calls == [MODEL]

    # node-2's store holds the prompt's 8 blocks: 100 queued + 16 to prefill beats 0 + 144.
    reply = await env.scheduler_stub.ReportKVEvents(
        scheduler_pb2.KVEventsRequest(
            node_id="node-2", store_address="node-2.kv:50057", sequence=1, reset=True, stored=hashes
        )
    )
    assert reply.need_reset is False
    await generate(env)
    route = env.scheduler.routes[-1]
    assert (list(route.prefix_hashes), route.prompt_tokens_estimate) == (hashes, 144)
    submit = env.node.submits[-1]
    assert (submit.replica_id, submit.kv_source_address) == ("node-2-r0", "")

    # node-2 much busier: node-1 serves, pulling the prefix from node-2's store.
    await env.scheduler_stub.Heartbeat(heartbeat("node-2", env.node_addr, queued=1000))
    await generate(env)
    submit = env.node.submits[-1]
    assert (submit.replica_id, submit.kv_source_address) == ("node-1-r0", "node-2.kv:50057")

    # A public prefix hashes with the public salt: another chain, which no node holds yet.
    await generate(env, prefix_public=True)
    assert list(env.scheduler.routes[-1].prefix_hashes) == chain_hashes(
        prompt_ids(load_dummy(MODEL).tokenizer, PROMPT, [])[:-1],
        16,
        HashKeys.for_request(MODEL, TENANT, True),
    )
    assert env.node.submits[-1].kv_source_address == ""
    assert env.loader.calls == [MODEL]


async def test_the_gateway_hashes_in_the_block_size_the_models_workers_report(env):
    await env.scheduler_stub.Heartbeat(heartbeat("node-1", env.node_addr, block_size=8))
    assert await env.servicer.pipeline.schedulers.refresh_view()
    await generate(env)  # starts the tokenizer load
    await env.hasher.close()
    await generate(env)
    ids = prompt_ids(load_dummy(MODEL).tokenizer, PROMPT, [])
    assert list(env.scheduler.routes[-1].prefix_hashes) == chain_hashes(
        ids[:-1], 8, HashKeys.for_request(MODEL, TENANT, False)
    )


async def test_an_unknown_model_is_never_looked_up(env):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await generate(env, model="/etc/shadow.gguf")
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    await env.hasher.close()
    assert env.loader.calls == []
    assert env.scheduler.routes[-1].prefix_hashes == []


async def test_a_prompt_the_gateway_cannot_tokenize_is_still_served(env):
    await env.scheduler_stub.Heartbeat(heartbeat("node-1", env.node_addr))
    env.loader.refuse = True
    await env.hasher.load(MODEL)
    assert [c.text for c in await generate(env)] == ["ok"]
    route = env.scheduler.routes[-1]
    assert (list(route.prefix_hashes), route.prompt_tokens_estimate) == ([], len(PROMPT) // 4)
    assert env.node.submits[-1].spec.prompt == PROMPT
