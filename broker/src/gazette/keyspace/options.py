"""How a Gazette process reaches etcd: the ``--etcd.*`` connection options and their flags.

Brokers, consumers and the operator take the same options, defined once here
(:data:`FLAGS`) and parsed into one frozen :class:`EtcdConfig`:

- ``--etcd.address``: Gazette's endpoint URL. ``http://`` dials in the clear,
  ``https://`` with TLS, ``unix:///path`` over a Unix socket. Ours also takes a
  comma-separated list of members, tried in turn when one is down (Gazette
  takes one address and learns the members from it).
- ``--etcd.cert-file``, ``--etcd.cert-key-file``, ``--etcd.trusted-ca-file``
  (Gazette's ``mainboilerplate/etcd.go``): with ``https://``, the client
  certificate presented to etcd and the CA that signed etcd's certificate.
- ``--etcd.username`` with ``--etcd.password`` or ``--etcd.password-file``
  (ours; Gazette has none): etcd's own users (``etcdctl auth enable``). The
  file is read at each (re-)authentication, so a mounted Kubernetes Secret can
  change under a running process.

:meth:`EtcdConfig.check` refuses unusable combinations up front with an
:class:`~gazette.keyspace.errors.EtcdConfigError` naming the flag.
"""

from __future__ import annotations

import dataclasses
import os
import urllib.parse
from collections.abc import Mapping

from gazette.keyspace import errors

__all__ = [
    "DEFAULT_ADDRESS",
    "FLAGS",
    "SECRET_FLAGS",
    "Endpoint",
    "EtcdConfig",
    "from_values",
    "parse_endpoints",
]

#: Gazette's default ``--etcd.address``.
DEFAULT_ADDRESS = "http://localhost:2379"
_DEFAULT_PORT = 2379


@dataclasses.dataclass(frozen=True, slots=True)
class Endpoint:
    """One etcd member as gRPC dials it.

    ``url`` is as given; ``target`` the gRPC target (``host:port`` or
    ``unix:///path``); ``tls`` whether it is dialed with TLS (``https://``).
    """

    url: str
    target: str
    tls: bool


@dataclasses.dataclass(frozen=True, slots=True)
class EtcdConfig:
    """The etcd connection options every Gazette process shares (see the module docstring).

    Empty strings mean "not given". ``password`` is kept out of reprs (configs are
    logged). Fields map to flags and environment variables as :data:`FLAGS` says.
    """

    address: str = DEFAULT_ADDRESS
    cert_file: str = ""
    cert_key_file: str = ""
    trusted_ca_file: str = ""
    username: str = ""
    password: str = dataclasses.field(default="", repr=False)
    password_file: str = ""

    @property
    def endpoints(self) -> tuple[Endpoint, ...]:
        """The members of ``address``, in order (raises EtcdConfigError if it is unusable)."""
        return parse_endpoints(self.address)

    @property
    def tls(self) -> bool:
        """Whether etcd is dialed with TLS (every endpoint is ``https://``)."""
        return self.endpoints[0].tls

    def check(self) -> None:
        """Refuse options that can't work, naming the flag: bad or mixed endpoints, a
        certificate without its key (or the reverse), a file that can't be read, a
        password without a user, both a password and a password file."""
        endpoints = self.endpoints
        tls = endpoints[0].tls
        if bool(self.cert_file) != bool(self.cert_key_file):
            given, missing = (
                ("--etcd.cert-file", "--etcd.cert-key-file")
                if self.cert_file
                else ("--etcd.cert-key-file", "--etcd.cert-file")
            )
            raise errors.EtcdConfigError(given, f"needs {missing} too (a certificate and its key)")
        tls_files = (
            ("--etcd.cert-file", self.cert_file),
            ("--etcd.cert-key-file", self.cert_key_file),
            ("--etcd.trusted-ca-file", self.trusted_ca_file),
        )
        for flag, path in tls_files:
            if not path:
                continue
            if not tls:
                raise errors.EtcdConfigError(
                    flag, f"is for https:// etcd endpoints (--etcd.address is {self.address!r})"
                )
            _check_readable(flag, path)
        if (self.password or self.password_file) and not self.username:
            flag = "--etcd.password" if self.password else "--etcd.password-file"
            raise errors.EtcdConfigError(flag, "needs --etcd.username")
        if self.password and self.password_file:
            raise errors.EtcdConfigError(
                "--etcd.password", "give either it or --etcd.password-file, not both"
            )
        if self.password_file:
            _check_readable("--etcd.password-file", self.password_file)

    def read_password(self) -> str:
        """The password: ``password``, else the first line of ``password_file`` (read now)."""
        if not self.password_file:
            return self.password
        try:
            with open(self.password_file, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise errors.EtcdConfigError(
                "--etcd.password-file", f"cannot read {self.password_file}: {_why(e)}"
            ) from e
        # A Secret written with `echo` ends in a newline, which is not part of the password.
        return text.splitlines()[0] if text else ""

    def read_file(self, flag: str, path: str) -> bytes:
        """The bytes of the PEM file ``path`` given by ``flag`` (errors name both)."""
        try:
            with open(path, "rb") as f:
                return f.read()
        except OSError as e:
            raise errors.EtcdConfigError(flag, f"cannot read {path}: {_why(e)}") from e


def _why(e: BaseException) -> str:
    return e.strerror if isinstance(e, OSError) and e.strerror else str(e)


def _check_readable(flag: str, path: str) -> None:
    if not os.path.exists(path):
        raise errors.EtcdConfigError(flag, f"no such file: {path}")
    if os.path.isdir(path) or not os.access(path, os.R_OK):
        raise errors.EtcdConfigError(flag, f"cannot read {path}")


def _endpoint(url: str) -> Endpoint:
    text = url if "://" in url else f"http://{url}"
    try:
        parsed = urllib.parse.urlsplit(text)
        port = parsed.port
    except ValueError as e:
        raise errors.EtcdConfigError("--etcd.address", f"invalid endpoint {url!r}: {e}") from e
    if parsed.scheme == "unix":
        # Gazette drops the host of unix:// URLs: unix://host/path is the socket /path.
        if not parsed.path:
            raise errors.EtcdConfigError("--etcd.address", f"{url!r} names no socket path")
        return Endpoint(url, f"unix://{parsed.path}", tls=False)
    if parsed.scheme not in ("http", "https"):
        raise errors.EtcdConfigError(
            "--etcd.address",
            f"unsupported scheme in {url!r} (expected http://, https:// or unix://)",
        )
    if not parsed.hostname:
        raise errors.EtcdConfigError("--etcd.address", f"endpoint {url!r} has no host")
    host = parsed.hostname
    if ":" in host:
        host = f"[{host}]"  # An IPv6 literal, bracketed again for the gRPC target.
    return Endpoint(url, f"{host}:{port or _DEFAULT_PORT}", tls=parsed.scheme == "https")


def parse_endpoints(address: str) -> tuple[Endpoint, ...]:
    """The endpoints of a comma-separated ``--etcd.address``.

    They must agree on TLS: a client has one set of TLS options, and a list
    that mixes them is more likely a mistake than a plan.
    """
    urls = [u.strip() for u in address.split(",") if u.strip()]
    if not urls:
        raise errors.EtcdConfigError("--etcd.address", "no etcd endpoint given")
    endpoints = tuple(_endpoint(u) for u in urls)
    if len({e.tls for e in endpoints}) > 1:
        raise errors.EtcdConfigError(
            "--etcd.address",
            f"mixes https:// and plaintext endpoints ({address!r}): give all one or the other",
        )
    return endpoints


#: (flag, environment variable, :class:`EtcdConfig` field, help). Every default is
#: the field's; help texts state the defaults that are empty.
FLAGS: tuple[tuple[str, str, str, str], ...] = (
    (
        "--etcd.address",
        "ETCD_ADDRESS",
        "address",
        "etcd endpoint: http://, https:// (TLS) or unix:///path; several, comma-separated, "
        "are members tried in turn when one is down",
    ),
    (
        "--etcd.cert-file",
        "ETCD_CERT_FILE",
        "cert_file",
        "PEM client certificate presented to an https:// etcd (with --etcd.cert-key-file) "
        "(default: none)",
    ),
    (
        "--etcd.cert-key-file",
        "ETCD_CERT_KEY_FILE",
        "cert_key_file",
        "PEM private key of --etcd.cert-file (default: none)",
    ),
    (
        "--etcd.trusted-ca-file",
        "ETCD_TRUSTED_CA_FILE",
        "trusted_ca_file",
        "PEM CA certificate(s) that sign an https:// etcd's server certificate "
        "(default: the system's roots)",
    ),
    (
        "--etcd.username",
        "ETCD_USERNAME",
        "username",
        "etcd user to authenticate as, when etcd auth is enabled (default: none)",
    ),
    (
        "--etcd.password",
        "ETCD_PASSWORD",
        "password",
        "Password of --etcd.username (default: none)",
    ),
    (
        "--etcd.password-file",
        "ETCD_PASSWORD_FILE",
        "password_file",
        "File holding the password of --etcd.username (e.g. a mounted Kubernetes Secret), "
        "read at each authentication (default: none)",
    ),
)

#: Flags whose values are secrets: help texts never show them.
SECRET_FLAGS = frozenset({"--etcd.password"})


def from_values(values: Mapping[str, object]) -> EtcdConfig:
    """An :class:`EtcdConfig` of parsed flag values keyed by field name, checked.

    Keys that are not fields are ignored, so a parser may hand over a whole section.
    Raises :class:`~gazette.keyspace.errors.EtcdConfigError`.
    """
    names = {f.name for f in dataclasses.fields(EtcdConfig)}
    cfg = EtcdConfig(**{k: str(v) for k, v in values.items() if k in names and v is not None})
    cfg.check()
    return cfg
