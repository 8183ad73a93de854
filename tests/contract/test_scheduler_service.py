"""Scheduler servicer in-process on port 0: heartbeats, routing choices, expiry, status codes,
spans, KV events, prefix-aware routing, and the replicas' step lines in the registry."""

from __future__ import annotations

import asyncio
import logging
import math
import random

import grpc
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from services.scheduler import convert
from services.scheduler.servicer import SchedulerServicer
from strata.core.step_model import StepLine
from strata.policy.clock import ManualClock
from strata.policy.registry import NodeRegistry
from strata.policy.routing import Router
from strata.policy.scheduling.arrivals import MAX_ARRIVALS
from strata.rpc.server import Registration, channel, start_server
from strata.telemetry import names
from strata.v1 import common_pb2, scheduler_pb2, scheduler_pb2_grpc

MODEL = "smollm2-135m-instruct"
READY = common_pb2.REPLICA_STATE_READY


@pytest.fixture
async def env():
    clock = ManualClock()
    registry = NodeRegistry(clock=clock, ttl_s=2.0)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    servicer = SchedulerServicer(
        registry,
        Router(rng=random.Random(0)),
        heartbeat_interval_s=0.5,
        tracer=provider.get_tracer("test"),
    )
    running = await start_server(
        [
            Registration(
                add=lambda s: scheduler_pb2_grpc.add_SchedulerServicer_to_server(servicer, s),
                service_name=scheduler_pb2.DESCRIPTOR.services_by_name["Scheduler"].full_name,
            )
        ]
    )
    ch = channel(running.address)
    yield scheduler_pb2_grpc.SchedulerStub(ch), clock, exporter, servicer
    await ch.close()
    await running.stop(0)


def heartbeat(
    node_id: str, queued: int = 0, running: int = 0, state: int = READY, waiting_for_memory: int = 0
) -> scheduler_pb2.HeartbeatRequest:
    replica = common_pb2.ReplicaInfo(
        model=MODEL,
        replica_id=f"{node_id}-r0",
        state=state,
        queued_tokens=queued,
        running_requests=running,
        kv_blocks_total=64,
        kv_blocks_free=64,
        waiting_for_memory=waiting_for_memory,
    )
    return scheduler_pb2.HeartbeatRequest(
        node=common_pb2.NodeInfo(
            node_id=node_id,
            address=f"{node_id}.local:50053",
            memory_bytes=8_000_000_000,
            device="cpu",
            replicas=[replica],
        ),
        models=[common_pb2.ModelInfo(name=MODEL, context_length=8192, memory_bytes=800_000_000)],
    )


async def test_heartbeat_returns_interval_and_nodes_and_models_are_listed(env):
    stub, *_ = env
    reply = await stub.Heartbeat(heartbeat("n1"))
    assert reply.heartbeat_interval_ms == 500
    await stub.Heartbeat(heartbeat("n2"))
    nodes = (await stub.ListNodes(scheduler_pb2.ListNodesRequest())).nodes
    assert [(n.node_id, n.address, n.memory_bytes) for n in nodes] == [
        ("n1", "n1.local:50053", 8_000_000_000),
        ("n2", "n2.local:50053", 8_000_000_000),
    ]
    assert [(r.replica_id, r.state) for r in nodes[0].replicas] == [("n1-r0", READY)]
    models = (await stub.ListModels(common_pb2.ListModelsRequest())).models
    assert [(m.name, m.context_length, m.memory_bytes) for m in models] == [
        (MODEL, 8192, 800_000_000)
    ]


async def test_route_picks_less_loaded_node_and_records_span(env):
    stub, _, exporter, _ = env
    await stub.Heartbeat(heartbeat("n1", queued=900))
    await stub.Heartbeat(heartbeat("n2", running=2))  # 2 * 128 = 256 tokens of work
    reply = await stub.Route(
        scheduler_pb2.RouteRequest(model=MODEL, tenant="acme", prompt_tokens_estimate=40)
    )
    assert (reply.node_id, reply.node_address, reply.replica_id) == (
        "n2",
        "n2.local:50053",
        "n2-r0",
    )
    (span,) = exporter.get_finished_spans()
    assert span.name == names.SPAN_SCHEDULER_ROUTE
    assert dict(span.attributes) == {
        names.TENANT: "acme",
        names.GEN_AI_REQUEST_MODEL: MODEL,
        names.NODE_ID: "n2",
        names.REPLICA_ID: "n2-r0",
        names.ROUTE_PROMPT_BLOCKS: 0,
        names.ROUTE_CACHED_BLOCKS: 0,
        names.SLA_CLASS: "standard",
        names.PRIORITY: 1,
        # no replica reported a measured rate: no estimate claimed
        names.ROUTE_ESTIMATED_TTFT_MS: 0.0,
    }


async def test_silent_node_leaves_routing_after_ttl(env, caplog):
    stub, clock, _, servicer = env
    await stub.Heartbeat(heartbeat("n1"))
    await stub.Heartbeat(heartbeat("n2", queued=5000))
    assert (await stub.Route(scheduler_pb2.RouteRequest(model=MODEL))).node_id == "n1"
    clock.advance(1.5)
    await stub.Heartbeat(heartbeat("n2", queued=5000))  # n1 stays silent
    clock.advance(1.0)  # n1 silent 2.5 s > TTL 2 s
    assert (await stub.Route(scheduler_pb2.RouteRequest(model=MODEL))).node_id == "n2"
    nodes = (await stub.ListNodes(scheduler_pb2.ListNodesRequest())).nodes
    assert [n.node_id for n in nodes] == ["n2"]
    stop = asyncio.Event()
    with caplog.at_level(logging.WARNING, logger="services.scheduler.servicer"):
        task = asyncio.create_task(servicer.expire_until(stop, every_s=0.01))
        await asyncio.sleep(0.05)
        stop.set()
        await task
    assert [r.getMessage() for r in caplog.records] == ["node n1 left: no heartbeat for over 2.0s"]


async def test_heartbeat_validation_messages(env):
    stub, *_ = env
    bad = heartbeat("n1")
    bad.node.node_id = ""
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.Heartbeat(bad)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details() == (
        "node.node_id is required: set it to a name unique to this node manager"
    )
    bad = heartbeat("n1")
    bad.node.address = ""
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.Heartbeat(bad)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details() == (
        "node.address is required for node n1: set it to the host:port its node manager listens on"
    )


async def test_each_route_has_its_own_id_and_a_heartbeat_lists_a_bounded_number(env):
    stub, *_ = env
    await stub.Heartbeat(heartbeat("n1"))
    ids = [(await stub.Route(scheduler_pb2.RouteRequest(model=MODEL))).route_id for _ in range(3)]
    assert all(ids) and len(set(ids)) == 3
    bad = heartbeat("n1")
    bad.arrived_routes.extend(f"r{i}" for i in range(MAX_ARRIVALS + 1))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.Heartbeat(bad)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details() == (
        f"node n1 lists {MAX_ARRIVALS + 1} arrived routes, more than {MAX_ARRIVALS}: list only "
        f"those received in the last 10 s"
    )


async def test_route_errors_not_found_unavailable_invalid(env):
    stub, _, exporter, _ = env
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.Route(scheduler_pb2.RouteRequest(model="", tenant="acme"))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details() == "model is required: name one of the models from ListModels"

    await stub.Heartbeat(heartbeat("n1", state=common_pb2.REPLICA_STATE_LOADING))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.Route(scheduler_pb2.RouteRequest(model="llama-9000", tenant="acme"))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert err.value.details() == (
        f"model 'llama-9000' is not served by this cluster; known models: {MODEL}"
    )
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.Route(scheduler_pb2.RouteRequest(model=MODEL, tenant="acme"))
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    assert err.value.details() == (
        f"model '{MODEL}' has no ready replica right now (1 loading); retry in a few seconds"
    )
    spans = exporter.get_finished_spans()
    assert [s.attributes[names.ERROR_CODE] for s in spans] == ["NOT_FOUND", "UNAVAILABLE"]


async def test_replicas_of_one_model_with_different_block_sizes_are_reported(env, caplog):
    stub, *_ = env
    first, other = heartbeat("n1"), heartbeat("n2")
    first.node.replicas[0].kv_block_size = 16
    other.node.replicas[0].kv_block_size = 32
    with caplog.at_level("WARNING", logger="services.scheduler.servicer"):
        await stub.Heartbeat(first)
        await stub.Heartbeat(other)
        await stub.Heartbeat(other)  # said once, not per heartbeat
    warned = [r.getMessage() for r in caplog.records if "KV blocks of 32 tokens" in r.getMessage()]
    assert len(warned) == 1 and "other replicas of the model 16" in warned[0]
    nodes = (await stub.ListNodes(scheduler_pb2.ListNodesRequest())).nodes
    assert [n.replicas[0].kv_block_size for n in nodes] == [16, 32]


def test_config_reads_env_and_rejects_ttl_not_above_interval(monkeypatch):
    from services.scheduler.config import SchedulerConfig
    from strata.core.settings import ConfigError

    monkeypatch.delenv("STRATA_HEARTBEAT_INTERVAL_S", raising=False)
    monkeypatch.setenv("STRATA_SCHEDULER_BIND", "0.0.0.0:6000")
    monkeypatch.setenv("STRATA_NODE_TTL_S", "3")
    cfg = SchedulerConfig.from_env()
    assert (cfg.scheduler_bind, cfg.node_ttl_s, cfg.heartbeat_interval_s) == (
        "0.0.0.0:6000",
        3.0,
        1.0,
    )
    monkeypatch.setenv("STRATA_NODE_TTL_S", "1")
    with pytest.raises(
        ConfigError,
        match=r"STRATA_NODE_TTL_S \(1.0\) must exceed "
        r"STRATA_HEARTBEAT_INTERVAL_S \(1.0\)",
    ):
        SchedulerConfig.from_env()


CHAIN = [0xFFFF_FFFF_FFFF_FFF0 + i for i in range(10)]  # fixed64: the top bit survives the wire


def kv_events(node_id: str, sequence: int, reset: bool = False, stored=(), removed=()):
    return scheduler_pb2.KVEventsRequest(
        node_id=node_id,
        store_address=f"{node_id}.kv:50057",
        sequence=sequence,
        reset=reset,
        stored=list(stored),
        removed=list(removed),
    )


def route_request(prefix_hashes=CHAIN) -> scheduler_pb2.RouteRequest:
    return scheduler_pb2.RouteRequest(
        model=MODEL, tenant="acme", prompt_tokens_estimate=160, prefix_hashes=prefix_hashes
    )


async def test_kv_events_ask_for_a_reset_when_the_scheduler_lost_track(env):
    stub, *_ = env
    assert (await stub.ReportKVEvents(kv_events("n1", 1, stored=CHAIN))).need_reset is True
    assert (
        await stub.ReportKVEvents(kv_events("n1", 1, reset=True, stored=CHAIN))
    ).need_reset is False
    assert (await stub.ReportKVEvents(kv_events("n1", 2, removed=CHAIN[5:]))).need_reset is False
    assert (await stub.ReportKVEvents(kv_events("n1", 4, stored=CHAIN[5:]))).need_reset is True
    await stub.Heartbeat(heartbeat("n1"))
    reply = await stub.Route(route_request())
    assert (reply.node_id, reply.cached_blocks) == ("n1", 5)  # the report after the gap: ignored


async def test_kv_events_without_a_node_id_are_refused(env):
    stub, *_ = env
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.ReportKVEvents(scheduler_pb2.KVEventsRequest(sequence=1, reset=True))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details() == (
        "node_id is required: set it to the node id this node's manager sends in its heartbeats"
    )


async def test_route_prefers_the_node_holding_the_prefix_and_names_a_pull_source(env):
    stub, *_ = env
    await stub.Heartbeat(heartbeat("n1", queued=100))
    await stub.Heartbeat(heartbeat("n2"))
    await stub.ReportKVEvents(kv_events("n1", 1, reset=True, stored=CHAIN))
    reply = await stub.Route(route_request())  # n1: 100 queued + 0; n2: 0 + 160 to prefill
    assert (
        reply.node_id,
        reply.replica_id,
        reply.cached_blocks,
        reply.kv_source_address,
        reply.kv_source_blocks,
    ) == ("n1", "n1-r0", 10, "", 0)
    without = await stub.Route(route_request(prefix_hashes=[]))
    assert (without.node_id, without.cached_blocks) == ("n2", 0)

    await stub.Heartbeat(heartbeat("n1", queued=1000))
    reply = await stub.Route(route_request())
    assert (
        reply.node_id,
        reply.cached_blocks,
        reply.kv_source_address,
        reply.kv_source_blocks,
    ) == ("n2", 0, "n1.kv:50057", 10)
    span = env[2].get_finished_spans()[-1]
    assert {k: v for k, v in span.attributes.items() if k.startswith("strata.route.")} == {
        "strata.route.prompt_blocks": 10,
        "strata.route.cached_blocks": 0,
        "strata.route.kv_source": "n1.kv:50057",
        "strata.route.kv_source_blocks": 10,
        "strata.route.estimated_ttft_ms": 0.0,
    }


async def test_memory_wait_is_listed_and_steers_routing_away(env):
    stub, *_ = env
    await stub.Heartbeat(heartbeat("n1", waiting_for_memory=3))
    await stub.Heartbeat(heartbeat("n2", queued=5000))
    await stub.ReportKVEvents(kv_events("n1", 1, reset=True, stored=CHAIN))
    nodes = (await stub.ListNodes(scheduler_pb2.ListNodesRequest())).nodes
    assert [r.waiting_for_memory for n in nodes for r in n.replicas] == [3, 0]
    reply = await stub.Route(route_request())
    assert (reply.node_id, reply.kv_source_address, reply.kv_source_blocks) == (
        "n2",
        "n1.kv:50057",
        10,
    )


async def test_an_expired_node_leaves_the_prefix_index(env):
    stub, clock, _, servicer = env
    await stub.Heartbeat(heartbeat("n1"))
    await stub.ReportKVEvents(kv_events("n1", 1, reset=True, stored=CHAIN))
    clock.advance(2.5)
    await stub.Heartbeat(heartbeat("n2"))
    stop = asyncio.Event()
    task = asyncio.create_task(servicer.expire_until(stop, every_s=0.01))
    await asyncio.sleep(0.05)
    stop.set()
    await task
    # forgotten: its store must send its whole set again, and it is no source meanwhile
    assert (await stub.ReportKVEvents(kv_events("n1", 2, stored=CHAIN))).need_reset is True
    reply = await stub.Route(route_request())
    assert (reply.node_id, reply.cached_blocks, reply.kv_source_address) == ("n2", 0, "")


async def test_a_store_whose_node_never_heartbeats_is_forgotten(env):
    stub, _, _, servicer = env
    await stub.Heartbeat(heartbeat("n1"))
    await stub.ReportKVEvents(kv_events("ghost", 1, reset=True, stored=CHAIN))
    stop = asyncio.Event()
    task = asyncio.create_task(servicer.expire_until(stop, every_s=0.01))
    await asyncio.sleep(0.05)
    stop.set()
    await task
    assert (await stub.ReportKVEvents(kv_events("ghost", 2, stored=CHAIN))).need_reset is True
    assert (await stub.ReportKVEvents(kv_events("n1", 1, reset=True))).need_reset is False


async def test_over_burst_tenant_gets_resource_exhausted_with_a_retry_hint(env):
    stub, _, exporter, _ = env
    hb = heartbeat("n1")  # 64 blocks x 16 tokens = 1024 tokens, less than 10 s of compute
    hb.node.replicas[0].tokens_per_s = 1000.0
    hb.node.tenants.append(common_pb2.TenantLoad(tenant="acme", priority=1, running=3, tokens=1000))
    await stub.Heartbeat(hb)
    policy = common_pb2.TenantPolicy(
        tenant="acme", sla_class="standard", priority=1, burst_share=0.5
    )
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.Route(
            scheduler_pb2.RouteRequest(
                model=MODEL,
                tenant="acme",
                policy=policy,
                prompt_tokens_estimate=100,
                max_tokens=100,
            )
        )
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert err.value.details().startswith("tenant 'acme' holds 1000 tokens of work")
    # the pool admits its 1024 KV tokens (less than 5 s of compute), half of it for acme:
    # 688 tokens over its cap, drained at its half of 1000 tokens/s: 1376 ms
    assert dict(err.value.trailing_metadata())[names.RETRY_AFTER_METADATA] == "1377"
    assert exporter.get_finished_spans()[-1].attributes[names.ROUTE_REFUSED] == "burst"
    # the pool is nearly full (1000 of 1024): a tenant within its guarantee is still
    # admitted, and gets an estimate from the measured rate
    reply = await stub.Route(
        scheduler_pb2.RouteRequest(
            model=MODEL,
            tenant="other",
            prompt_tokens_estimate=100,
            max_tokens=10,
            policy=common_pb2.TenantPolicy(sla_class="standard", priority=1, guaranteed_share=0.5),
        )
    )
    assert (reply.node_id, reply.estimated_ttft_ms) == ("n1", pytest.approx(100.0))


async def test_a_policy_out_of_range_is_invalid(env):
    stub, *_ = env
    await stub.Heartbeat(heartbeat("n1"))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.Route(
            scheduler_pb2.RouteRequest(
                model=MODEL,
                tenant="acme",
                policy=common_pb2.TenantPolicy(
                    sla_class="standard", guaranteed_share=0.6, burst_share=0.5
                ),
            )
        )
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details() == (
        "tenant 'acme': burst_share must be between guaranteed_share (0.6) and 1, got 0.5"
    )


async def test_the_registry_holds_each_replicas_step_line_and_drops_a_malformed_one(env):
    stub, _, _, servicer = env
    line = StepLine(0.03, 2e-3, 1.5e-3, 1.7e-6, 5.8e-6, 0.019, samples=1500)
    bad = {
        "n2": ([0.03, 2e-3, 1.5e-3, 1.7e-6, 5.8e-6], 9),  # five coefficients
        "n3": ([0.03, -2e-3, 1.5e-3, 1.7e-6, 5.8e-6, 0.019], 9),  # a negative one
        "n4": ([0.03, 2e-3, math.nan, 1.7e-6, 5.8e-6, 0.019], 9),  # a non-finite one
        "n5": ([], 0),  # none reported
    }
    beat = heartbeat("n1")
    beat.node.replicas[0].step_line.extend(line.coefficients())
    beat.node.replicas[0].step_line_samples = line.samples
    await stub.Heartbeat(beat)
    for node_id, (values, samples) in bad.items():
        beat = heartbeat(node_id)
        beat.node.replicas[0].step_line.extend(values)
        beat.node.replicas[0].step_line_samples = samples
        await stub.Heartbeat(beat)
    held = {n.node_id: n.replicas[0].step_line for n in servicer._registry.nodes()}
    assert held == {"n1": line, "n2": None, "n3": None, "n4": None, "n5": None}
    # ... and lists it as it was reported (convert's round trip); no line for the others
    nodes = (await stub.ListNodes(scheduler_pb2.ListNodesRequest())).nodes
    listed = {
        n.node_id: (list(n.replicas[0].step_line), n.replicas[0].step_line_samples) for n in nodes
    }
    assert listed == {"n1": (list(line.coefficients()), 1500)} | {n: ([], 0) for n in bad}
    r = convert.replica_from_pb(nodes[0].replicas[0])
    assert convert.replica_from_pb(convert.replica_to_pb(r)) == r and r.step_line == line


async def test_the_registry_holds_each_replicas_queued_tokens_by_class(env):
    stub, _, _, servicer = env
    beat = heartbeat("n1", queued=100)
    beat.node.replicas[0].queued_by_class.extend(
        [
            common_pb2.ClassTokens(priority=2, tokens=30),
            common_pb2.ClassTokens(priority=0, tokens=70),
            common_pb2.ClassTokens(priority=1, tokens=-5),  # malformed: dropped
        ]
    )
    await stub.Heartbeat(beat)
    held = next(iter(servicer._registry.nodes())).replicas[0]
    assert held.queued_by_class == ((0, 70), (2, 30))
    nodes = (await stub.ListNodes(scheduler_pb2.ListNodesRequest())).nodes
    r = convert.replica_from_pb(nodes[0].replicas[0])
    assert r == held and convert.replica_from_pb(convert.replica_to_pb(r)) == r


async def test_the_registry_holds_what_each_replicas_decodes_lend_a_prefill(env):
    stub, _, _, servicer = env
    for reported, held in ((240.0, 240.0), (float("nan"), 0.0), (-3.0, 0.0), (0.0, 0.0)):
        beat = heartbeat("n1")
        beat.node.replicas[0].step_allowance_ms = reported
        await stub.Heartbeat(beat)
        state = next(iter(servicer._registry.nodes())).replicas[0]
        assert state.step_allowance_ms == held
        nodes = (await stub.ListNodes(scheduler_pb2.ListNodesRequest())).nodes
        assert nodes[0].replicas[0].step_allowance_ms == held
        assert convert.replica_from_pb(convert.replica_to_pb(state)) == state


async def test_an_sla_refusal_keeps_its_estimate_and_terms_on_the_route_span(env):
    stub, _, exporter, _ = env
    hb = heartbeat("n1", queued=5000)  # 5 s of prompts ahead at 1,000 tokens/s
    replica = hb.node.replicas[0]
    replica.tokens_per_s = 1000.0
    # The node's interactive requests lately waited 3 s beyond their prefill; standard 9 s.
    replica.class_delays.extend(
        [
            common_pb2.ClassDelay(priority=1, delay_s=9.0),
            common_pb2.ClassDelay(priority=2, delay_s=3.0),
        ]
    )
    await stub.Heartbeat(hb)
    policy = common_pb2.TenantPolicy(
        tenant="chat", sla_class="interactive", priority=2, ttft_ms=500.0
    )
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.Route(
            scheduler_pb2.RouteRequest(
                model=MODEL, tenant="chat", policy=policy, prompt_tokens_estimate=100, max_tokens=10
            )
        )
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    attrs = exporter.get_finished_spans()[-1].attributes
    assert attrs[names.ROUTE_REFUSED] == "sla" and attrs[names.NODE_ID] == "n1"
    assert attrs[names.ROUTE_AHEAD_MS] == pytest.approx(5000.0)
    assert attrs[names.ROUTE_OBSERVED_MS] == pytest.approx(3000.0)  # its class's, not 9 s
    # Alone it takes 100 ms, within the 350 ms the class is allowed (500 ms less the 150 ms
    # margin a short target keeps): that is shorter than a retry's 0.5 s wait, yet one that
    # meets the margin alone keeps it.
    assert attrs[names.ROUTE_SOLO_MS] == pytest.approx(100.0)
    assert attrs[names.ROUTE_ALLOWED_TTFT_MS] == pytest.approx(350.0)
    assert attrs[names.ROUTE_ESTIMATED_TTFT_MS] == pytest.approx(
        max(
            attrs[names.ROUTE_SLOT_WAIT_MS]
            + attrs[names.ROUTE_AHEAD_MS]
            + attrs[names.ROUTE_OWN_PREFILL_MS],
            attrs[names.ROUTE_OBSERVED_MS],
        ),
        abs=0.2,
    )
    assert f"estimated at {attrs[names.ROUTE_ESTIMATED_TTFT_MS]:.0f} ms" in err.value.details()


async def test_an_admitted_request_keeps_the_terms_it_was_admitted_on_on_the_route_span(env):
    stub, _, exporter, _ = env
    hb = heartbeat("n1", queued=200)  # 0.2 s of prompts ahead at 1,000 tokens/s
    hb.node.replicas[0].tokens_per_s = 1000.0
    await stub.Heartbeat(hb)
    policy = common_pb2.TenantPolicy(
        tenant="chat", sla_class="interactive", priority=2, ttft_ms=500.0
    )
    reply = await stub.Route(
        scheduler_pb2.RouteRequest(
            model=MODEL, tenant="chat", policy=policy, prompt_tokens_estimate=100, max_tokens=10
        )
    )
    assert reply.node_id == "n1"
    attrs = exporter.get_finished_spans()[-1].attributes
    assert names.ROUTE_REFUSED not in attrs
    assert attrs[names.ROUTE_AHEAD_MS] == pytest.approx(200.0)
    assert attrs[names.ROUTE_SOLO_MS] == pytest.approx(100.0)
    assert attrs[names.ROUTE_ESTIMATED_TTFT_MS] <= attrs[names.ROUTE_ALLOWED_TTFT_MS]
