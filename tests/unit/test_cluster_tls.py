"""Internal mutual TLS at any address: a channel verifies the server's certificate against the
cluster's name, so dialing an address no certificate names (a pod IP, a StatefulSet pod's DNS
name) works, while a certificate from another CA still fails the handshake."""

from __future__ import annotations

import datetime
from concurrent import futures

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from strata.rpc.channels import sync_channel
from strata.security import layout
from strata.security.identity import ClusterIdentity
from strata.security.secrets import ensure_secrets

CALL_TIMEOUT_S = 240.0  # a call's deadline on a busy 2-core machine

# Loopback answers the whole of 127/8 on Linux; no certificate names 127.0.0.2.
UNNAMED_ADDRESS = "127.0.0.2"


@pytest.fixture
def server(tmp_path):
    ensure_secrets(tmp_path / "cluster")
    identity = ClusterIdentity.load(str(tmp_path / "cluster"), "scheduler")
    srv = grpc.server(futures.ThreadPoolExecutor(2))
    health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), srv)
    port = srv.add_secure_port("0.0.0.0:0", identity.server_credentials())
    srv.start()
    yield tmp_path, port
    srv.stop(None)


def _check(address: str, identity: ClusterIdentity) -> grpc.StatusCode:
    with sync_channel(address, identity) as ch:
        try:
            health_pb2_grpc.HealthStub(ch).Check(
                health_pb2.HealthCheckRequest(), timeout=CALL_TIMEOUT_S
            )
        except grpc.RpcError as err:
            return err.code()
    return grpc.StatusCode.OK


def test_an_internal_channel_reaches_a_peer_at_an_address_no_certificate_names(server):
    tmp_path, port = server
    operator = ClusterIdentity.load(str(tmp_path / "cluster"), "operator")
    assert _check(f"{UNNAMED_ADDRESS}:{port}", operator) is grpc.StatusCode.OK
    ensure_secrets(tmp_path / "other")
    stranger = ClusterIdentity.load(str(tmp_path / "other"), "operator")
    assert _check(f"{UNNAMED_ADDRESS}:{port}", stranger) is grpc.StatusCode.UNAVAILABLE


def test_a_set_issued_without_the_cluster_name_is_replaced_whole(tmp_path):
    d = tmp_path / "cluster"
    assert ensure_secrets(d) is True
    assert ensure_secrets(d) is False  # complete and current: kept
    cert = x509.load_pem_x509_certificate((d / layout.cert_file("gateway")).read_bytes())
    assert layout.CLUSTER_NAME in cert.extensions.get_extension_for_class(
        x509.SubjectAlternativeName
    ).value.get_values_for_type(x509.DNSName)
    # A set from before: the gateway's certificate without the cluster's name.
    ca_before = (d / layout.CA_FILE).read_bytes()
    (d / layout.cert_file("gateway")).write_bytes(_without_names())
    assert ensure_secrets(d) is True
    assert (d / layout.CA_FILE).read_bytes() != ca_before  # a new CA: every file anew


def _without_names() -> bytes:
    """A self-signed certificate with no subject alternative names."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gateway")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM)
