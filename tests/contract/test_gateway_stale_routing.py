"""The gateway without its scheduler: with two schedulers side by side a dead one is skipped; with
none answering, new requests are routed from the last view of the pool (marked on the span)
until the view is older than its bound; ListModels answers from the view; and no error a tenant
sees names an internal address."""

from __future__ import annotations

import random
import re

import grpc
import pytest

from services.scheduler.servicer import SchedulerServicer
from strata.gateway.auth import Authenticator
from strata.gateway.scheduler_client import view_of
from strata.policy.clock import ManualClock
from strata.policy.ratelimit import TenantRateLimiter
from strata.policy.registry import NodeRegistry
from strata.policy.routing import Router
from strata.policy.scheduling.stale_routing import StaleRouter
from strata.rpc.server import Registration, channel, start_server
from strata.store.db import create_all, make_engine, session_factory
from strata.store.tenants import create_tenant, issue_api_key
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
from tests.contract.test_gateway_service import MODEL, FakeNode

ADDRESS = re.compile(r"\d+\.\d+\.\d+\.\d+|:\d{2,5}\b|ipv4")


def gateway_request(model: str = MODEL) -> gateway_pb2.GenerateRequest:
    return gateway_pb2.GenerateRequest(model=model, prompt="hello", max_tokens=3)


class Env:
    async def start(self, tmp_path):
        db = make_engine(f"sqlite+aiosqlite:///{tmp_path / 'strata.db'}")
        await create_all(db)
        self.db = db
        sessions = session_factory(db)
        async with sessions() as session:
            await create_tenant(session, "acme")
            self.key = await issue_api_key(session, "acme")
        self.servers, self.channels = [], []
        self.node = FakeNode()
        node = await self._serve(
            Registration(
                add=lambda s: node_pb2_grpc.add_NodeManagerServicer_to_server(self.node, s),
                service_name="strata.v1.NodeManager",
            )
        )
        self.schedulers = []
        for _ in range(2):
            servicer = SchedulerServicer(
                NodeRegistry(clock=ManualClock()),
                Router(rng=random.Random(0)),
                heartbeat_interval_s=1.0,
            )
            running = await start_server(
                [
                    Registration(
                        add=lambda s, sv=servicer: (
                            scheduler_pb2_grpc.add_SchedulerServicer_to_server(sv, s)
                        ),
                        service_name="strata.v1.Scheduler",
                    )
                ]
            )
            self.schedulers.append(running)
            ch = channel(running.address)
            self.channels.append(ch)
            await scheduler_pb2_grpc.SchedulerStub(ch).Heartbeat(
                scheduler_pb2.HeartbeatRequest(
                    node=common_pb2.NodeInfo(
                        node_id="node-1",
                        address=node,
                        replicas=[
                            common_pb2.ReplicaInfo(
                                model=MODEL,
                                replica_id="r0",
                                max_seqs=4,
                                state=common_pb2.REPLICA_STATE_READY,
                                kv_blocks_total=64,
                                kv_blocks_free=64,
                            )
                        ],
                    ),
                    models=[common_pb2.ModelInfo(name=MODEL, context_length=2048)],
                )
            )
        self.clock = ManualClock()
        self.stale = StaleRouter(self.clock, max_age_s=30.0)
        self.servicer = gateway_servicer(
            [s.address for s in self.schedulers],
            Authenticator(sessions, ManualClock().now),
            TenantRateLimiter(ManualClock(), 1000.0, 1000.0),
            stale=self.stale,
        )
        address = await self._serve(
            Registration(
                add=lambda s: gateway_pb2_grpc.add_GatewayServicer_to_server(self.servicer, s),
                service_name="strata.v1.Gateway",
            )
        )
        ch = channel(address)
        self.channels.append(ch)
        self.gateway = gateway_pb2_grpc.GatewayStub(ch)
        self.metadata = (("authorization", f"Bearer {self.key}"),)
        return self

    async def _serve(self, registration) -> str:
        running = await start_server([registration])
        self.servers.append(running)
        return running.address

    async def generate(self, model: str = MODEL) -> list[gateway_pb2.GenerateResponse]:
        return [
            c async for c in self.gateway.Generate(gateway_request(model), metadata=self.metadata)
        ]

    async def close(self):
        await self.servicer.close()
        for ch in self.channels:
            await ch.close()
        for running in [*self.servers, *self.schedulers]:
            await running.stop(0)
        await self.db.dispose()


@pytest.fixture
async def env(tmp_path):
    e = await Env().start(tmp_path)
    yield e
    await e.close()


async def test_a_dead_scheduler_is_skipped_for_its_live_twin(env):
    await env.schedulers[0].stop(0)
    chunks = await env.generate()
    assert chunks[-1].finish_reason == common_pb2.FINISH_REASON_STOP
    assert len(env.node.submits) == 1


async def test_without_any_scheduler_requests_route_from_the_last_view_until_it_is_too_old(env):
    exporter = global_spans()
    assert await env.servicer.pipeline.schedulers.refresh_view()
    for running in env.schedulers:
        await running.stop(0)
    chunks = await env.generate()
    assert chunks[-1].finish_reason == common_pb2.FINISH_REASON_STOP
    assert env.node.submits[-1].replica_id == "r0"
    (span,) = spans_named(exporter, names.SPAN_GATEWAY_GENERATE)
    assert span.attributes[names.ROUTE_STALE] is True
    models = await env.gateway.ListModels(common_pb2.ListModelsRequest(), metadata=env.metadata)
    assert [m.name for m in models.models] == [MODEL]
    with pytest.raises(grpc.aio.AioRpcError) as unknown:
        await env.generate("llama-9000")
    assert unknown.value.code() == grpc.StatusCode.NOT_FOUND
    env.clock.advance(30.5)
    with pytest.raises(grpc.aio.AioRpcError) as old:
        await env.generate()
    assert old.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "too old" in old.value.details()
    assert ("retry-after-ms", "1000") in tuple(old.value.trailing_metadata())
    assert not ADDRESS.search(old.value.details()), old.value.details()
    assert len(env.node.submits) == 1


async def test_no_tenant_facing_error_names_an_internal_address(env):
    for running in env.schedulers:  # no view was ever taken: nothing to route from
        await running.stop(0)
    for call in (
        env.generate(),
        env.gateway.ListModels(common_pb2.ListModelsRequest(), metadata=env.metadata),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await call
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert not ADDRESS.search(err.value.details()), err.value.details()
    await env.servers[0].stop(0)  # the node manager too
    env.stale.update(
        *view_of(
            [
                common_pb2.NodeInfo(
                    node_id="node-1",
                    address="127.0.0.1:1",
                    replicas=[
                        common_pb2.ReplicaInfo(
                            model=MODEL, replica_id="r0", state=common_pb2.REPLICA_STATE_READY
                        )
                    ],
                )
            ]
        )
    )
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await env.generate()
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    assert not ADDRESS.search(err.value.details()), err.value.details()
    assert "the node serving this request" in err.value.details()
