"""Container health probe: `python -m strata.client.healthcheck [--internal] ADDR [--service NAME]`.

Asks a server's standard gRPC health service (grpc.health.v1) and exits 0 when it answers
SERVING, 1 otherwise, so compose and Kubernetes exec probes need no extra binary in the image.
`--internal` probes an internal service: over mutual TLS with the cluster credential the
container's own settings name (STRATA_SECRETS_DIR, STRATA_INTERNAL_TLS).
"""

from __future__ import annotations

import argparse
import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from strata.rpc.channels import public_sync_channel, sync_channel
from strata.security.identity import ClusterIdentity


def check(
    address: str, service: str = "", timeout: float = 3.0, identity: ClusterIdentity | None = None
) -> tuple[bool, str]:
    """Return (healthy, one-line description) for `service` ("" = the whole server)."""
    with (
        sync_channel(address, identity) if identity is not None else public_sync_channel(address)
    ) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
        except grpc.RpcError as err:
            return False, f"{address}: {err.code().name}: {err.details()}"
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    return reply.status == health_pb2.HealthCheckResponse.SERVING, f"{address}: {status}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m strata.client.healthcheck",
        description="Exit 0 if a gRPC server reports SERVING.",
    )
    parser.add_argument("address", help="host:port of the server, e.g. 127.0.0.1:50051")
    parser.add_argument(
        "--service", default="", help="fully qualified service name (default: the whole server)"
    )
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds to wait (default 3)")
    parser.add_argument(
        "--internal", action="store_true", help="an internal service: use the cluster credential"
    )
    args = parser.parse_args(argv)
    identity = None
    if args.internal:
        from strata.security.settings import SecurityFields

        identity = SecurityFields().security().client_identity()
    healthy, line = check(args.address, args.service, args.timeout, identity)
    print(line, file=sys.stdout if healthy else sys.stderr)
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
