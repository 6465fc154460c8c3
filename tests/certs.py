"""A throwaway certificate authority for TLS tests: a CA, a server certificate for 127.0.0.1 and
localhost, and a client certificate, written as PEM files."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass
class Certificates:
    ca: Path  # CA certificate
    server: Path  # server key + certificate chain (ssl.keystore.location)
    client_cert: Path
    client_key: Path


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _issue(subject: str, key: ec.EllipticCurvePrivateKey, issuer: x509.Name, issuer_key: ec.EllipticCurvePrivateKey,
           *, ca: bool = False, sans: list[x509.GeneralName] | None = None) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(issuer)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=2))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def make_certificates(directory: Path) -> Certificates:
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _issue("tiered-proxy test CA", ca_key, _name("tiered-proxy test CA"), ca_key, ca=True)
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = _issue("tiered-proxy", server_key, ca.subject, ca_key,
                    sans=[x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = _issue("test-client", client_key, ca.subject, ca_key)

    def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
        return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())

    paths = Certificates(directory / "ca.pem", directory / "proxy.pem", directory / "client.pem",
                         directory / "client.key")
    paths.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths.server.write_bytes(key_pem(server_key) + server.public_bytes(serialization.Encoding.PEM))
    paths.client_cert.write_bytes(client.public_bytes(serialization.Encoding.PEM))
    paths.client_key.write_bytes(key_pem(client_key))
    return paths
