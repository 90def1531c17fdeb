"""Test seam: a throwaway certificate authority and the certificates a TLS cluster needs.

:func:`make_certs` writes, under a directory, PEM files of a fresh CA and of
certificates it signs, each valid for the loopback names (``localhost``,
``127.0.0.1``, ``::1``) and for a day:

- ``node``: a broker's (or consumer's) own certificate, both served
  (``--broker.server-cert-file``) and presented to its peers
  (``--broker.peer-cert-file``);
- ``client``: a client's (gazctl's ``--broker.cert-file``).

:func:`make_ca` alone makes another CA: certificates of a foreign CA are
what a test uses to show that brokers refuse them. Tests, benchmarks and
``make up --secure`` use it; it needs ``cryptography`` (the ``testing`` extra).

Usage::

    from gazette.broker.protocol import dial, tlstesting

    certs = tlstesting.make_certs(tmp_path / "tls")
    args = certs.broker_args()          # --broker.server-cert-file ... --broker.peer-ca-file
    channel = dial.channel(endpoint, dial.DialConfig(tls=certs.client_tls()))
"""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
import os
import pathlib
import ssl
from collections.abc import Sequence
from typing import Any

from gazette.broker.protocol import dial

__all__ = ["CA", "Certs", "make_ca", "make_certs"]

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


@dataclasses.dataclass(frozen=True)
class CA:
    """A certificate authority: its PEM certificate file, and what signs with it."""

    directory: pathlib.Path
    name: str
    cert_file: pathlib.Path
    key_file: pathlib.Path

    def issue(
        self,
        name: str,
        hosts: Sequence[str] = LOOPBACK_NAMES,
        *,
        server: bool = True,
        client: bool = True,
    ) -> tuple[pathlib.Path, pathlib.Path]:
        """Sign a certificate of ``name`` for ``hosts``; its (certificate, key) files."""
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        ca_key: Any = serialization.load_pem_private_key(self.key_file.read_bytes(), None)
        ca_cert = x509.load_pem_x509_certificate(self.cert_file.read_bytes())
        key = _new_key()
        sans: list[x509.GeneralName] = []
        for host in hosts:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                sans.append(x509.DNSName(host))
        usages = [ExtendedKeyUsageOID.SERVER_AUTH] if server else []
        usages += [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        cert_file = self.directory / f"{name}.crt"
        key_file = self.directory / f"{name}.key"
        cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key_file, key)
        return cert_file, key_file


@dataclasses.dataclass(frozen=True)
class Certs:
    """The files :func:`make_certs` wrote."""

    ca: CA
    node_cert_file: pathlib.Path
    node_key_file: pathlib.Path
    client_cert_file: pathlib.Path
    client_key_file: pathlib.Path

    @property
    def ca_file(self) -> pathlib.Path:
        return self.ca.cert_file

    def server_tls(self, *, require_client_certs: bool = True) -> dial.TLS:
        """A broker's serving TLS (client certificates required unless told otherwise)."""
        return dial.TLS(
            str(self.node_cert_file),
            str(self.node_key_file),
            str(self.ca_file) if require_client_certs else "",
        )

    def peer_tls(self) -> dial.TLS:
        """A broker's TLS towards its peers: its node certificate, trusting our CA."""
        return dial.TLS(str(self.node_cert_file), str(self.node_key_file), str(self.ca_file))

    def client_tls(self) -> dial.TLS:
        """A client's TLS: the client certificate, trusting our CA."""
        return dial.TLS(str(self.client_cert_file), str(self.client_key_file), str(self.ca_file))

    def broker_args(
        self, prefix: str = "broker", *, require_client_certs: bool = True
    ) -> list[str]:
        """The server and peer TLS flags of a broker (``prefix`` ``consumer`` for a consumer)."""
        args = [
            f"--{prefix}.server-cert-file", str(self.node_cert_file),
            f"--{prefix}.server-cert-key-file", str(self.node_key_file),
            f"--{prefix}.peer-cert-file", str(self.node_cert_file),
            f"--{prefix}.peer-cert-key-file", str(self.node_key_file),
            f"--{prefix}.peer-ca-file", str(self.ca_file),
        ]  # fmt: skip
        if require_client_certs:
            args += [f"--{prefix}.server-ca-file", str(self.ca_file)]
        return args

    def client_args(self) -> list[str]:
        """The client TLS flags of gazctl (and of a consumer's broker client)."""
        return [
            "--broker.cert-file", str(self.client_cert_file),
            "--broker.cert-key-file", str(self.client_key_file),
            "--broker.trusted-ca-file", str(self.ca_file),
        ]  # fmt: skip

    def client_env(self) -> dict[str, str]:
        """:meth:`client_args` as gazctl's environment variables."""
        return {
            "BROKER_CERT_FILE": str(self.client_cert_file),
            "BROKER_CERT_KEY_FILE": str(self.client_key_file),
            "BROKER_TRUSTED_CA_FILE": str(self.ca_file),
        }

    def client_ssl_context(self) -> ssl.SSLContext:
        """An ``ssl`` context of HTTPS requests to the brokers' HTTP ports."""
        return dial.client_ssl_context(self.client_tls())


def make_ca(directory: pathlib.Path | str, name: str = "gazette-test-ca") -> CA:
    """A new self-signed CA under ``directory`` (``<name>.crt``, ``<name>.key``)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.x509.oid import NameOID

    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    key = _new_key()
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
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
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_file = directory / f"{name}.crt"
    key_file = directory / f"{name}.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key_file, key)
    return CA(directory, name, cert_file, key_file)


def make_certs(
    directory: pathlib.Path | str, hosts: Sequence[str] = LOOPBACK_NAMES, *, name: str = "ca"
) -> Certs:
    """A CA and its ``node`` and ``client`` certificates under ``directory`` (see the module)."""
    ca = make_ca(directory, name)
    node_cert, node_key = ca.issue("node", hosts)
    client_cert, client_key = ca.issue("client", hosts, server=False)
    return Certs(ca, node_cert, node_key, client_cert, client_key)


def _new_key() -> Any:
    from cryptography.hazmat.primitives.asymmetric import ec

    # P-256: what Go's and gRPC's TLS stacks all take, and fast to make.
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: pathlib.Path, key: Any) -> None:
    from cryptography.hazmat.primitives import serialization

    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
