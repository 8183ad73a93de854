"""The cluster's own credentials, in one folder: an internal token, a CA, and a certificate with
its key for each service.

    <dir>/internal_token          32 random bytes, url-safe; every internal call carries it
    <dir>/ca.pem, ca-key.pem      the cluster CA (P-256, 10 years); only this folder signs with it
    <dir>/<service>.pem, -key.pem one per SERVICES entry, signed by the CA, valid as server and
                                  client (mutual TLS), for the names in SERVICE_NAMES

`make run` (the supervisor), the test stacks and compose's `secrets` job call `ensure_secrets`
before any service starts; a service that finds the folder incomplete refuses to start. Keys and
the token are written 0600, through a temporary file renamed into place, under an exclusive
lock on `<dir>/.lock`, so two starters never write a mixed set.
"""

from __future__ import annotations

import datetime
import fcntl
import ipaddress
import os
import secrets as random_secrets
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from strata.security.layout import (
    CA_FILE,
    CA_KEY_FILE,
    CLUSTER_NAME,
    SERVICES,
    TOKEN_FILE,
    cert_file,
    key_file,
    missing,
)

# The names a certificate is valid for: the cluster's name (what internal channels check),
# compose's service names, loopback (make run, a node's workers), and localhost. Any service
# name may present any address in the cluster: the CA, not the name, is what marks a peer as
# the cluster's own.
SERVICE_NAMES = (CLUSTER_NAME, *(s for s in SERVICES if s != "operator"), "localhost")
LOOPBACK = (ipaddress.IPv4Address("127.0.0.1"), ipaddress.IPv6Address("::1"))
VALID_DAYS = 3650


def ensure_secrets(directory: str | os.PathLike[str]) -> bool:
    """Create the folder's secrets if any is missing; True when this call wrote them. A partial
    set (a starter killed halfway), or one whose certificates lack CLUSTER_NAME (issued before
    internal channels checked it), is replaced as a whole: certificates must all come from
    the same CA."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(d / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not missing(d) and all(_names_cluster(d / cert_file(s)) for s in SERVICES):
            return False
        _write(d / TOKEN_FILE, random_secrets.token_urlsafe(32).encode(), private=True)
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_cert = _ca_certificate(ca_key)
        _write(d / CA_KEY_FILE, _key_pem(ca_key), private=True)
        for service in SERVICES:
            key = ec.generate_private_key(ec.SECP256R1())
            cert = _service_certificate(service, key, ca_key, ca_cert)
            _write(d / key_file(service), _key_pem(key), private=True)
            _write(d / cert_file(service), cert.public_bytes(serialization.Encoding.PEM))
        # Last: a folder with the CA certificate and the token in place is complete.
        _write(d / CA_FILE, ca_cert.public_bytes(serialization.Encoding.PEM))
        return True


def _names_cluster(cert_path: Path) -> bool:
    """Whether the certificate at `cert_path` is valid for CLUSTER_NAME."""
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    return CLUSTER_NAME in names.get_values_for_type(x509.DNSName)


def _write(path: Path, data: bytes, private: bool = False) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _validity(builder: x509.CertificateBuilder) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return builder.not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(
        now + datetime.timedelta(days=VALID_DAYS)
    )


def _ca_certificate(key: ec.EllipticCurvePrivateKey) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "strata cluster CA")])
    builder = _validity(
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
    )
    builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
    builder = builder.add_extension(
        x509.KeyUsage(
            digital_signature=False,
            content_commitment=False,
            key_encipherment=False,
            data_encipherment=False,
            key_agreement=False,
            key_cert_sign=True,
            crl_sign=True,
            encipher_only=False,
            decipher_only=False,
        ),
        critical=True,
    )
    return builder.sign(key, hashes.SHA256())


def _service_certificate(
    service: str,
    key: ec.EllipticCurvePrivateKey,
    ca_key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
) -> x509.Certificate:
    builder = _validity(
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, service)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
    )
    names: list[x509.GeneralName] = [x509.DNSName(n) for n in SERVICE_NAMES]
    names += [x509.IPAddress(ip) for ip in LOOPBACK]
    builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    builder = builder.add_extension(
        x509.BasicConstraints(ca=False, path_length=None), critical=True
    )
    builder = builder.add_extension(
        x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
        critical=False,
    )
    return builder.sign(ca_key, hashes.SHA256())


def main(argv: list[str] | None = None) -> int:
    """`python -m strata.security.secrets DIR`: compose's one-shot secrets job."""
    import argparse

    ap = argparse.ArgumentParser(
        prog="python -m strata.security.secrets",
        description="Write the cluster's token, CA and per-service "
        "certificates into DIR unless complete there.",
    )
    ap.add_argument("directory")
    args = ap.parse_args(argv)
    wrote = ensure_secrets(args.directory)
    print(f"{'wrote' if wrote else 'kept'} the cluster secrets in {args.directory}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
