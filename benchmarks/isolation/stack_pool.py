"""The isolation benchmark's pool on the real stack: the compose services as processes
(benchmarks.common.stack.ComposeStack, same commands and environment), with N node managers
instead of one, each with its own KV tier store, all serving one replica of the same model.

Node i is compose's `node` and `kvstore` with STRATA_NODE_ID node-i, its own ports, its own disk
folder; the extra nodes start before the placement planner so that its first plan already
puts one replica on each (it places at most one replica of a model per node).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from benchmarks.common.ports import free_port
from benchmarks.common.stack import ComposeStack, StackProcess
from strata.rpc.channels import sync_channel
from strata.v1 import common_pb2, scheduler_pb2, scheduler_pb2_grpc

NODE_SERVICES = ("kvstore", "node")


def node_ids(count: int) -> list[str]:
    return [f"node-{i}" for i in range(count)]


@dataclass
class PoolStack(ComposeStack):
    nodes: int = 2
    extra: dict[str, StackProcess] = field(default_factory=dict)

    def plan(self) -> list[StackProcess]:
        planned = super().plan()
        by_name = {p.name: p for p in planned}
        extra = []
        for node_id in node_ids(self.nodes)[1:]:
            extra += _copy_node(by_name["kvstore"], by_name["node"], node_id, self.data_dir)
        at = [p.name for p in planned].index("node") + 1
        return planned[:at] + extra + planned[at:]

    def wait_replicas(self, model: str, timeout_s: float = 180.0) -> None:
        """Until the scheduler sees a READY replica of `model` on every node."""
        want = set(node_ids(self.nodes))
        deadline = time.monotonic() + timeout_s
        with sync_channel(self.addr("scheduler"), self.identity) as ch:
            stub = scheduler_pb2_grpc.SchedulerStub(ch)
            while True:
                nodes = stub.ListNodes(scheduler_pb2.ListNodesRequest(), timeout=5).nodes
                ready = {
                    n.node_id
                    for n in nodes
                    for r in n.replicas
                    if r.model == model and r.state == common_pb2.REPLICA_STATE_READY
                }
                if want <= ready:
                    return
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{model} READY on {sorted(ready)} only, not on every "
                        f"one of {sorted(want)}, after {timeout_s:.0f} s:\n"
                        f"{self.logs()}"
                    )
                time.sleep(0.5)


def _copy_node(
    store: StackProcess, node: StackProcess, node_id: str, data_dir
) -> list[StackProcess]:
    """node_id's KV tier store and node manager: node-0's settings but ids, ports, folder."""
    store_addr = f"127.0.0.1:{free_port()}"
    node_addr = f"127.0.0.1:{free_port()}"
    store_env = {
        **store.env,
        "STRATA_KVSTORE_BIND": store_addr,
        "STRATA_KVSTORE_ADVERTISE": store_addr,
        "STRATA_KVSTORE_NODE_ID": node_id,
        "STRATA_KVSTORE_DISK_DIR": str(data_dir / "kv" / node_id),
        "STRATA_KVSTORE_PROMETHEUS_BIND": "",  # node-0's store has the port
    }
    node_env = {
        **node.env,
        "STRATA_NODE_BIND": node_addr,
        "STRATA_NODE_ADVERTISE": node_addr,
        "STRATA_NODE_ID": node_id,
        "STRATA_KVSTORE_ADDR": store_addr,
        "STRATA_NODE_PROMETHEUS_BIND": "",  # node-0 has the port
    }
    return [
        StackProcess(f"kvstore-{node_id}", list(store.command), store_env, store_addr),
        StackProcess(node_id, list(node.command), node_env, node_addr),
    ]
