"""Consumer process configuration: the flags and environment variables of Gazette's ``runconsumer``.

Names follow Gazette (``mainboilerplate/runconsumer/run_consumer.go``):
``--consumer.zone``, ``--consumer.limit``, ``--broker.address``,
``--etcd.address``, ``--etcd.prefix`` ... each with its environment variable;
a flag wins over the variable, which wins over the default. Ours adds
``--consumer.app``, the import path of the application (Gazette links it into
the binary), and ``--consumer.http-port`` for ``/debug/ready`` and
``/debug/metrics`` (grpcio cannot share the gRPC port with HTTP/1).

Arguments after ``--`` go to the application's ``from_args`` (see
:func:`load_application`).
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Mapping, Sequence
from typing import Any

from gazette import keyspace
from gazette.broker.server import config as broker_config
from gazette.consumer import protocol as pc
from gazette.consumer.runtime import errors

__all__ = [
    "BrokerClientConfig",
    "Config",
    "ConsumerConfig",
    "load_application",
    "parse",
]


@dataclasses.dataclass(frozen=True)
class ConsumerConfig:
    app: str = ""
    zone: str = "local"
    id: str = ""  # Empty: a random petname.
    host: str = ""  # Empty: the OS hostname.
    port: int = 0  # gRPC port; 0: a free port.
    http_port: int = 0  # /debug/ready, /debug/metrics; 0: a free port; -1: off.
    #: ``--consumer.max-connections`` (ours): connections each port serves at once.
    max_connections: int = 4096
    limit: int = 32
    max_hot_standbys: int = 3
    watch_delay_s: float = 0.030
    drain_timeout_s: float = 60.0
    #: ``--consumer.auth-keys``: verify the tokens of ``consumer.Shard`` RPCs (the
    #: first also signs this process's calls to its peers); or, ours, the same
    #: keys from ``--consumer.auth-keys-file``, reloaded when it changes.
    auth_keys: str = dataclasses.field(default="", repr=False)
    auth_keys_file: str = ""
    #: TLS, as a broker's (``--consumer.server-cert-file`` turns it on: an
    #: ``https://`` endpoint; ``server_ca_file`` requires client certificates;
    #: the peer files are our side of calls to other consumer processes).
    server_cert_file: str = ""
    server_cert_key_file: str = ""
    server_ca_file: str = ""
    peer_cert_file: str = ""
    peer_cert_key_file: str = ""
    peer_ca_file: str = ""

    @property
    def tls(self) -> bool:
        return bool(self.server_cert_file)

    @property
    def endpoint(self) -> str:
        return broker_config.endpoint_of(self.host or "localhost", self.port, tls=self.tls)


@dataclasses.dataclass(frozen=True)
class BrokerClientConfig:
    address: str = "http://localhost:8080"
    cache_size: int = 0
    #: ``--broker.auth-keys`` (sign a token per RPC) or ``--broker.auth-token``
    #: (send one), as Gazette's clients: what the brokers must be shown.
    auth_keys: str = dataclasses.field(default="", repr=False)
    auth_token: str = dataclasses.field(default="", repr=False)
    #: TLS of ``https://`` brokers: our client certificate, and their CA.
    cert_file: str = ""
    cert_key_file: str = ""
    trusted_ca_file: str = ""


@dataclasses.dataclass(frozen=True)
class Config:
    consumer: ConsumerConfig = ConsumerConfig()
    broker: BrokerClientConfig = BrokerClientConfig()
    etcd: broker_config.EtcdConfig = dataclasses.field(
        default_factory=lambda: broker_config.EtcdConfig(prefix="")
    )
    log: broker_config.LogConfig = dataclasses.field(default_factory=broker_config.LogConfig)
    #: Arguments after ``--``, for the application.
    app_args: tuple[str, ...] = ()


_D = broker_config.duration_s
_FLAGS: tuple[broker_config.Flag, ...] = (
    (
        "--consumer.app",
        "CONSUMER_APP",
        "consumer.app",
        str,
        "",
        "Import path of the application, `package.module:Name` (required); a class is"
        " instantiated (with `from_args(args after --)` if it defines it)",
    ),
    (
        "--consumer.zone",
        "CONSUMER_ZONE",
        "consumer.zone",
        str,
        "local",
        "Zone of this process: 1-32 letters, digits or -_+/.",
    ),
    (
        "--consumer.id",
        "CONSUMER_ID",
        "consumer.id",
        str,
        "",
        "Unique suffix of this process within its zone: 4-128 letters, digits or -_+/."
        " (default: a random petname)",
    ),
    (
        "--consumer.host",
        "CONSUMER_HOST",
        "consumer.host",
        str,
        "",
        "Host advertised in this process's endpoint (default: the OS hostname)",
    ),
    (
        "--consumer.port",
        "CONSUMER_PORT",
        "consumer.port",
        broker_config.parse_port,
        0,
        "gRPC port (0: any free port)",
    ),
    (
        "--consumer.http-port",
        "CONSUMER_HTTP_PORT",
        "consumer.http_port",
        broker_config.parse_port,
        0,
        "A second port of /debug/ready and /debug/metrics, which the gRPC port serves"
        " too (0: any free port, -1: off)",
    ),
    (
        "--consumer.max-connections",
        "CONSUMER_MAX_CONNECTIONS",
        "consumer.max_connections",
        int,
        4096,
        "Connections each port serves at once; more are answered 503 or UNAVAILABLE "
        "and closed. Each holds a file descriptor: keep it under the open-files limit "
        "(ulimit -n)",
    ),
    (
        "--consumer.limit",
        "CONSUMER_LIMIT",
        "consumer.limit",
        int,
        32,
        "Maximum number of shards this process is assigned",
    ),
    (
        "--consumer.max-hot-standbys",
        "CONSUMER_MAX_HOT_STANDBYS",
        "consumer.max_hot_standbys",
        int,
        3,
        "Cap on the hot standbys of every shard",
    ),
    (
        "--consumer.watch-delay",
        "CONSUMER_WATCH_DELAY",
        "consumer.watch_delay_s",
        _D,
        0.030,
        "Delay that batches etcd watch events (Go duration)",
    ),
    (
        "--consumer.drain-timeout",
        "CONSUMER_DRAIN_TIMEOUT",
        "consumer.drain_timeout_s",
        _D,
        60.0,
        "On SIGTERM, how long to wait for shards to move to other processes (Go duration)",
    ),
    (
        "--consumer.auth-keys",
        "CONSUMER_AUTH_KEYS",
        "consumer.auth_keys",
        str,
        "",
        "Whitespace or comma separated, base64-encoded keys: any verifies the 'Authorization:"
        " Bearer' token of a consumer.Shard request, the first signs this process's calls to"
        " its peers. Read once (see --consumer.auth-keys-file)"
        " (default: none, every request is allowed)",
    ),
    (
        "--consumer.auth-keys-file",
        "CONSUMER_AUTH_KEYS_FILE",
        "consumer.auth_keys_file",
        str,
        "",
        "File holding the keys of --consumer.auth-keys (e.g. a mounted Kubernetes Secret),"
        " which it excludes; re-read when it changes and on SIGHUP (default: none)",
    ),
    *(
        (
            f"--consumer.{name}",
            f"CONSUMER_{name.upper().replace('-', '_')}",
            f"consumer.{name.replace('-', '_')}",
            str,
            "",
            text,
        )
        for name, text in (
            (
                "server-cert-file",
                "PEM certificate served on the gRPC and HTTP ports. Turns TLS on (an https://"
                " endpoint); without it the other --consumer TLS flags are ignored"
                " (default: none, plaintext)",
            ),
            (
                "server-cert-key-file",
                "PEM private key of --consumer.server-cert-file (default: none)",
            ),
            (
                "server-ca-file",
                "PEM CA of client certificates: when set, every client must present one it"
                " signed (default: none, not asked for)",
            ),
            (
                "peer-cert-file",
                "PEM certificate presented to other consumer processes (default: none)",
            ),
            ("peer-cert-key-file", "PEM private key of --consumer.peer-cert-file (default: none)"),
            (
                "peer-ca-file",
                "PEM CA of other processes' server certificates (default: the root pool)",
            ),
        )
    ),
    (
        "--broker.address",
        "BROKER_ADDRESS",
        "broker.address",
        str,
        "http://localhost:8080",
        "Broker endpoint (any broker: it routes and proxies)",
    ),
    (
        "--broker.cache.size",
        "BROKER_CACHE_SIZE",
        "broker.cache_size",
        int,
        0,
        "Journal routes to cache, to dial route members directly (0: off)",
    ),
    (
        "--broker.cert-file",
        "BROKER_CERT_FILE",
        "broker.cert_file",
        str,
        "",
        "PEM client certificate presented to https:// brokers (default: none)",
    ),
    (
        "--broker.cert-key-file",
        "BROKER_CERT_KEY_FILE",
        "broker.cert_key_file",
        str,
        "",
        "PEM private key of --broker.cert-file (default: none)",
    ),
    (
        "--broker.trusted-ca-file",
        "BROKER_TRUSTED_CA_FILE",
        "broker.trusted_ca_file",
        str,
        "",
        "PEM CA of the brokers' certificates (default: the system's root pool)",
    ),
    (
        "--broker.auth-keys",
        "BROKER_AUTH_KEYS",
        "broker.auth_keys",
        str,
        "",
        "Base64 keys of the brokers: the first signs a token for each request to them."
        " Wins over --broker.auth-token (default: none)",
    ),
    (
        "--broker.auth-token",
        "BROKER_AUTH_TOKEN",
        "broker.auth_token",
        str,
        "",
        "Bearer token sent with every request to the brokers (default: none)",
    ),
    *broker_config.ETCD_CONNECTION_FLAGS,
    (
        "--etcd.prefix",
        "ETCD_PREFIX",
        "etcd.prefix",
        str,
        "",
        "Root of the application's keyspace in etcd"
        " (default: /gazette/consumers/<application class name>)",
    ),
    broker_config.ETCD_LEASE_FLAG,
    *broker_config.LOG_FLAGS,
)


def parse(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> Config:
    """Parse flags (then ``env``, then defaults) into a :class:`Config`; exits on bad input."""
    import sys

    argv = list(sys.argv[1:] if argv is None else argv)
    app_args: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, app_args = argv[:i], argv[i + 1 :]
    parser = broker_config.flag_parser(
        "python -m gazette.consumer",
        "Run a Gazette consumer application: its shards (etcd --etcd.prefix/items/) are"
        " assigned over the processes running it, each served as primary or hot standby"
        " with exactly-once transactions. Every flag may also be given by the environment"
        " variable shown. Arguments after `--` go to the application.",
        _FLAGS,
        env,
        aliases={"--consumer.http-port": "--debug.port"},
    )
    ns = vars(parser.parse_args(argv))
    sections: dict[str, dict[str, Any]] = {"consumer": {}, "broker": {}, "etcd": {}, "log": {}}
    for dest, value in ns.items():
        section, name = dest.split(".", 1)
        sections[section][name] = value
    cons = ConsumerConfig(**sections["consumer"])
    if not cons.app:
        parser.error("--consumer.app is required (e.g. stream_sum:Summer)")
    if not cons.id:
        cons = dataclasses.replace(cons, id=broker_config.petname())
    etcd = broker_config.EtcdConfig(**sections["etcd"])
    if not etcd.prefix:
        etcd = dataclasses.replace(etcd, prefix=f"/gazette/consumers/{_app_name(cons.app)}")
    if etcd.prefix.endswith("/") or not etcd.prefix.startswith("/"):
        parser.error(
            f"--etcd.prefix must be an absolute path without trailing '/': {etcd.prefix!r}"
        )
    try:
        etcd.check()  # The --etcd.* connection options (TLS files, user), as brokers check them.
    except keyspace.errors.EtcdConfigError as e:
        parser.error(str(e))
    _check_consumer_spec(parser.error, cons)
    _check_auth(parser.error, cons, sections["broker"])
    _check_tls(parser.error, cons, sections["broker"])
    return Config(
        consumer=cons,
        broker=BrokerClientConfig(**sections["broker"]),
        etcd=etcd,
        log=broker_config.LogConfig(**sections["log"]),
        app_args=tuple(app_args),
    )


def _check_auth(fail: Any, cons: ConsumerConfig, broker: Mapping[str, Any]) -> None:
    from gazette.broker import protocol as pb
    from gazette.broker.protocol import auth

    try:
        broker_config.check_auth_keys(cons.auth_keys, cons.auth_keys_file, "--consumer")
    except SystemExit as e:
        fail(str(e))
    if broker["auth_keys"]:
        try:
            auth.parse_keys(broker["auth_keys"])
        except pb.AuthorizationError as e:
            fail(f"--broker.auth-keys: {e}")


def _check_tls(fail: Any, cons: ConsumerConfig, broker: Mapping[str, Any]) -> None:
    from gazette.broker import protocol as pb
    from gazette.broker.protocol import dial

    try:
        broker_config.check_tls(cons, "--consumer")
    except SystemExit as e:
        fail(str(e))
    try:
        dial.TLS(broker["cert_file"], broker["cert_key_file"], broker["trusted_ca_file"]).pem()
    except pb.TLSConfigError as e:
        fail(f"--broker.cert-file/--broker.cert-key-file/--broker.trusted-ca-file: {e}")


def _app_name(path: str) -> str:
    return path.rpartition(":")[2] or path.rpartition(".")[2]


#: Fields of the ConsumerSpec a validation error names → the flag that set them.
_SPEC_FLAGS = (
    ("Id.Suffix", "--consumer.id"),
    ("Id.Zone", "--consumer.zone"),
    ("Endpoint", "--consumer.host"),
)


def _check_consumer_spec(fail: Any, cons: ConsumerConfig) -> None:
    spec = pc.ConsumerSpec(shard_limit=max(0, cons.limit))
    spec.process_spec.id.zone = cons.zone
    spec.process_spec.id.suffix = cons.id
    spec.process_spec.endpoint = broker_config.endpoint_of(cons.host or "localhost", 1)
    try:
        pc.validate(spec)
    except Exception as e:  # noqa: BLE001 - reported as a usage error naming the flag.
        text = str(e)
        flag = next(
            (f for field, f in _SPEC_FLAGS if field in text),
            "--consumer.zone/--consumer.id/--consumer.host",
        )
        fail(f"{flag}: {text}")
    if cons.limit < 0:
        fail(f"--consumer.limit must be >= 0 (got {cons.limit})")
    if cons.max_connections < 1:
        fail(f"--consumer.max-connections must be at least 1: {cons.max_connections}")


def load_application(path: str, args: Sequence[str] = ()) -> Any:
    """The application at ``path`` (``package.module:Name``).

    A class is instantiated: ``Name.from_args(args)`` if it defines it, else
    ``Name()``. Any other object is used as it is.
    """
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise errors.ConfigError(f"--consumer.app {path!r}: expected `package.module:Name`")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise errors.ConfigError(
            f"--consumer.app {path!r}: cannot import {module_name}: {e}"
        ) from e
    obj = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise errors.ConfigError(
                f"--consumer.app {path!r}: {module_name} has no attribute {attr!r}"
            ) from None
    if isinstance(obj, type):
        factory = getattr(obj, "from_args", None)
        app = factory(list(args)) if factory is not None else obj()
    else:
        app = obj
    for required in ("new_store", "new_message", "consume_message", "finalize_txn"):
        if not callable(getattr(app, required, None)):
            raise errors.ConfigError(f"--consumer.app {path!r}: the application lacks {required}()")
    return app
