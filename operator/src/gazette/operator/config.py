"""Configuration of ``python -m gazette.operator``: flags, environment, a frozen dataclass."""

from __future__ import annotations

import argparse
import dataclasses
import os
import posixpath
from collections.abc import Mapping, Sequence

from gazette import keyspace
from gazette.broker import protocol as pb
from gazette.operator import handlers, health, lag, leader, reconcile

__all__ = ["OperatorConfig", "parse_args"]


@dataclasses.dataclass(frozen=True, slots=True)
class OperatorConfig:
    """Everything the operator process is told.

    Either ``namespaces`` (kopf patterns) or ``all_namespaces``. ``health`` says where
    ``/readyz``, ``/healthz`` and ``/metrics`` are served; ``leader`` which Lease the
    replicas elect their leader with. ``etcd`` is how to reach etcd, with the same
    ``--etcd.*`` flags as brokers and consumers (``gazette.keyspace.options``).
    """

    etcd: keyspace.EtcdConfig = dataclasses.field(default_factory=keyspace.EtcdConfig)
    handlers: handlers.HandlerConfig = dataclasses.field(default_factory=handlers.HandlerConfig)
    namespaces: tuple[str, ...] = ()
    all_namespaces: bool = False
    health: health.HealthConfig = dataclasses.field(default_factory=health.HealthConfig)
    leader: leader.LeaderConfig = dataclasses.field(default_factory=leader.LeaderConfig)
    log_level: str = "INFO"

    @property
    def etcd_address(self) -> str:
        """``--etcd.address``."""
        return self.etcd.address


def _root(flag: str, value: str) -> str:
    # A clean absolute path without a trailing slash, as Gazette requires of --etcd.prefix.
    if not value.startswith("/") or value == "/" or posixpath.normpath(value) != value:
        raise argparse.ArgumentTypeError(f"{flag} must be a clean absolute path ({value!r})")
    return value


def parse_args(
    argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
) -> OperatorConfig:
    """Parse flags; each flag's default comes from the environment variable named in --help."""
    env = os.environ if environ is None else environ
    p = argparse.ArgumentParser(
        prog="python -m gazette.operator",
        description="Reconcile Journal and Shard objects of one Gazette cluster into its etcd.",
    )
    etcd_defaults = keyspace.EtcdConfig()
    for flag, var, name, text in keyspace.options.FLAGS:
        # The same flags as brokers and consumers; help never shows a secret.
        said = "(default:" in text or flag in keyspace.options.SECRET_FLAGS
        p.add_argument(
            flag,
            dest=f"etcd_{name}",
            default=env.get(var, getattr(etcd_defaults, name)),
            help=f"{text} (env {var}{'' if said else '; default %(default)s'})",
        )
    p.add_argument(
        "--etcd.prefix",
        dest="broker_root",
        default=env.get("ETCD_PREFIX", "/gazette/cluster"),
        help="the brokers' etcd prefix: Journals go under <prefix>/items/ "
        "(env ETCD_PREFIX; default %(default)s)",
    )
    p.add_argument(
        "--consumers.prefix",
        dest="consumers_root",
        default=env.get("CONSUMERS_PREFIX", "/gazette/consumers"),
        help="folder of consumer applications' etcd prefixes: Shards labelled "
        "gazette.dev/consumer=APP go under <prefix>/APP/items/ "
        "(env CONSUMERS_PREFIX; default %(default)s)",
    )
    p.add_argument(
        "--cluster",
        default=env.get("GAZETTE_CLUSTER", "default"),
        help="serve objects labelled gazette.dev/cluster=CLUSTER "
        "(env GAZETTE_CLUSTER; default %(default)s)",
    )
    p.add_argument(
        "--namespace",
        dest="namespaces",
        action="append",
        default=None,
        help="a namespace to serve; repeatable; globs allowed "
        "(env WATCH_NAMESPACES, comma-separated)",
    )
    p.add_argument(
        "--all-namespaces", action="store_true", help="serve every namespace (cluster-wide)"
    )
    # Deprecated and ignored: out-of-band etcd edits are caught by a watch, not a timer.
    p.add_argument("--resync-interval", type=float, default=None, help=argparse.SUPPRESS)
    p.add_argument(
        "--shard-status-interval",
        type=float,
        default=float(env.get("SHARD_STATUS_INTERVAL", "2")),
        help="a Shard's status (primary, standbys, Ready), which follows its replicas in "
        "etcd through one watch per application, is written at most this often "
        "(env SHARD_STATUS_INTERVAL; default %(default)s)",
    )
    p.add_argument(
        "--shard-lag-interval",
        type=float,
        default=float(env.get("SHARD_LAG_INTERVAL", "15")),
        help="seconds between two checks of every Shard's lag (its primary's Stat against "
        "its sources' write heads), written to status.lag (the LAG column of `kubectl get "
        "shards`); 0 checks nothing (env SHARD_LAG_INTERVAL; default %(default)s)",
    )
    p.add_argument(
        "--broker.address",
        dest="broker_address",
        default=env.get("BROKER_ADDRESS", ""),
        help="a broker to read journals' write heads from, for Shards' lag; empty: a "
        "broker registered under --etcd.prefix (env BROKER_ADDRESS)",
    )
    # The keys a lag round signs its tokens with (gazette.operator.lagauth): the same
    # flags, environment variables and text as brokers and consumers take them.
    for section, who, what in (
        ("broker", "brokers", "its reads of write heads"),
        ("consumer", "consumers", "its Stat of a shard's primary"),
    ):
        var = f"{section.upper()}_AUTH_KEYS"
        p.add_argument(
            f"--{section}.auth-keys",
            dest=f"{section}_auth_keys",
            default=env.get(var, ""),
            help=f"whitespace or comma separated, base64-encoded keys {who} verify tokens "
            f"with: for Shards' lag, the first signs {what}, each a token of READ of that "
            f"one {'journal' if section == 'broker' else 'shard'} living a minute; empty: "
            f"no token (env {var})",
        )
        p.add_argument(
            f"--{section}.auth-keys-file",
            dest=f"{section}_auth_keys_file",
            default=env.get(f"{var}_FILE", ""),
            help=f"file holding the keys of --{section}.auth-keys (e.g. a mounted Secret), "
            f"read again when it changes (env {var}_FILE)",
        )
    # Our side of TLS with https:// brokers and consumers (gazette.operator.lag.client_tls):
    # the client flags and variables gazctl takes, by Gazette's names.
    for section, who in (("broker", "brokers"), ("consumer", "consumers")):
        cert, key, ca = (f"--{section}.{name}" for name in lag.TLS_FLAGS)
        for flag, text, default in (
            (
                cert,
                f"PEM client certificate presented to https:// {who}, for Shards' lag "
                f"({who} run with --{section}.server-ca-file require one)",
                "none",
            ),
            (key, f"PEM private key of {cert}", "none"),
            (ca, f"PEM CA of the {who}' certificates", "the system's root pool"),
        ):
            var = flag[2:].upper().replace(".", "_").replace("-", "_")
            p.add_argument(
                flag,
                dest=var.lower(),
                default=env.get(var, ""),
                help=f"{text} (env {var}; default: {default})",
            )
    p.add_argument(
        "--retry-delay",
        type=float,
        default=5.0,
        help="seconds before retrying after an etcd failure (default %(default)s)",
    )
    p.add_argument(
        "--health.address",
        dest="health_address",
        default=env.get("HEALTH_ADDRESS", ""),
        help="HOST:PORT (or :PORT) serving /readyz (the API server and etcd answer), "
        "/healthz and /livez (the operator is not wedged) and /metrics (Prometheus); "
        "empty serves nothing (env HEALTH_ADDRESS)",
    )
    p.add_argument(
        "--liveness",
        default=env.get("LIVENESS_ENDPOINT", ""),
        help="the same as --health.address, given as a URL such as "
        "http://0.0.0.0:8080/healthz (env LIVENESS_ENDPOINT)",
    )
    p.add_argument(
        "--health.wedged-after",
        dest="wedged_after",
        type=float,
        default=float(env.get("HEALTH_WEDGED_AFTER", "120")),
        help="/healthz fails while a reconcile, status patch or probe has gone on for "
        "this long (env HEALTH_WEDGED_AFTER; default %(default)s)",
    )
    p.add_argument(
        "--leader-elect",
        action=argparse.BooleanOptionalAction,
        default=env.get("LEADER_ELECT", "true").lower() not in ("0", "false", "no"),
        help="elect one leader among the replicas with a coordination.k8s.io Lease; the "
        "others stand by (env LEADER_ELECT; default on)",
    )
    p.add_argument(
        "--leader-elect-resource-name",
        dest="lease_name",
        default=env.get("LEADER_ELECT_RESOURCE_NAME", ""),
        help="the Lease's name (default gazette-operator-<cluster>)",
    )
    p.add_argument(
        "--leader-elect-resource-namespace",
        dest="lease_namespace",
        default=env.get("LEADER_ELECT_RESOURCE_NAMESPACE", ""),
        help="the Lease's namespace (default $POD_NAMESPACE, else the service account's, "
        "else the first --namespace, else default)",
    )
    p.add_argument(
        "--leader-elect-lease-duration",
        dest="lease_duration",
        type=float,
        default=15.0,
        help="seconds a standby waits, the Lease unrenewed, before taking it (default %(default)s)",
    )
    p.add_argument(
        "--leader-elect-renew-deadline",
        dest="renew_deadline",
        type=float,
        default=10.0,
        help="seconds the leader tries to renew before it stops serving (default %(default)s)",
    )
    p.add_argument(
        "--leader-elect-retry-period",
        dest="retry_period",
        type=float,
        default=2.0,
        help="seconds between two attempts to acquire or renew (default %(default)s)",
    )
    p.add_argument(
        "--log.level",
        dest="log_level",
        default=env.get("LOG_LEVEL", "INFO"),
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
    )
    args = p.parse_args(argv)
    try:
        etcd = keyspace.options.from_values(
            {name: getattr(args, f"etcd_{name}") for _, _, name, _ in keyspace.options.FLAGS}
        )
    except keyspace.errors.EtcdConfigError as e:
        p.error(str(e))
    try:
        broker_root = _root("--etcd.prefix", args.broker_root)
        consumers_root = _root("--consumers.prefix", args.consumers_root)
    except argparse.ArgumentTypeError as e:
        p.error(str(e))
    namespaces = args.namespaces
    if namespaces is None:
        namespaces = [ns for ns in env.get("WATCH_NAMESPACES", "").split(",") if ns]
    if args.all_namespaces == bool(namespaces):
        p.error("give either --all-namespaces or --namespace (or $WATCH_NAMESPACES)")
    if args.retry_delay <= 0 or args.shard_status_interval <= 0:
        p.error("--retry-delay and --shard-status-interval must be positive")
    if args.shard_lag_interval < 0:
        p.error("--shard-lag-interval must be 0 (off) or positive")
    try:
        # Files that don't load stop the start naming their flag, as gazctl's do: else
        # every handshake would fail and each Shard's lag say no more than UNAVAILABLE.
        broker_tls = lag.client_tls(
            "broker", args.broker_cert_file, args.broker_cert_key_file, args.broker_trusted_ca_file
        )
        consumer_tls = lag.client_tls(
            "consumer",
            args.consumer_cert_file,
            args.consumer_cert_key_file,
            args.consumer_trusted_ca_file,
        )
    except pb.TLSConfigError as e:
        p.error(str(e))
    lag_config = lag.LagConfig(
        interval=args.shard_lag_interval,
        broker_address=args.broker_address,
        broker_auth_keys=args.broker_auth_keys,
        broker_auth_keys_file=args.broker_auth_keys_file,
        consumer_auth_keys=args.consumer_auth_keys,
        consumer_auth_keys_file=args.consumer_auth_keys_file,
        broker_tls=broker_tls,
        consumer_tls=consumer_tls,
    )
    try:
        # Keys that don't decode, or a file that can't be read, stop the start (as a
        # broker's do), rather than leave every Shard's lag unknown.
        lag_config.broker_keys().refresh()
        lag_config.consumer_keys().refresh()
    except pb.AuthorizationError as e:
        p.error(str(e))
    address = args.health_address or args.liveness
    if address:
        try:
            health.parse_address(address)
        except ValueError as e:
            p.error(f"--health.address: {e}")
    if args.wedged_after <= 0:
        p.error("--health.wedged-after must be positive")
    try:
        elect = leader.LeaderConfig(
            enabled=args.leader_elect,
            name=args.lease_name or f"gazette-operator-{args.cluster}",
            namespace=args.lease_namespace or leader.default_namespace(tuple(namespaces), env),
            lease_duration=args.lease_duration,
            renew_deadline=args.renew_deadline,
            retry_period=args.retry_period,
        )
    except ValueError as e:
        p.error(str(e))
    return OperatorConfig(
        etcd=etcd,
        handlers=handlers.HandlerConfig(
            reconcile=reconcile.ReconcileConfig(
                broker_root=broker_root, consumers_root=consumers_root
            ),
            cluster=args.cluster,
            retry_delay=args.retry_delay,
            status_interval=args.shard_status_interval,
            lag=lag_config,
        ),
        namespaces=tuple(namespaces),
        all_namespaces=args.all_namespaces,
        health=health.HealthConfig(address=address, wedged_after=args.wedged_after),
        leader=elect,
        log_level=args.log_level,
    )
