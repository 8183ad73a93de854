"""Replicated gateways, schedulers and planners as real processes, as a Kubernetes Deployment or
`docker compose up --scale` runs them: a tenant's request rate holds across three gateways;
two schedulers both see every node and every KV event; of two planners one applies plans and the
other takes over when it dies; killing the scheduler the gateways route through loses no
accepted request."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

import grpc
import httpx2
import pytest
from prometheus_client.parser import text_string_to_metric_families

from strata.client.sdk import AsyncClient, Client
from strata.core import defaults
from strata.rpc.channels import sync_channel
from strata.telemetry import names
from strata.v1 import (
    common_pb2,
    placement_pb2,
    placement_pb2_grpc,
    scheduler_pb2,
    scheduler_pb2_grpc,
)
from tests.integration.conftest import DUMMY_OVERRIDES, running_stack

pytestmark = pytest.mark.integration
MODEL = "dummy-tiny"
RATE = 4.0  # the demo tenant's requests per second (the gateways' default)
BURST = 4.0
GATEWAYS = ("gateway", "gateway-2", "gateway-3")
SCHEDULERS = ("scheduler", "scheduler-2")
PLANNERS = ("placement", "placement-2")
WAIT_S = 240.0  # deadline of every wait and call on a busy 2-core machine
KILL_AFTER = 8  # requests of the 30 ended before the first scheduler is killed
OVERRIDES = {
    **DUMMY_OVERRIDES,
    "gateway": {"STRATA_RATE_LIMIT_RPS": str(RATE), "STRATA_RATE_LIMIT_BURST": str(BURST)},
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    replicas = {"gateway": len(GATEWAYS), "scheduler": len(SCHEDULERS), "placement": 2}
    with running_stack(tmp_path_factory.mktemp("replicas"), OVERRIDES, replicas) as s:
        key = (s.data_dir / defaults.DEMO_KEY_FILE).read_text().strip()
        deadline = time.monotonic() + WAIT_S
        for gateway in GATEWAYS:
            with Client(s.addr(gateway), key) as c:
                while MODEL not in {m.name for m in c.list_models()}:
                    assert time.monotonic() < deadline, f"{MODEL} never ready:\n{s.logs()}"
                    time.sleep(0.3)
        yield s


def _key(stack) -> str:
    return (stack.data_dir / defaults.DEMO_KEY_FILE).read_text().strip()


@dataclass
class Sent:
    at: float
    code: grpc.StatusCode | None  # None: completed
    reason: str = ""


async def _one(client: AsyncClient, at: float, prompt: str) -> Sent:
    await asyncio.sleep(max(0.0, at - time.monotonic()))
    sent = time.monotonic()
    try:
        async for _ in client.generate(MODEL, prompt, max_tokens=1, timeout=WAIT_S):
            pass
    except grpc.aio.AioRpcError as err:
        trailers = dict(err.trailing_metadata() or ())
        return Sent(sent, err.code(), str(trailers.get(names.REFUSAL_REASON_METADATA, "")))
    return Sent(sent, None)


async def _offer(
    addresses: list[str],
    key: str,
    rps: float,
    seconds: float,
    answered: Callable[[Sent], None] = lambda _: None,
) -> list[Sent]:
    """`rps` requests a second for `seconds`, in turn to each address; `answered` hears of
    each request as it ends."""
    clients = [AsyncClient(a, key) for a in addresses]

    async def one(i: int) -> Sent:
        sent = await _one(clients[i % len(clients)], start + i / rps, f"request {i} of the offer")
        answered(sent)
        return sent

    try:
        start = time.monotonic() + 0.5
        return await asyncio.gather(*(one(i) for i in range(int(rps * seconds))))
    finally:
        for c in clients:
            await c.close()


def test_a_tenants_request_rate_holds_across_three_gateways(stack):
    # Three times the tenant's rate, spread over three gateways that each allow the rate: the
    # schedulers' one bucket lets through the burst and then the rate, not three times it.
    addresses = [stack.addr(g) for g in GATEWAYS]
    sent = asyncio.run(_offer(addresses, _key(stack), 3 * RATE, 10.0))
    allowed = [s for s in sent if s.code is None]
    refused = [s for s in sent if s.code is not None]
    assert {(s.code, s.reason) for s in refused} <= {
        (grpc.StatusCode.RESOURCE_EXHAUSTED, "rate")
    }, [(s.code, s.reason) for s in refused]
    span = max(s.at for s in sent) - min(s.at for s in sent)
    expected = BURST + RATE * span
    assert abs(len(allowed) - expected) <= 0.1 * expected, (len(allowed), expected, span)


def _kv_blocks(stack, scheduler: str) -> dict[str, float]:
    bind = stack.processes[scheduler].env["STRATA_SCHEDULER_PROMETHEUS_BIND"]
    text = httpx2.get(f"http://{bind}/metrics", timeout=WAIT_S).text
    return {
        s.labels["node"]: s.value
        for f in text_string_to_metric_families(text)
        if f.name == "strata_scheduler_kv_blocks"
        for s in f.samples
    }


def _nodes(stack, scheduler: str) -> set[tuple[str, str, int]]:
    with sync_channel(stack.addr(scheduler), stack.identity) as ch:
        listed = scheduler_pb2_grpc.SchedulerStub(ch).ListNodes(
            scheduler_pb2.ListNodesRequest(), timeout=WAIT_S
        )
    return {
        (n.node_id, r.model, r.state)
        for n in listed.nodes
        for r in n.replicas
        if r.state == common_pb2.REPLICA_STATE_READY
    }


def _until(check, what: str, stack) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        assert time.monotonic() < deadline, f"never {what}:\n{stack.logs()}"
        time.sleep(0.3)


def test_both_schedulers_see_every_node_and_every_kv_event(stack):
    _until(
        lambda: _nodes(stack, SCHEDULERS[0]) == _nodes(stack, SCHEDULERS[1]) != set(),
        "the same ready replicas on both schedulers",
        stack,
    )
    # Long prompts push blocks out of the node's 256: its KV tier store reports them to both.
    with Client(stack.addr("gateway"), _key(stack)) as client:
        for i in range(16):
            deadline = time.monotonic() + WAIT_S
            while True:  # the tenant's rate: wait out a refusal
                try:
                    list(client.generate(MODEL, prompt=f"{i} filler that differs {i}. " * 12))
                    break
                except grpc.RpcError as err:
                    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, err
                    assert time.monotonic() < deadline
                    time.sleep(0.3)

    def same_blocks() -> bool:
        first, second = (_kv_blocks(stack, s) for s in SCHEDULERS)
        return first == second and sum(first.values()) > 0

    _until(same_blocks, "the same KV blocks on both schedulers", stack)


def _planner_metrics(stack, planner: str) -> dict[str, float]:
    bind = stack.processes[planner].env["STRATA_PLACEMENT_PROMETHEUS_BIND"]
    text = httpx2.get(f"http://{bind}/metrics", timeout=WAIT_S).text
    return {
        s.name: s.value
        for f in text_string_to_metric_families(text)
        if f.name in ("strata_placement_lease_held", "strata_placement_plan_version")
        for s in f.samples
    }


def _replan(stack, planner: str) -> grpc.StatusCode:
    with sync_channel(stack.addr(planner), stack.identity) as ch:
        try:
            placement_pb2_grpc.PlacementStub(ch).Replan(
                placement_pb2.ReplanRequest(), timeout=WAIT_S
            )
        except grpc.RpcError as err:
            return err.code()
    return grpc.StatusCode.OK


def test_of_two_planners_one_applies_plans_and_the_other_takes_over_when_it_dies(stack):
    def one_holder() -> list[str]:
        held = [p for p in PLANNERS if _planner_metrics(stack, p)["strata_placement_lease_held"]]
        return held if len(held) == 1 else []

    _until(lambda: one_holder(), "exactly one planner holding the lease", stack)
    active = one_holder()[0]
    standby = next(p for p in PLANNERS if p != active)
    # The standby never planned, and refuses a manual replan with a reason; the holder plans.
    assert _planner_metrics(stack, standby)["strata_placement_plan_version"] == 0
    assert _replan(stack, standby) == grpc.StatusCode.FAILED_PRECONDITION
    assert _replan(stack, active) == grpc.StatusCode.OK
    # The holder dies without releasing: the standby takes over once the lease expires.
    stack.processes[active].proc.send_signal(signal.SIGKILL)
    _until(
        lambda: _planner_metrics(stack, standby)["strata_placement_lease_held"] == 1,
        "the standby taking over",
        stack,
    )
    _until(
        lambda: _planner_metrics(stack, standby)["strata_placement_plan_version"] > 0,
        "a plan from the new holder",
        stack,
    )


def test_killing_the_scheduler_the_gateways_route_through_loses_no_accepted_request(stack):
    # Below the tenant's rate, so every request is accepted; the first scheduler dies once
    # KILL_AFTER of them have ended, while the rest are still to be routed.
    addresses = [stack.addr(g) for g in GATEWAYS]

    async def load_and_kill() -> list[Sent]:
        ended: list[Sent] = []
        under_load = asyncio.Event()

        def answered(sent: Sent) -> None:
            ended.append(sent)
            if len(ended) >= KILL_AFTER:
                under_load.set()

        offer = asyncio.create_task(_offer(addresses, _key(stack), RATE * 0.75, 10.0, answered))
        await asyncio.wait_for(under_load.wait(), WAIT_S)
        stack.processes[SCHEDULERS[0]].proc.send_signal(signal.SIGKILL)
        return await offer

    sent = asyncio.run(load_and_kill())
    failed = [(s.code, s.reason) for s in sent if s.code is not None]
    assert not failed, f"{len(failed)} of {len(sent)} failed: {failed}"
