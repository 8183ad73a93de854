"""A replan moves a replica to another node while requests keep arriving, and none of them fails.

The compose stack runs as processes (dummy-tiny, batch-aware placement), plus a second node
manager with its own KV tier store. Once dummy-tiny serves on node-0, two clients send requests
back to back; the test cordons node-0 through Placement.Replan, which loads a replica on node-1,
waits until it is READY, then drains and unloads the one on node-0. Every request must succeed,
some after the move, and in the end node-0 holds no replica while node-1 serves one.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import grpc
import pytest

from benchmarks.common.ports import free_port
from benchmarks.common.stack import ROOT, StackProcess, wait_serving
from strata.client.sdk import Client
from strata.core import defaults
from strata.core.lifeline import child_env
from strata.rpc.channels import sync_channel
from strata.telemetry import names
from strata.v1 import (
    common_pb2,
    node_pb2,
    node_pb2_grpc,
    placement_pb2,
    placement_pb2_grpc,
    scheduler_pb2,
    scheduler_pb2_grpc,
)
from tests.integration.conftest import running_stack

pytestmark = pytest.mark.integration
MODEL = "dummy-tiny"
OVERRIDES = {
    "placement": {
        "STRATA_MODELS": MODEL,
        "STRATA_REPLAN_INTERVAL_S": "1.0",
        "STRATA_PLACEMENT_DRAIN_TIMEOUT_MS": "30000",
    },
    "node": {
        "STRATA_TORCH_THREADS": "1",
        "STRATA_KV_BLOCKS": "256",
        "STRATA_MAX_BATCHED_TOKENS": "256",
    },
    "kvstore": {"STRATA_KVSTORE_HOST_BYTES": "67108864", "STRATA_KVSTORE_SLAB_BYTES": "4194304"},
}


def _second_node(stack) -> None:
    """node-1 and its KV tier store, configured like node-0 apart from ids, ports and folders."""
    store_addr = f"127.0.0.1:{free_port()}"
    node_addr = f"127.0.0.1:{free_port()}"
    store_env = {
        **stack.processes["kvstore"].env,
        "STRATA_KVSTORE_BIND": store_addr,
        "STRATA_KVSTORE_ADVERTISE": store_addr,
        "STRATA_KVSTORE_NODE_ID": "node-1",
        "STRATA_KVSTORE_DISK_DIR": str(stack.data_dir / "kv" / "node-1"),
        "STRATA_KVSTORE_PROMETHEUS_BIND": "",  # node-0's store has the port
    }
    node_env = {
        **stack.processes["node"].env,
        "STRATA_NODE_BIND": node_addr,
        "STRATA_NODE_ADVERTISE": node_addr,
        "STRATA_NODE_ID": "node-1",
        "STRATA_KVSTORE_ADDR": store_addr,
        "STRATA_NODE_STATE_DIR": str(stack.data_dir / "node" / "node-1"),
        "STRATA_NODE_PROMETHEUS_BIND": "",  # node-0 has the port
    }
    for name, command, env, address in (
        ("kvstore-1", stack.processes["kvstore"].command, store_env, store_addr),
        ("node-1", stack.processes["node"].command, node_env, node_addr),
    ):
        p = StackProcess(name, list(command), env, address)
        stack.processes[name] = p
        _spawn(stack, p)
        wait_serving(p, 120, stack.identity)


def _spawn(stack, p: StackProcess) -> None:
    """Started as ComposeStack.start starts its processes, so stack.stop() stops it too."""
    p.log_path = stack.data_dir / f"{p.name}.log"
    p.proc = subprocess.Popen(
        [sys.executable if p.command[0] == "python" else p.command[0], *p.command[1:]],
        cwd=ROOT,
        env=child_env({**os.environ, "PYTHONUNBUFFERED": "1", **p.env}),
        stdout=open(p.log_path, "w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _replicas(stack, name: str) -> list[common_pb2.ReplicaInfo]:
    with sync_channel(stack.addr(name), stack.identity) as ch:
        info = node_pb2_grpc.NodeManagerStub(ch).GetNodeStatus(
            node_pb2.GetNodeStatusRequest(), timeout=240
        )
    # serving replicas: compose keeps a hot standby beside each, which never serves by itself
    return [
        r for r in info.replicas if r.model == MODEL and r.state != common_pb2.REPLICA_STATE_STANDBY
    ]


def _wait(predicate, timeout_s: float, what: str, stack) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout_s:.0f} s:\n{stack.logs()}")
        time.sleep(0.2)


def _rate_limited(err: grpc.RpcError) -> bool:
    return err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "request rate" in (
        err.details() or ""
    )


def _retry_after_s(err: grpc.RpcError) -> float:
    """The refusal's retry-after-ms trailer in seconds (0.05 s where it has none)."""
    for key, value in err.trailing_metadata() or ():
        if key == names.RETRY_AFTER_METADATA:
            return max(0.001, int(value) / 1000)
    return 0.05


class Traffic:
    """Clients sending short generations back to back; every outcome is recorded."""

    def __init__(self, stack, clients: int) -> None:
        key = (stack.data_dir / defaults.DEMO_KEY_FILE).read_text().strip()
        self._address, self._key = stack.addr("gateway"), key
        self._stop = threading.Event()
        self.ok: list[float] = []  # finish times
        self.failed: list[str] = []
        self.rate_limited = 0  # refusals for the tenant's request rate, retried after a wait
        self._threads = [threading.Thread(target=self._loop, args=(i,)) for i in range(clients)]

    def __enter__(self) -> Traffic:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join()

    def _loop(self, i: int) -> None:
        with Client(self._address, self._key) as client:
            n = 0
            while not self._stop.is_set():
                n += 1
                try:
                    chunks = list(
                        client.generate(
                            MODEL,
                            prompt=f"client {i} request {n}: hello",
                            max_tokens=16,
                            timeout=240,
                        )
                    )
                    if chunks[-1].finish_reason == common_pb2.FINISH_REASON_LENGTH:
                        self.ok.append(time.monotonic())
                    else:
                        self.failed.append(f"finish reason {chunks[-1].finish_reason}")
                except grpc.RpcError as err:
                    if _rate_limited(err):
                        # the gateway's per-tenant rate, not the replan: back off as a client
                        # should, for as long as the refusal says
                        self.rate_limited += 1
                        self._stop.wait(_retry_after_s(err))
                        continue
                    self.failed.append(f"{err.code().name}: {err.details()}")


def test_no_request_fails_while_a_replan_moves_the_replica(tmp_path):
    with running_stack(tmp_path, OVERRIDES) as stack:
        _wait(
            lambda: (
                len(_replicas(stack, "node")) == 1
                and _replicas(stack, "node")[0].state == common_pb2.REPLICA_STATE_READY
            ),
            120,
            "dummy-tiny READY on node-0",
            stack,
        )
        _second_node(stack)
        with sync_channel(stack.addr("scheduler"), stack.identity) as ch:
            scheduler = scheduler_pb2_grpc.SchedulerStub(ch)
            _wait(
                lambda: (
                    "node-1"
                    in {
                        n.node_id
                        for n in scheduler.ListNodes(scheduler_pb2.ListNodesRequest()).nodes
                    }
                ),
                60,
                "node-1 registered",
                stack,
            )
        with sync_channel(stack.addr("placement"), stack.identity) as ch:
            placement = placement_pb2_grpc.PlacementStub(ch)
            with Traffic(stack, clients=2) as traffic:
                _wait(lambda: len(traffic.ok) >= 5, 240, "traffic flowing", stack)
                plan = placement.Replan(placement_pb2.ReplanRequest(cordon=["node-0"]), timeout=240)
                assert [(a.model, a.node_id) for a in plan.assignments] == [(MODEL, "node-1")]
                _wait(
                    lambda: (
                        [m.state for m in placement.GetPlan(placement_pb2.GetPlanRequest()).moves]
                        == ["done"]
                    ),
                    120,
                    "the move",
                    stack,
                )
                moved_at = time.monotonic()
                _wait(
                    lambda: sum(t > moved_at for t in traffic.ok) >= 5,
                    60,
                    "traffic after the move",
                    stack,
                )
            [move] = placement.GetPlan(placement_pb2.GetPlanRequest()).moves
        assert traffic.failed == []
        assert (move.from_node_id, move.to_node_id, move.state) == ("node-0", "node-1", "done")
        assert _replicas(stack, "node") == []
        [serving] = _replicas(stack, "node-1")
        assert serving.state == common_pb2.REPLICA_STATE_READY
        assert len(traffic.ok) >= 10
