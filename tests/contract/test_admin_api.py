"""The gateway's Admin and Gateway servicers in-process on one port-0 server, over a real SQLite
store; a fake scheduler (test-only) records each RouteRequest and can refuse one, a fake node
manager records each SubmitRequest and streams two chunks.

Checked: a tenant's class and shares reach Route and Submit as its TenantPolicy; an update holds
at the next request on this gateway and within the policy TTL on another; a revoked key or a
deleted tenant fails at once; store refusals as INVALID_ARGUMENT / NOT_FOUND / ALREADY_EXISTS
with their sentences; missing and wrong admin keys; SLA classes listed and changed; the tenant's
own rate limit; a refused Route's code, sentence and retry-after-ms reach the caller.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import grpc
import pytest

from services.gateway.admin import MISSING_ADMIN_KEY, WRONG_ADMIN_KEY, AdminServicer
from strata.core.sla import SlaTable
from strata.gateway.auth import Authenticator
from strata.gateway.pipeline import BAD_KEY
from strata.gateway.prefix_hashes import PrefixHasher
from strata.gateway.tenant_directory import TenantDirectory
from strata.policy.clock import ManualClock
from strata.policy.ratelimit import TenantRateLimiter
from strata.rpc.server import Registration, channel, start_server
from strata.store.db import create_all, make_engine, session_factory
from strata.store.sla_classes import seed_sla_classes
from strata.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    common_pb2,
    gateway_pb2,
    gateway_pb2_grpc,
    node_pb2_grpc,
    scheduler_pb2,
    scheduler_pb2_grpc,
)
from tests.contract.helpers import gateway_servicer

ADMIN_KEY = "sk-strata-admin-test-key"
MODEL = "dummy-tiny"
PROMPT = "What is the capital of France?"  # 30 characters: an estimate of 7 tokens
TTL_S = 2.0
RESOURCE_EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED


class FakeScheduler(scheduler_pb2_grpc.SchedulerServicer):
    """Routes everything to one node, or refuses with `refuse` (code, details, retry-after-ms)."""

    def __init__(self, node_address: str) -> None:
        self.node_address = node_address
        self.routes: list[scheduler_pb2.RouteRequest] = []
        self.refuse: tuple[grpc.StatusCode, str, str] | None = None

    async def Route(self, request, context):
        self.routes.append(request)
        if self.refuse is not None:
            code, details, retry_after = self.refuse
            context.set_trailing_metadata((("retry-after-ms", retry_after),))
            await context.abort(code, details)
        return scheduler_pb2.RouteResponse(
            node_id="node-1", node_address=self.node_address, replica_id="node-1-r0"
        )


class FakeNode(node_pb2_grpc.NodeManagerServicer):
    def __init__(self) -> None:
        self.submits: list = []

    async def Submit(self, request, context):
        self.submits.append(request)
        yield common_pb2.GenerationChunk(request_id=request.request_id, text="Paris", token_ids=[1])
        yield common_pb2.GenerationChunk(
            request_id=request.request_id,
            text=".",
            token_ids=[2],
            finish_reason=common_pb2.FINISH_REASON_STOP,
            usage=common_pb2.Usage(prompt_tokens=7, completion_tokens=2),
        )


def no_tokenizer(model: str):
    raise KeyError(model)  # routes without prefix hashes: the estimate is characters / 4


@dataclass
class Env:
    admin: admin_pb2_grpc.AdminStub
    gateway: gateway_pb2_grpc.GatewayStub
    scheduler: FakeScheduler
    node: FakeNode
    clock: ManualClock  # the auth cache's, the tenant directory's and the rate limiter's
    # (rate, burst) -> (Admin, Gateway) of another gateway on the same store
    start_gateway: Callable[
        [float, float], Awaitable[tuple[admin_pb2_grpc.AdminStub, gateway_pb2_grpc.GatewayStub]]
    ]


@pytest.fixture
async def env(tmp_path):
    db = make_engine(f"sqlite+aiosqlite:///{tmp_path / 'strata.db'}")
    await create_all(db)
    sessions = session_factory(db)
    async with sessions() as session:
        await seed_sla_classes(session, SlaTable())
    servers, channels, gateways = [], [], []

    async def serve(*registrations: Registration) -> str:
        running = await start_server(list(registrations))
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
    scheduler = FakeScheduler(node_addr)
    scheduler_addr = await serve(
        Registration(
            add=lambda s: scheduler_pb2_grpc.add_SchedulerServicer_to_server(scheduler, s),
            service_name="strata.v1.Scheduler",
        )
    )
    clock = ManualClock()

    async def start_gateway(rate: float, burst: float):
        auth = Authenticator(sessions, clock.now, ttl_s=10.0)
        tenants = TenantDirectory(sessions, clock.now, ttl_s=TTL_S)
        gateway = gateway_servicer(
            scheduler_addr,
            auth,
            TenantRateLimiter(clock, rate, burst),
            request_timeout_s=10.0,
            prefixes=PrefixHasher(loader=no_tokenizer),
            tenants=tenants,
        )
        gateways.append(gateway)
        admin = AdminServicer(sessions, ADMIN_KEY, auth, tenants, SlaTable())
        address = await serve(
            Registration(
                add=lambda s: gateway_pb2_grpc.add_GatewayServicer_to_server(gateway, s),
                service_name="strata.v1.Gateway",
            ),
            Registration(
                add=lambda s: admin_pb2_grpc.add_AdminServicer_to_server(admin, s),
                service_name="strata.v1.Admin",
            ),
        )
        ch = connect(address)
        return admin_pb2_grpc.AdminStub(ch), gateway_pb2_grpc.GatewayStub(ch)

    admin, gateway = await start_gateway(1000.0, 1000.0)
    yield Env(admin, gateway, scheduler, node, clock, start_gateway)
    for g in gateways:
        await g.close()
    for ch in channels:
        await ch.close()
    for running in reversed(servers):
        await running.stop(0)
    await db.dispose()


def bearer(key: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {key}"),)


ADMIN = bearer(ADMIN_KEY)


async def rpc_error(coro) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await coro
    return err.value


async def generate(stub: gateway_pb2_grpc.GatewayStub, key: str) -> str:
    chunks = [
        c
        async for c in stub.Generate(
            gateway_pb2.GenerateRequest(model=MODEL, prompt=PROMPT, max_tokens=16),
            metadata=bearer(key),
        )
    ]
    return "".join(c.text for c in chunks)


async def create(admin: admin_pb2_grpc.AdminStub, **fields) -> tuple[admin_pb2.TenantRecord, str]:
    """Create a tenant with a first key; (its record, the key)."""
    reply = await admin.CreateTenant(
        admin_pb2.CreateTenantRequest(tenant=admin_pb2.TenantRecord(**fields), issue_key=True),
        metadata=ADMIN,
    )
    assert reply.api_key.startswith("sk-strata-")
    return reply.tenant, reply.api_key


def policy(**overrides) -> common_pb2.TenantPolicy:
    fields = dict(
        tenant="chat",
        sla_class="interactive",
        priority=2,
        ttft_ms=500.0,
        tpot_ms=100.0,
        weight=2.0,
        guaranteed_share=0.1,
        burst_share=0.5,
    )
    fields.update(overrides)
    return common_pb2.TenantPolicy(**fields)


async def test_the_tenants_class_and_shares_reach_route_and_submit(env):
    record, key = await create(
        env.admin,
        name="chat",
        sla_class="interactive",
        weight=2,
        guaranteed_share=0.1,
        burst_share=0.5,
    )
    assert (
        record.name,
        record.sla_class,
        record.weight,
        record.guaranteed_share,
        record.burst_share,
        record.rate_limit_rps,
        record.active_keys,
    ) == ("chat", "interactive", 2.0, 0.1, 0.5, 0.0, 1)
    assert key.startswith("sk-strata-")
    assert await generate(env.gateway, key) == "Paris."
    [route] = env.scheduler.routes
    assert (route.tenant, route.model, route.max_tokens, route.prompt_tokens_estimate) == (
        "chat",
        MODEL,
        16,
        7,
    )
    assert route.policy == policy()
    [submit] = env.node.submits
    assert (submit.tenant, submit.priority, submit.prompt_tokens_estimate) == ("chat", 2, 7)
    assert submit.policy == policy()


async def test_an_update_holds_at_the_next_request_here_and_within_the_ttl_elsewhere(env):
    _, key = await create(
        env.admin,
        name="chat",
        sla_class="interactive",
        weight=2,
        guaranteed_share=0.1,
        burst_share=0.5,
    )
    _, other = await env.start_gateway(1000.0, 1000.0)
    assert await generate(env.gateway, key) == "Paris."
    assert await generate(other, key) == "Paris."  # the other gateway caches the policy
    record = await env.admin.UpdateTenant(
        admin_pb2.UpdateTenantRequest(
            tenant=admin_pb2.TenantRecord(name="chat", sla_class="batch", burst_share=0.8),
            fields=["sla_class", "burst_share"],
        ),
        metadata=ADMIN,
    )
    assert (record.sla_class, record.weight, record.burst_share) == ("batch", 2.0, 0.8)
    updated = policy(sla_class="batch", priority=0, ttft_ms=0.0, tpot_ms=0.0, burst_share=0.8)

    assert await generate(env.gateway, key) == "Paris."
    assert env.scheduler.routes[-1].policy == updated
    assert env.node.submits[-1].priority == 0
    assert await generate(other, key) == "Paris."
    assert env.scheduler.routes[-1].policy == policy()
    env.clock.advance(TTL_S)
    assert await generate(other, key) == "Paris."
    assert env.scheduler.routes[-1].policy == updated


async def test_a_changed_sla_class_reaches_its_tenants_at_the_next_request(env):
    _, key = await create(
        env.admin,
        name="chat",
        sla_class="interactive",
        weight=2,
        guaranteed_share=0.1,
        burst_share=0.5,
    )
    assert await generate(env.gateway, key) == "Paris."
    stored = await env.admin.PutSlaClass(
        admin_pb2.SlaClassRecord(name="interactive", priority=3, ttft_ms=300), metadata=ADMIN
    )
    assert (stored.name, stored.priority, stored.ttft_ms, stored.HasField("tpot_ms")) == (
        "interactive",
        3,
        300.0,
        False,
    )
    assert await generate(env.gateway, key) == "Paris."
    assert env.scheduler.routes[-1].policy == policy(priority=3, ttft_ms=300.0, tpot_ms=0.0)
    listed = await env.admin.ListSlaClasses(admin_pb2.ListSlaClassesRequest(), metadata=ADMIN)
    assert [
        (
            c.name,
            c.priority,
            c.ttft_ms if c.HasField("ttft_ms") else None,
            c.tpot_ms if c.HasField("tpot_ms") else None,
        )
        for c in listed.classes
    ] == [("interactive", 3, 300.0, None), ("standard", 1, 2000.0, 200.0), ("batch", 0, None, None)]
    assert listed.default_class == "standard"


async def test_a_revoked_key_and_a_deleted_tenants_keys_fail_at_once(env):
    _, key = await create(env.admin, name="chat")
    second = (
        await env.admin.IssueKey(admin_pb2.IssueKeyRequest(tenant="chat"), metadata=ADMIN)
    ).api_key
    assert await generate(env.gateway, key) == "Paris."
    assert await generate(env.gateway, second) == "Paris."
    reply = await env.admin.RevokeKey(admin_pb2.RevokeKeyRequest(api_key=key), metadata=ADMIN)
    assert reply.revoked is True
    err = await rpc_error(generate(env.gateway, key))  # no clock advance: not cached
    assert (err.code(), err.details()) == (grpc.StatusCode.UNAUTHENTICATED, BAD_KEY)
    assert (
        await env.admin.GetTenant(admin_pb2.GetTenantRequest(name="chat"), metadata=ADMIN)
    ).active_keys == 1
    deleted = await env.admin.DeleteTenant(
        admin_pb2.DeleteTenantRequest(name="chat"), metadata=ADMIN
    )
    assert deleted.keys_revoked == 1
    err = await rpc_error(generate(env.gateway, second))
    assert (err.code(), err.details()) == (grpc.StatusCode.UNAUTHENTICATED, BAD_KEY)
    err = await rpc_error(
        env.admin.GetTenant(admin_pb2.GetTenantRequest(name="chat"), metadata=ADMIN)
    )
    assert (err.code(), err.details()) == (
        grpc.StatusCode.NOT_FOUND,
        "tenant 'chat' does not exist; `strata tenants list` shows the tenants",
    )


@pytest.mark.parametrize(
    ("fields", "details"),
    [
        (
            dict(guaranteed_share=0.6, burst_share=0.5),
            "burst_share must be between guaranteed_share (0.6) and 1, got 0.5",
        ),
        (dict(guaranteed_share=1.5), "guaranteed_share must be between 0 and 1, got 1.5"),
        (dict(weight=-1), "weight must be a positive number, got -1.0"),
        (
            dict(sla_class="gold"),
            "unknown SLA class 'gold'; known classes: interactive, standard, "
            "batch (add one with `strata tenants set-class`)",
        ),
        (
            dict(rate_limit_rps=-2),
            "rate_limit_rps must be a positive number of requests per "
            "second, or unset for the gateway's default, got -2.0",
        ),
        (dict(name=""), "a tenant name must not be empty"),
    ],
)
async def test_bad_settings_are_invalid_argument_with_the_reason(env, fields, details):
    err = await rpc_error(
        env.admin.CreateTenant(
            admin_pb2.CreateTenantRequest(
                tenant=admin_pb2.TenantRecord(**{"name": "chat", **fields})
            ),
            metadata=ADMIN,
        )
    )
    assert (err.code(), err.details()) == (grpc.StatusCode.INVALID_ARGUMENT, details)
    listed = await env.admin.ListTenants(admin_pb2.ListTenantsRequest(), metadata=ADMIN)
    assert list(listed.tenants) == []


async def test_updates_duplicates_and_unknown_names_have_precise_codes(env):
    await create(env.admin, name="chat", guaranteed_share=0.2, burst_share=0.5)
    err = await rpc_error(
        env.admin.UpdateTenant(
            admin_pb2.UpdateTenantRequest(
                tenant=admin_pb2.TenantRecord(name="chat", burst_share=0.1), fields=["burst_share"]
            ),
            metadata=ADMIN,
        )
    )
    assert (err.code(), err.details()) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "burst_share must be between guaranteed_share (0.2) and 1, got 0.1",
    )
    err = await rpc_error(
        env.admin.UpdateTenant(
            admin_pb2.UpdateTenantRequest(
                tenant=admin_pb2.TenantRecord(name="chat"), fields=["name"]
            ),
            metadata=ADMIN,
        )
    )
    assert (err.code(), err.details()) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "cannot change name; the fields a tenant update may change are sla_class, weight, "
        "guaranteed_share, burst_share, rate_limit_rps",
    )
    err = await rpc_error(
        env.admin.CreateTenant(
            admin_pb2.CreateTenantRequest(tenant=admin_pb2.TenantRecord(name="chat")),
            metadata=ADMIN,
        )
    )
    assert (err.code(), err.details()) == (
        grpc.StatusCode.ALREADY_EXISTS,
        "tenant 'chat' already exists",
    )
    err = await rpc_error(
        env.admin.IssueKey(admin_pb2.IssueKeyRequest(tenant="ghost"), metadata=ADMIN)
    )
    assert (err.code(), err.details()) == (
        grpc.StatusCode.NOT_FOUND,
        "tenant 'ghost' does not exist; create it first",
    )
    err = await rpc_error(
        env.admin.RevokeKey(
            admin_pb2.RevokeKeyRequest(api_key="sk-strata-never-issued"), metadata=ADMIN
        )
    )
    assert err.code() == grpc.StatusCode.NOT_FOUND
    err = await rpc_error(
        env.admin.PutSlaClass(
            admin_pb2.SlaClassRecord(name="gold", priority=10, ttft_ms=300), metadata=ADMIN
        )
    )
    assert (err.code(), err.details()) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "SLA class 'gold': priority must be an integer from 0 to 9, got 10",
    )
    # an update with no field named sets every field; zeros read as the defaults
    record = await env.admin.UpdateTenant(
        admin_pb2.UpdateTenantRequest(tenant=admin_pb2.TenantRecord(name="chat", weight=3)),
        metadata=ADMIN,
    )
    assert (
        record.sla_class,
        record.weight,
        record.guaranteed_share,
        record.burst_share,
        record.rate_limit_rps,
    ) == ("standard", 3.0, 0.0, 1.0, 0.0)


async def test_every_admin_call_needs_the_admin_key(env):
    calls = [
        lambda md: env.admin.ListTenants(admin_pb2.ListTenantsRequest(), metadata=md),
        lambda md: env.admin.CreateTenant(
            admin_pb2.CreateTenantRequest(tenant=admin_pb2.TenantRecord(name="x")), metadata=md
        ),
        lambda md: env.admin.GetTenant(admin_pb2.GetTenantRequest(name=""), metadata=md),
        lambda md: env.admin.ListSlaClasses(admin_pb2.ListSlaClassesRequest(), metadata=md),
        lambda md: env.admin.PutSlaClass(admin_pb2.SlaClassRecord(name="gold"), metadata=md),
    ]
    _, tenant_key = await create(env.admin, name="chat")
    for call in calls:
        err = await rpc_error(call(()))
        assert (err.code(), err.details()) == (grpc.StatusCode.UNAUTHENTICATED, MISSING_ADMIN_KEY)
        for wrong in (tenant_key, ADMIN_KEY + "x"):
            err = await rpc_error(call(bearer(wrong)))
            assert (err.code(), err.details()) == (
                grpc.StatusCode.PERMISSION_DENIED,
                WRONG_ADMIN_KEY,
            )
    listed = await env.admin.ListTenants(admin_pb2.ListTenantsRequest(), metadata=ADMIN)
    assert [t.name for t in listed.tenants] == ["chat"]


async def test_the_tenants_own_rate_limit_applies_and_changes_without_restart(env):
    _, key = await create(env.admin, name="chat", rate_limit_rps=1)
    # default 1000/s with a burst of 1000 (one second); the tenant's 1/s gets a burst of 1
    assert await generate(env.gateway, key) == "Paris."
    err = await rpc_error(generate(env.gateway, key))
    assert (err.code(), err.details()) == (
        RESOURCE_EXHAUSTED,
        "tenant 'chat' is over its request rate; retry in 1000 ms",
    )
    assert [v for k, v in err.trailing_metadata() if k == "retry-after-ms"] == ["1001"]
    await env.admin.UpdateTenant(
        admin_pb2.UpdateTenantRequest(
            tenant=admin_pb2.TenantRecord(name="chat", rate_limit_rps=4), fields=["rate_limit_rps"]
        ),
        metadata=ADMIN,
    )
    env.clock.advance(0.25)  # at 4/s a quarter second earns the next request
    assert await generate(env.gateway, key) == "Paris."
    assert len(env.node.submits) == 2


async def test_a_refused_route_reaches_the_caller_with_its_retry_after(env):
    _, key = await create(env.admin, name="chat", sla_class="interactive", burst_share=0.3)
    details = "tenant 'chat' holds 31% of the pool, over its burst share of 30%; retry in 250 ms"
    env.scheduler.refuse = (RESOURCE_EXHAUSTED, details, "250")
    err = await rpc_error(generate(env.gateway, key))
    assert (err.code(), err.details()) == (RESOURCE_EXHAUSTED, details)
    assert [v for k, v in err.trailing_metadata() if k == "retry-after-ms"] == ["250"]
    assert env.node.submits == []


async def test_the_requests_sparse_choice_reaches_the_node(env):
    _, key = await create(env.admin, name="doc", sla_class="standard")
    for mode in (
        common_pb2.SPARSE_MODE_ON,
        common_pb2.SPARSE_MODE_OFF,
        common_pb2.SPARSE_MODE_DEFAULT,
    ):
        [
            _
            async for _ in env.gateway.Generate(
                gateway_pb2.GenerateRequest(model=MODEL, prompt=PROMPT, max_tokens=16, sparse=mode),
                metadata=bearer(key),
            )
        ]
    assert [s.spec.sparse for s in env.node.submits] == [
        common_pb2.SPARSE_MODE_ON,
        common_pb2.SPARSE_MODE_OFF,
        common_pb2.SPARSE_MODE_DEFAULT,
    ]
