"""Broker configuration: flags and environment variables of Gazette's ``gazette serve``.

Every flag has an environment variable (Gazette's names); a flag given on the
command line wins over the variable, which wins over the default. The parsed
result is a tree of frozen dataclasses, one per subsystem::

    cfg = config.parse(["--broker.zone", "us-east-1a", "--etcd.address", "http://127.0.0.1:2379"])
    cfg.broker.zone, cfg.etcd.prefix

Differences to Gazette: besides the broker's port, which serves gRPC, the journal
HTTP gateway and the diagnostics (``/debug/ready``, ``/debug/metrics``) as
Gazette's does, they are served on ``--broker.http-port`` too (``--debug.port``
is accepted as its Gazette alias). ``--help`` states each flag's default once.

Parsing also validates the BrokerSpec the flags describe (``--broker.zone``,
``--broker.id``, the endpoint of ``--broker.host`` and ``--broker.port``,
``--broker.limit``) with the protocol's rules, and exits with one line naming
the flag and the rule: see :func:`check_broker_spec`.
"""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import json
import os
import random
import re
import socket
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from gazette import keyspace

_ADJECTIVES = (
    "amber",
    "brisk",
    "calm",
    "dusty",
    "eager",
    "fuzzy",
    "gentle",
    "hazy",
    "icy",
    "jolly",
    "keen",
    "lucid",
    "mellow",
    "nimble",
    "odd",
    "plucky",
    "quiet",
    "rapid",
)
_NOUNS = (
    "otter",
    "falcon",
    "badger",
    "heron",
    "lynx",
    "marmot",
    "newt",
    "osprey",
    "panda",
    "quail",
    "raven",
    "stoat",
    "tapir",
    "urchin",
    "vole",
    "walrus",
    "yak",
    "zebra",
)


def petname(rng: random.Random | None = None) -> str:
    """A random two-word broker suffix, as Gazette's default ``--broker.id``."""
    rng = rng or random.Random()
    return f"{rng.choice(_ADJECTIVES)}-{rng.choice(_NOUNS)}"


@dataclasses.dataclass(frozen=True)
class BrokerConfig:
    zone: str = "local"
    id: str = ""  # Empty: a random petname is chosen at start.
    host: str = ""  # Empty: the OS hostname.
    port: int = 0  # 0: a free port.
    http_port: int = 0  # Diagnostics port; 0: a free port; -1: disabled.
    limit: int = 1024
    file_root: str = ""
    file_only: bool = False
    spool_dir: str = ""  # Empty: the system temporary directory.
    #: ``--broker.spool-write-timeout`` (ours): how long a spool file write (or
    #: creation) may take before its append fails; Gazette waits forever.
    spool_write_timeout_s: float = 10.0
    #: ``--broker.spool-sync`` (ours): fdatasync spool files as appends are confirmed.
    spool_sync: bool = False
    #: ``--broker.isolation-timeout`` (ours): cut off from every peer this long while
    #: etcd answers, the broker gives its journals up (0: never; Gazette never does).
    isolation_timeout_s: float = 3.0
    max_append_rate: int = 0
    min_append_rate: int = 1 << 16
    max_replication: int = 9
    max_grpc_recv_size: int = 4 << 20
    #: ``--broker.max-connections`` (ours): connections each port serves at once.
    max_connections: int = 4096
    watch_delay_s: float = 0.030
    auto_suspend: bool = False
    drain_timeout_s: float = 60.0
    #: ``--broker.replica-persist-delay`` (ours): how long a replica's copy of a
    #: completed fragment waits before the replica stores it too (see the persister).
    replica_persist_delay_s: float = 2.0
    #: ``--broker.resume-head-gaps`` (ours): resume a journal whose persisted fragments
    #: end beyond every spool of its route at that end, after a lease, on its own.
    resume_head_gaps: bool = True
    http_body_timeout_s: float = 30.0
    #: ``--broker.auth-keys``: base64 HMAC keys, the first signs (see
    #: ``gazette.broker.protocol.auth``); empty: no authorization. Kept out of reprs.
    auth_keys: str = dataclasses.field(default="", repr=False)
    #: ``--broker.auth-keys-file`` (ours): the same keys read from a file, reloaded
    #: when it changes and on SIGHUP (``gazette.broker.server.keyreload``).
    auth_keys_file: str = ""
    #: ``--broker.debug-token-required`` (ours): ``/debug/`` routes other than
    #: ``/debug/ready`` need a token of the broker's keys with LIST over every journal.
    debug_token_required: bool = False
    #: TLS (Gazette's ``--broker.server-cert-file`` etc.): a server certificate
    #: turns it on (the endpoint is then ``https://``), and without one the other
    #: five are ignored. ``server_ca_file`` makes client certificates required;
    #: the peer files are this broker's side of its calls to other brokers.
    server_cert_file: str = ""
    server_cert_key_file: str = ""
    server_ca_file: str = ""
    peer_cert_file: str = ""
    peer_cert_key_file: str = ""
    peer_ca_file: str = ""

    @property
    def tls(self) -> bool:
        """Whether the broker serves TLS (``--broker.server-cert-file`` is set)."""
        return bool(self.server_cert_file)

    @property
    def endpoint(self) -> str:
        """The advertised gRPC endpoint (requires a resolved, non-zero port).

        An IPv6 literal host is bracketed, as the broker's process does.
        """
        return endpoint_of(self.host or socket.gethostname(), self.port, tls=self.tls)


def endpoint_of(host: str, port: int, *, tls: bool = False) -> str:
    """``http://host:port`` (``https://`` with ``tls``), with an IPv6 literal ``host`` bracketed."""
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{'https' if tls else 'http'}://{host}:{port}"


@dataclasses.dataclass(frozen=True)
class EtcdConfig(keyspace.EtcdConfig):
    """``--etcd.*``: the connection every Gazette process configures alike
    (:class:`gazette.keyspace.EtcdConfig`: address, TLS files, etcd user), plus
    this process's keyspace root and member lease."""

    prefix: str = "/gazette/cluster"
    lease_s: float = 20.0


@dataclasses.dataclass(frozen=True)
class LogConfig:
    level: str = "warn"
    format: str = "text"


@dataclasses.dataclass(frozen=True)
class Config:
    broker: BrokerConfig = BrokerConfig()
    etcd: EtcdConfig = EtcdConfig()
    log: LogConfig = LogConfig()


def duration_s(text: str) -> float:
    """Parse a Go-style duration (``20s``, ``30ms``, ``1m30s``) or bare seconds."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    units = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
    total, num = 0.0, ""
    i = 0
    while i < len(text):
        c = text[i]
        if c.isdigit() or c == ".":
            num += c
            i += 1
            continue
        unit = next(
            (u for u in ("ns", "us", "µs", "ms", "s", "m", "h") if text.startswith(u, i)), None
        )
        if unit is None or not num:
            raise argparse.ArgumentTypeError(f"invalid duration {text!r}")
        total += float(num) * units[unit]
        num = ""
        i += len(unit)
    if num:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r} (missing unit)")
    return total


def parse_bool(text: str) -> bool:
    if text.lower() in ("1", "t", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "f", "false", "no", "off", ""):
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean {text!r}")


def parse_port(text: str) -> int:
    value = int(text)
    if not -1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"invalid port {text!r}")
    return value


Flag = tuple[str, str, str, Callable[[str], Any], object, str]
"""(flag, environment variable, dest ``section.name``, type, default, help)."""

#: Flags every Gazette process takes alike (brokers, consumers): the etcd
#: connection flags of ``gazette.keyspace.options.FLAGS`` (the operator's too).
ETCD_CONNECTION_FLAGS: tuple[Flag, ...] = tuple(
    (flag, var, f"etcd.{name}", str, getattr(keyspace.EtcdConfig(), name), text)
    for flag, var, name, text in keyspace.options.FLAGS
)
ETCD_ADDRESS_FLAG: Flag = ETCD_CONNECTION_FLAGS[0]
ETCD_LEASE_FLAG: Flag = (
    "--etcd.lease",
    "ETCD_LEASE_TTL",
    "etcd.lease_s",
    duration_s,
    20.0,
    "TTL of this process's etcd lease (Go duration)",
)
LOG_FLAGS: tuple[Flag, ...] = (
    (
        "--log.level",
        "LOG_LEVEL",
        "log.level",
        str,
        "warn",
        "trace, debug, info, warn, error or fatal",
    ),
    ("--log.format", "LOG_FORMAT", "log.format", str, "text", "text or json"),
)

_FLAGS: tuple[Flag, ...] = (
    (
        "--broker.zone",
        "BROKER_ZONE",
        "broker.zone",
        str,
        "local",
        "Availability zone of this broker: 1-32 letters, digits or -_+/.",
    ),
    (
        "--broker.id",
        "BROKER_ID",
        "broker.id",
        str,
        "",
        "Unique suffix of this broker within its zone: 4-128 letters, digits or -_+/."
        " (default: a random petname)",
    ),
    (
        "--broker.host",
        "BROKER_HOST",
        "broker.host",
        str,
        "",
        "Host advertised in this broker's endpoint (default: the OS hostname)",
    ),
    (
        "--broker.port",
        "BROKER_PORT",
        "broker.port",
        parse_port,
        0,
        "Port of gRPC, the journal HTTP gateway and /debug/ (0: any free port)",
    ),
    (
        "--broker.http-port",
        "BROKER_HTTP_PORT",
        "broker.http_port",
        parse_port,
        0,
        "A second port of the journal HTTP gateway, /debug/ready and /debug/metrics "
        "(0: any free port, -1: off). A PUT to a missing journal answers 500, as "
        "Gazette's gateway does (a GET answers 404). Alias: --debug.port",
    ),
    (
        "--broker.limit",
        "BROKER_LIMIT",
        "broker.limit",
        int,
        1024,
        "Maximum number of journals this broker is assigned",
    ),
    (
        "--broker.file-root",
        "BROKER_FILE_ROOT",
        "broker.file_root",
        str,
        "",
        "Local directory under which file:// stores live (default: none)",
    ),
    (
        "--broker.file-only",
        "BROKER_FILE_ONLY",
        "broker.file_only",
        parse_bool,
        False,
        "Serve every store URL from --broker.file-root",
    ),
    (
        "--broker.spool-dir",
        "BROKER_SPOOL_DIR",
        "broker.spool_dir",
        str,
        "",
        "Directory of spool files, created if missing. Spools there survive a crash: the "
        "broker stores what it finds there (the confirmed part) before it announces itself "
        "again, so keep it on a disk that outlives the process (default: anonymous files in "
        "the system temporary directory, which do not)",
    ),
    (
        "--broker.spool-write-timeout",
        "BROKER_SPOOL_WRITE_TIMEOUT",
        "broker.spool_write_timeout_s",
        duration_s,
        10.0,
        "How long a write to a spool file may take before its append fails (with UNAVAILABLE); "
        "while one write stays stuck longer, further appends fail at once, so a stalled disk "
        "fails its journals' appends rather than hanging them (Go duration)",
    ),
    (
        "--broker.spool-sync",
        "BROKER_SPOOL_SYNC",
        "broker.spool_sync",
        parse_bool,
        False,
        "Flush spool files to the device (fdatasync) before acknowledging each append, so "
        "that a broker restarted on its --broker.spool-dir after a power loss (not only a "
        "crash) finds everything it acknowledged; costs a device flush per append",
    ),
    (
        "--broker.isolation-timeout",
        "BROKER_ISOLATION_TIMEOUT",
        "broker.isolation_timeout_s",
        duration_s,
        3.0,
        "When no other broker has answered this broker's probes for this long (it asks a few "
        "of them every second, and at least two exist), although they did before, it gives "
        "up its lease and takes no journals until one answers again: etcd then hands its "
        "journals to brokers that can replicate them, rather than them waiting for the "
        "network to heal. 0 never gives up, as Gazette (Go duration)",
    ),
    (
        "--broker.max-append-rate",
        "BROKER_MAX_APPEND_RATE",
        "broker.max_append_rate",
        int,
        0,
        "Cap on a journal's append rate, bytes/s (0: none)",
    ),
    (
        "--broker.min-append-rate",
        "BROKER_MIN_APPEND_RATE",
        "broker.min_append_rate",
        int,
        1 << 16,
        "Appends slower than this many bytes/s are aborted",
    ),
    (
        "--broker.max-replication",
        "BROKER_MAX_REPLICATION",
        "broker.max_replication",
        int,
        9,
        "Cap on the effective replication of every journal",
    ),
    (
        "--broker.max-grpc-recv-size",
        "BROKER_MAX_GRPC_RECV_SIZE",
        "broker.max_grpc_recv_size",
        int,
        4 << 20,
        "Largest inbound gRPC message, bytes: larger Append and Apply requests "
        "are refused with RESOURCE_EXHAUSTED",
    ),
    (
        "--broker.max-connections",
        "BROKER_MAX_CONNECTIONS",
        "broker.max_connections",
        int,
        4096,
        "Connections each port serves at once; more are answered 503 or UNAVAILABLE "
        "and closed. Each holds a file descriptor: keep it under the open-files limit "
        "(ulimit -n)",
    ),
    (
        "--broker.watch-delay",
        "BROKER_WATCH_DELAY",
        "broker.watch_delay_s",
        duration_s,
        0.030,
        "Delay that batches etcd watch events (Go duration)",
    ),
    (
        "--broker.auto-suspend",
        "BROKER_AUTO_SUSPEND",
        "broker.auto_suspend",
        parse_bool,
        False,
        "Suspend journals idle for 15 pulses",
    ),
    (
        "--broker.auth-keys",
        "BROKER_AUTH_KEYS",
        "broker.auth_keys",
        str,
        "",
        "Whitespace or comma separated, base64-encoded keys: the first signs the tokens "
        "of this broker's calls to its peers, any verifies a request's 'Authorization: "
        "Bearer' token. The key AA== lets requests without a token through (for rollouts). "
        "Read once: changing them takes a restart (see --broker.auth-keys-file) "
        "(default: none, every request is allowed)",
    ),
    (
        "--broker.auth-keys-file",
        "BROKER_AUTH_KEYS_FILE",
        "broker.auth_keys_file",
        str,
        "",
        "File holding the keys of --broker.auth-keys (e.g. a mounted Kubernetes Secret), "
        "which it excludes. Re-read when it changes (checked every 2s) and on SIGHUP: tokens "
        "of a retired key are refused from then on; a file without valid keys is logged "
        "and the keys in force are kept (default: none)",
    ),
    (
        "--broker.debug-token-required",
        "BROKER_DEBUG_TOKEN_REQUIRED",
        "broker.debug_token_required",
        parse_bool,
        False,
        "Serve /debug/metrics (journal names, store URLs) only to requests bearing a token "
        "of the auth keys with the LIST capability over every journal (an empty selector), "
        "as Prometheus sends with its 'authorization' settings; /debug/ready stays open "
        "for probes. Needs --broker.auth-keys or --broker.auth-keys-file",
    ),
    (
        "--broker.server-cert-file",
        "BROKER_SERVER_CERT_FILE",
        "broker.server_cert_file",
        str,
        "",
        "PEM certificate this broker serves. Turns TLS on (an https:// endpoint, on the "
        "gRPC and the HTTP port alike); without it the other TLS flags are ignored "
        "(default: none, plaintext)",
    ),
    (
        "--broker.server-cert-key-file",
        "BROKER_SERVER_CERT_KEY_FILE",
        "broker.server_cert_key_file",
        str,
        "",
        "PEM private key of --broker.server-cert-file (default: none)",
    ),
    (
        "--broker.server-ca-file",
        "BROKER_SERVER_CA_FILE",
        "broker.server_ca_file",
        str,
        "",
        "PEM CA of client certificates: when set, every client (peers and the HTTP "
        "gateway's too) must present a certificate it signed (default: none, client "
        "certificates are not asked for)",
    ),
    (
        "--broker.peer-cert-file",
        "BROKER_PEER_CERT_FILE",
        "broker.peer_cert_file",
        str,
        "",
        "PEM certificate this broker presents to its peers (default: none)",
    ),
    (
        "--broker.peer-cert-key-file",
        "BROKER_PEER_CERT_KEY_FILE",
        "broker.peer_cert_key_file",
        str,
        "",
        "PEM private key of --broker.peer-cert-file (default: none)",
    ),
    (
        "--broker.peer-ca-file",
        "BROKER_PEER_CA_FILE",
        "broker.peer_ca_file",
        str,
        "",
        "PEM CA of the peers' server certificates (default: the system's root pool)",
    ),
    (
        "--broker.http-body-timeout",
        "BROKER_HTTP_BODY_TIMEOUT",
        "broker.http_body_timeout_s",
        duration_s,
        30.0,
        "How long an HTTP request body may send nothing before it is answered 408 (Go duration)",
    ),
    (
        "--broker.drain-timeout",
        "BROKER_DRAIN_TIMEOUT",
        "broker.drain_timeout_s",
        duration_s,
        60.0,
        "On SIGTERM, how long to wait for the journals to move to other brokers "
        "before stopping anyway; every spool is persisted either way (Go duration)",
    ),
    (
        "--broker.replica-persist-delay",
        "BROKER_REPLICA_PERSIST_DELAY",
        "broker.replica_persist_delay_s",
        duration_s,
        2.0,
        "How long a replica waits before storing its copy of a completed fragment, which the "
        "primary stores at once; longer saves duplicate uploads but widens the window in which "
        "losing the primary and then this replica loses the fragment (Go duration)",
    ),
    (
        "--broker.resume-head-gaps",
        "BROKER_RESUME_HEAD_GAPS",
        "broker.resume_head_gaps",
        parse_bool,
        True,
        "When every broker that held a journal's unpersisted tail is gone (its persisted "
        "fragments end beyond what its brokers hold), resume it on its own, a lease + 2s "
        "later and after a fresh store listing (brokers restarted on their "
        "--broker.spool-dir store what they held before they announce themselves), past its "
        "persisted fragments and past its acknowledgement fence in etcd (how far its "
        "primaries may have acknowledged appends; under /gazette-fences<etcd prefix>/): "
        "appends acknowledged but lost with their brokers' disks leave a gap, and no offset "
        "is handed out twice (a journal with no fence goes on at its persisted end: in a "
        "cluster mixing Gazette's brokers, which keep none, turn this off). Off: every such journal refuses appends with INDEX_HAS_GREATER_OFFSET, as "
        "Gazette's do, until `gazctl journals reset-head`",
    ),
    *ETCD_CONNECTION_FLAGS,
    (
        "--etcd.prefix",
        "ETCD_PREFIX",
        "etcd.prefix",
        str,
        "/gazette/cluster",
        "Root of the keyspace in etcd",
    ),
    ETCD_LEASE_FLAG,
    *LOG_FLAGS,
)


_STATED_DEFAULT = re.compile(r" ?\(default: [^)]*\)")


def _show(value: object, typ: Callable[[str], Any]) -> str:
    """A default as one would type it on the command line."""
    if isinstance(value, bool):
        return str(value).lower()
    if typ is duration_s and isinstance(value, float):
        return f"{value * 1000:g}ms" if value < 1 else f"{value:g}s"
    return str(value)


#: Flags whose values are secrets: ``--help`` never shows them.
SECRET_FLAGS = frozenset(
    {
        "--broker.auth-keys",
        "--broker.auth-token",
        "--consumer.auth-keys",
        *keyspace.options.SECRET_FLAGS,
    }
)


def _help(
    text: str,
    var: str,
    default: object,
    typ: Callable[[str], Any],
    env: Mapping[str, str],
    secret: bool = False,
) -> str:
    """A flag's help: its text, its variable and its default, said once."""
    if secret and var in env:
        return f"{_STATED_DEFAULT.sub('', text)} [${var}] (set by ${var})"
    if var in env:  # The variable sets the default.
        value = typ(env[var])
        return (
            f"{_STATED_DEFAULT.sub('', text)} [${var}] (default: {_show(value, typ)}, from ${var})"
        )
    if _STATED_DEFAULT.search(text):  # The text says what the default means.
        return f"{text} [${var}]"
    return f"{text} [${var}] (default: {_show(default, typ)})"


def flag_parser(
    prog: str,
    description: str,
    flags: Sequence[Flag],
    env: Mapping[str, str] | None = None,
    aliases: Mapping[str, str] | None = None,
) -> argparse.ArgumentParser:
    """An argparse parser of ``flags``, grouped by section, each with its variable.

    The broker's and the consumer's flags are built alike: a variable in
    ``env`` sets the default, a flag wins over it, and ``--help`` says the
    variable and the default once.
    """
    env = os.environ if env is None else env
    aliases = aliases or {}
    parser = argparse.ArgumentParser(prog=prog, description=description)
    groups: dict[str, argparse._ArgumentGroup] = {}
    for flag, var, dest, typ, default, text in flags:
        section = dest.split(".")[0]
        group = groups.setdefault(section, parser.add_argument_group(section))
        names = [flag]
        if flag in aliases:
            names.append(aliases[flag])
        value = default
        if var in env:
            value = typ(env[var])
        # A boolean alone switches it on, as Gazette's (go-flags) do; `=false` still works.
        switch: dict[str, Any] = {"nargs": "?", "const": True} if typ is parse_bool else {}
        group.add_argument(
            *names,
            dest=dest,
            type=typ,
            default=value,
            metavar=var,
            help=_help(text, var, default, typ, env, secret=flag in SECRET_FLAGS),
            **switch,
        )
    return parser


def build_parser(env: Mapping[str, str] | None = None) -> argparse.ArgumentParser:
    return flag_parser(
        "python -m gazette.broker",
        "Serve a Gazette broker: the protocol.Journal gRPC service, the journal HTTP "
        "gateway and /debug/ready and /debug/metrics on --broker.port (and the "
        "gateway on --broker.http-port too), announced in etcd under --etcd.prefix. "
        "Every flag may also be given by the environment "
        "variable shown.",
        _FLAGS,
        env,
        aliases={"--broker.http-port": "--debug.port"},
    )


def parse(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> Config:
    """Parse flags (falling back to ``env``, then defaults) into a :class:`Config`."""
    ns = vars(build_parser(env).parse_args(argv))
    sections: dict[str, dict[str, object]] = {"broker": {}, "etcd": {}, "log": {}}
    for dest, value in ns.items():
        section, name = dest.split(".", 1)
        sections[section][name] = value
    cfg = Config(
        broker=BrokerConfig(**sections["broker"]),  # type: ignore[arg-type]
        etcd=EtcdConfig(**sections["etcd"]),  # type: ignore[arg-type]
        log=LogConfig(**sections["log"]),  # type: ignore[arg-type]
    )
    if not cfg.broker.id:
        cfg = dataclasses.replace(cfg, broker=dataclasses.replace(cfg.broker, id=petname()))
    if cfg.etcd.prefix.endswith("/") or not cfg.etcd.prefix.startswith("/"):
        raise SystemExit(
            f"--etcd.prefix must be an absolute path without trailing '/': {cfg.etcd.prefix!r}"
        )
    if not cfg.broker.spool_write_timeout_s > 0:
        raise SystemExit(
            f"--broker.spool-write-timeout must be positive: {cfg.broker.spool_write_timeout_s:g}s"
        )
    if cfg.broker.isolation_timeout_s < 0:
        raise SystemExit(
            "--broker.isolation-timeout must be 0 (never) or positive: "
            f"{cfg.broker.isolation_timeout_s:g}s"
        )
    check_broker_spec(cfg.broker)
    check_etcd(cfg.etcd)
    if cfg.broker.max_connections < 1:
        raise SystemExit(
            f"--broker.max-connections must be at least 1: {cfg.broker.max_connections}"
        )
    check_auth_keys(cfg.broker.auth_keys, cfg.broker.auth_keys_file)
    if cfg.broker.debug_token_required and not (cfg.broker.auth_keys or cfg.broker.auth_keys_file):
        raise SystemExit(
            "--broker.debug-token-required needs --broker.auth-keys or --broker.auth-keys-file:"
            " without keys no token can be checked"
        )
    check_tls(cfg.broker)
    return cfg


def check_etcd(etcd: keyspace.EtcdConfig) -> None:
    """Exit with one line naming the ``--etcd.*`` flag whose value can't work."""
    try:
        etcd.check()
    except keyspace.errors.EtcdConfigError as e:
        raise SystemExit(str(e)) from None


class _TLSFiles(Protocol):
    @property
    def server_cert_file(self) -> str: ...
    @property
    def server_cert_key_file(self) -> str: ...
    @property
    def server_ca_file(self) -> str: ...
    @property
    def peer_cert_file(self) -> str: ...
    @property
    def peer_cert_key_file(self) -> str: ...
    @property
    def peer_ca_file(self) -> str: ...


def check_tls(c: _TLSFiles, prefix: str = "--broker") -> None:
    """Exit with one line naming the flag if a TLS file of ``c`` doesn't load.

    Nothing is checked without a server certificate: the flags are then ignored.
    ``prefix`` is ``--consumer`` for a consumer's flags (the same six).
    """
    if not c.server_cert_file:
        return
    from gazette.broker import protocol as pb
    from gazette.broker.protocol import dial

    for side in ("server", "peer"):
        names = (f"{side}-cert-file", f"{side}-cert-key-file", f"{side}-ca-file")
        files = [getattr(c, n.replace("-", "_")) for n in names]
        try:
            dial.TLS(*files).pem()
        except pb.TLSConfigError as e:
            # No path: a certificate without its key (or a key without its certificate).
            missing = names[1] if files[0] else names[0]
            flag = names[files.index(e.path)] if e.path else missing
            raise SystemExit(f"{prefix}.{flag}: {e}") from None


def check_auth_keys(keys: str, keys_file: str = "", section: str = "--broker") -> None:
    """Exit with one line if ``<section>.auth-keys`` (or its ``-file``) is set but doesn't decode.

    The keys and the keys file exclude each other (from a flag or a variable alike).
    """
    if not keys and not keys_file:
        return
    from gazette.broker import protocol as pb
    from gazette.broker.protocol import auth
    from gazette.broker.server import keyreload

    if keys and keys_file:
        raise SystemExit(
            f"{section}.auth-keys and {section}.auth-keys-file are mutually exclusive "
            "(flags or environment variables): give the keys one way"
        )
    try:
        if keys_file:
            keyreload.load_keys_file(keys_file)
        else:
            auth.parse_keys(keys)
    except pb.AuthorizationError as e:
        suffix = "-file" if keys_file else ""
        raise SystemExit(f"{section}.auth-keys{suffix}: {e}") from None


def _quote(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


def check_broker_spec(b: BrokerConfig) -> None:
    """Validate the BrokerSpec ``b`` will announce, as every peer will validate it.

    Raises SystemExit with one line naming the flag and the broken rule, e.g.
    ``--broker.id "b0": ProcessSpec.Id.Suffix: invalid length (2; expected 4 <=
    length <= 128)``. Without this, a broker whose spec its peers refuse
    (Gazette's ``ProcessSpec.Validate``, ``BrokerSpec.Validate`` in
    ``broker/protocol/process_spec_extensions.go``) starts, reports ready and
    re-announces forever while no journal ever gets a primary.
    """
    # Imported here, not at the top, so that --help stays fast.
    from gazette.broker import protocol as pb
    from gazette.broker.protocol import urls

    if not 0 <= b.port <= 65535:  # -1 ("off") is only meaningful to --broker.http-port.
        raise SystemExit(f"--broker.port {b.port}: invalid port (expected 0 <= port <= 65535)")
    if not 0 <= b.limit <= pb.MAX_BROKER_JOURNAL_LIMIT:
        raise SystemExit(
            f"--broker.limit {b.limit}: BrokerSpec: invalid JournalLimit ({b.limit}; "
            f"expected 0 <= JournalLimit <= {pb.MAX_BROKER_JOURNAL_LIMIT})"
        )
    host = b.host or socket.gethostname()
    host_flag = f"--broker.host {_quote(b.host)}"
    if not b.host:
        host_flag += f" (the OS hostname {_quote(host)})"
    # Port 0 is resolved when the broker listens; any port gives the same verdict.
    endpoint = endpoint_of(host, b.port)
    spec = pb.ProcessSpec(id=pb.ProcessSpec.ID(zone=b.zone, suffix=b.id), endpoint=endpoint)
    try:
        pb.validate(spec)
    except pb.ValidationError as e:
        flags: dict[tuple[str, ...], str] = {
            ("Id", "Zone"): f"--broker.zone {_quote(b.zone)}",
            ("Id", "Suffix"): f"--broker.id {_quote(b.id)}",
        }
        flag = flags.get(e.context[:2], host_flag)
        raise SystemExit(f"{flag}: ProcessSpec.{e}") from None
    bare = host.removeprefix("[").removesuffix("]")
    if ":" in bare:
        # It is bracketed into the endpoint as an IPv6 literal, which Go's url.Parse
        # takes without checking: "h:5" would be announced as http://[h:5]:<port>.
        try:
            ipaddress.IPv6Address(bare)
        except ValueError:
            raise SystemExit(
                f"{host_flag}: ProcessSpec.Endpoint: a host with ':' must be an IPv6 address "
                "(the port is --broker.port)"
            ) from None
    # Go's url.Parse takes "a/b" or "user@a" as a URL with host "a"; peers would
    # dial a broker other than this one, so the host must come back whole.
    named = urls.parse_url(endpoint).hostname()
    if named != bare:
        raise SystemExit(
            f"{host_flag}: ProcessSpec.Endpoint: not a host name or IP address "
            f"(endpoint {endpoint} names host {_quote(named)})"
        )
