"""The setting of a service that makes the calls of the hops every request crosses (the
gateway's to schedulers and nodes, the node manager's to its workers)."""

from __future__ import annotations

from pydantic import Field

from strata.core.settings import StrataSettings


class MultiplexFields(StrataSettings):
    rpc_multiplex: bool = Field(
        True,
        description="carry the calls of the hops every request crosses multiplexed on one "
        "stream per peer (strata.rpc.mux_client); false: a new gRPC call each",
    )
