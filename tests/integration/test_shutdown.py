"""Shutdown that loses nothing: SIGTERM to a node manager mid-stream. Its replicas leave routing
(new requests are no longer sent there) and finish the streams they serve before the process
exits, within STRATA_SHUTDOWN_GRACE_S."""

from __future__ import annotations

import signal
import threading
import time

import grpc
import pytest

from strata.client.sdk import Client
from strata.core import defaults
from strata.rpc.channels import sync_channel
from strata.v1 import scheduler_pb2, scheduler_pb2_grpc
from tests.integration.conftest import running_stack

pytestmark = pytest.mark.integration
MODEL = "dummy-tiny"
OVERRIDES = {
    "placement": {"STRATA_MODELS": MODEL, "STRATA_REPLAN_INTERVAL_S": "1.0"},
    "node": {"STRATA_TORCH_THREADS": "1", "STRATA_NODE_STANDBY": "0"},
}
WAIT_S = 240.0  # deadline of every wait on a busy 2-core machine


def test_sigterm_to_a_node_lets_its_streams_finish_and_takes_it_out_of_routing(tmp_path):
    with running_stack(tmp_path, OVERRIDES) as stack:
        key = (stack.data_dir / defaults.DEMO_KEY_FILE).read_text().strip()
        deadline = time.monotonic() + WAIT_S
        with Client(stack.addr("gateway"), key) as c:
            while MODEL not in {m.name for m in c.list_models()}:
                assert time.monotonic() < deadline, stack.logs()
                time.sleep(0.3)
        started = threading.Event()
        result: dict = {}

        def stream() -> None:
            tokens, finish = 0, 0
            with Client(stack.addr("gateway"), key) as c:
                for chunk in c.generate(
                    MODEL, "a long story " * 8, max_tokens=1500, ignore_eos=True, timeout=WAIT_S
                ):
                    tokens += len(chunk.token_ids)
                    if tokens >= 5:
                        started.set()
                    finish = chunk.finish_reason or finish
            result.update(tokens=tokens, finish=finish)

        reader = threading.Thread(target=stream)
        reader.start()
        assert started.wait(WAIT_S), stack.logs()
        node = stack.processes["node"].proc
        node.send_signal(signal.SIGTERM)
        # The scheduler hears the replica is DRAINING (or gone): no new request goes there.
        with sync_channel(stack.addr("scheduler"), stack.identity) as ch:
            scheduler = scheduler_pb2_grpc.SchedulerStub(ch)

            def routable() -> bool:
                nodes = scheduler.ListNodes(scheduler_pb2.ListNodesRequest()).nodes
                return any(r.model == MODEL and r.state == 2 for n in nodes for r in n.replicas)

            deadline = time.monotonic() + WAIT_S
            while routable():
                assert time.monotonic() < deadline, "the draining replica stayed routable"
                time.sleep(0.2)
        with Client(stack.addr("gateway"), key) as c, pytest.raises(grpc.RpcError) as refused:
            list(c.generate(MODEL, "new work", max_tokens=2, timeout=WAIT_S))
        assert refused.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.NOT_FOUND)
        reader.join(WAIT_S)
        assert not reader.is_alive()
        assert result == {"tokens": 1500, "finish": 2}, (result, stack.logs())  # LENGTH
        assert node.wait(WAIT_S) == 0, stack.logs()
