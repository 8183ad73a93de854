"""The gateway's channels to node managers: one per address, opened on first use, with the
cluster credential; closed with the gateway."""

from __future__ import annotations

from strata.rpc.channels import mux_channel
from strata.rpc.mux_client import MuxChannel
from strata.v1 import node_pb2_grpc


class NodeClients:
    def __init__(self) -> None:
        self._stubs: dict[str, tuple[MuxChannel, node_pb2_grpc.NodeManagerStub]] = {}

    def stub(self, address: str) -> node_pb2_grpc.NodeManagerStub:
        entry = self._stubs.get(address)
        if entry is None:
            ch = mux_channel(address)
            entry = self._stubs[address] = (ch, node_pb2_grpc.NodeManagerStub(ch))
        return entry[1]

    async def close(self) -> None:
        for ch, _ in self._stubs.values():
            await ch.close()
        self._stubs.clear()
