"""A local development cluster of real processes, behind ``make up`` / ``make down``.

Development tooling: it lives at the repository root, ships in no wheel, and
runs from a checkout (``python -m devcluster`` with the root on the path, as
the Makefile does).

``up`` starts each component of :data:`COMPONENTS` in order as a detached
background process (it outlives the command), with its data and log under the
data directory (``.local/`` by default), and records what it started in
``<data>/devcluster.json``. ``down`` stops exactly the processes recorded there
(and only if they are still the processes that were started), then forgets
them; both are idempotent. ``down`` sends SIGTERM and waits, boundedly and
generously (:data:`STOP_TIMEOUT`), for each process to exit on its own, saying
what it still waits for; a process it then has to SIGKILL is named as such,
and the command exits 1.

The cluster: one etcd on Gazette's default address, ``http://localhost:2379``;
three brokers in two zones (``zone-a``, ``zone-b``), the first on Gazette's
default broker address ``http://localhost:8080``, sharing a ``file://`` fragment
store under ``<data>/fragments``. Each broker serves the journal HTTP gateway
(``curl``'s way in) and ``/debug/`` on its HTTP port, one above its gRPC port.

Ports derive from two numbers: etcd's client port ``E`` (peer ``E + 1``) and
the first broker's port ``B`` (broker *i* on ``B + 2i``, its HTTP port on
``B + 2i + 1``); ``--port-base P`` sets both at once (``E = P``, ``B = P + 2``).
A port that is taken is replaced by a free one (the HTTP port still one above),
and said so; a port held only by connections in TIME-WAIT is not taken. Once every process serves, ``up`` applies
``examples/journals.yaml`` (journals labelled ``topic=logs`` and others), waits
until they take appends, and prints what to try next. ``<data>/env`` holds
``BROKER_ADDRESS`` and ``GATEWAY`` (the first broker's HTTP port) for a
shell to source. Consumers join as further
entries of :data:`COMPONENTS`.

``up --secure`` (``make up SECURE=1``) runs the same cluster with mutual TLS
and authorization: a throwaway CA and certificates under ``<data>/tls``
(:mod:`gazette.broker.protocol.tlstesting`; the node certificate names
``localhost`` and ``127.0.0.1``), and an HMAC key in ``<data>/tls/auth-keys``.
Brokers serve ``https://`` with their certificate, require client certificates
of the CA, dial each other with theirs, and require bearer tokens
(``--broker.auth-keys-file``). etcd serves ``https://`` with the same CA and
has auth on: brokers log in as user ``gazette`` (keys under ``/gazette/``
only), root's and their passwords in 0600 files beside the keys; nothing
secret is on a command line. ``<data>/env`` then
also sets gazctl's ``BROKER_CERT_FILE``, ``BROKER_CERT_KEY_FILE``,
``BROKER_TRUSTED_CA_FILE`` and ``BROKER_AUTH_KEYS``, and ``BROKER_AUTH_TOKEN``
(a token of every capability, for a day) for ``curl``; ``up`` prints them.

Usage::

    python -m devcluster up --data .local
    python -m devcluster up --data .local --secure
    python -m devcluster status --data .local
    python -m devcluster down --data .local
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import itertools
import json
import os
import pathlib
import secrets
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable

from gazette.broker import client, journalspace
from gazette.broker import protocol as pb
from gazette.broker.protocol import auth, tlstesting
from gazette.gazctl import journals
from gazette.keyspace import testing

__all__ = [
    "BROKERS",
    "COMPONENTS",
    "Component",
    "Options",
    "Process",
    "StartError",
    "Stopped",
    "down",
    "is_running",
    "read_state",
    "up",
]

STATE_FILE = "devcluster.json"
DEFAULT_ETCD_PORT = 2379
DEFAULT_ETCD_PEER_PORT = 2380
DEFAULT_BROKER_PORT = 8080
#: Seconds ``down`` waits for a graceful exit after SIGTERM before SIGKILL. A
#: broker drains for at most its --broker.drain-timeout (:data:`DRAIN_TIMEOUT`)
#: and then persists its spools: this leaves it ample time for both.
STOP_TIMEOUT = 90.0
#: The brokers' ``--broker.drain-timeout``.
DRAIN_TIMEOUT = "30s"
#: How often ``down`` says what it is still waiting for.
PROGRESS_EVERY = 5.0
#: Seconds to wait for a SIGKILLed process to be gone.
KILL_WAIT = 10.0
#: The brokers of the cluster: (id, zone). Two zones, so replicas spread across them.
BROKERS = (("broker-0", "zone-a"), ("broker-1", "zone-b"), ("broker-2", "zone-a"))
#: The journals ``up`` applies (relative to the repository root).
EXAMPLE_JOURNALS = pathlib.Path(__file__).resolve().parents[1] / "examples" / "journals.yaml"

Say = Callable[[str], None]


@dataclasses.dataclass(frozen=True, slots=True)
class Options:
    """What ``up`` was asked for. A port of 0 means any free port.

    ``etcd_port`` is etcd's client port (its peer port is the next one);
    ``broker_port`` is the first broker's gRPC port: broker *i* listens on
    ``broker_port + 2i`` and serves its HTTP gateway one port above (the same
    distance on every broker: Location headers rely on it).
    ``journals`` is the YAML hierarchy applied once the brokers serve (None: none).
    """

    data: pathlib.Path
    etcd_port: int = DEFAULT_ETCD_PORT
    broker_port: int = DEFAULT_BROKER_PORT
    journals: pathlib.Path | None = EXAMPLE_JOURNALS
    #: Seconds to wait for each process to serve.
    timeout: float = 90.0
    #: Mutual TLS and authorization (see the module docstring).
    secure: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class Process:
    """A process ``up`` started: enough to find it, show it and stop only it."""

    name: str
    pid: int
    argv: list[str]
    endpoint: str
    log: str
    #: Processes stop in descending stage order, a stage's processes together
    #: (brokers drain their journals while etcd is still there).
    stage: int = 0
    #: Where its HTTP diagnostics (/debug/ready) are served, if anywhere.
    http: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class Component:
    """A named part of the cluster and how to start it.

    ``start(options, started, say)`` returns once the process serves; ``started``
    holds the processes started before it (a broker finds etcd's endpoint there).
    """

    name: str
    start: Callable[[Options, list[Process], Say], Process]


def _start_etcd(options: Options, started: list[Process], say: Say) -> Process:
    port = options.etcd_port
    if port and not testing.port_is_free(port):
        say(
            f"port {port} is already in use (another etcd?): starting etcd on a free port "
            "instead; point clients at the endpoint below (--etcd.address)"
        )
        port = 0
    peer = port + 1 if port else 0
    if peer and not testing.port_is_free(peer):
        say(f"etcd's peer port {peer} is already in use: using a free one")
        peer = 0
    tls = None
    if options.secure:
        certs = secure_certs(options.data)
        tls = testing.TLSFiles(
            ca_file=str(certs.ca_file),
            server_cert=str(certs.node_cert_file),
            server_key=str(certs.node_key_file),
            client_cert=str(certs.client_cert_file),
            client_key=str(certs.client_key_file),
            other_client_cert="",
            other_client_key="",
        )
    server = testing.EtcdServer(
        # Absolute: etcd runs in this directory, so a relative --data-dir would nest.
        work_dir=(options.data / "etcd").resolve(),
        client_port=port,
        peer_port=peer,
        name="devcluster",
        detach=True,
        fsync=True,
        tls=tls,
    )
    server.start()
    if options.secure:
        # Client certificates, and a user of its own for the brokers, limited to
        # Gazette's keys; root's password stays in a 0600 file, as the brokers' does.
        server.enable_auth(
            {ETCD_USER: (_secret(options.data, "etcd-password"), "/gazette/")},
            root_password=_secret(options.data, "etcd-root-password"),
        )
    argv = server.argv()
    return Process("etcd", server.release(), argv, server.endpoint, str(server.log_path))


def _port_pair(wanted: int, what: str, say: Say, taken: set[int]) -> int:
    """``wanted`` if it and the port above are free, else a free such pair not in
    ``taken``; both are added to ``taken``.

    Started brokers may not have bound their ports yet, and a port just probed
    and closed can be handed out again: ``taken`` keeps two components of one
    ``up`` from being given the same port.
    """

    def free(p: int) -> bool:
        return (
            p not in taken
            and p + 1 not in taken
            and testing.port_is_free(p)
            and testing.port_is_free(p + 1)
        )

    if wanted and not free(wanted):
        say(f"port {wanted} or {wanted + 1} is already in use: starting {what} on free ports")
        wanted = 0
    while not wanted or not free(wanted):
        wanted = testing.free_port_pairs(1)[0]
    taken.update((wanted, wanted + 1))
    return wanted


def _ports_of(started: list[Process]) -> set[int]:
    """Ports given on the command lines of processes this ``up`` started."""
    ports: set[int] = set()
    for proc in started:
        for flag, value in itertools.pairwise(proc.argv):
            if flag.endswith("port") and value.isdigit():
                ports.add(int(value))
    return ports


def _spawn(argv: list[str], log: pathlib.Path) -> int:
    """Start ``argv`` detached (its own session: it outlives us), logging to ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return proc.pid


def _wait_http(
    url: str,
    pid: int,
    name: str,
    log: pathlib.Path,
    timeout: float,
    context: ssl.SSLContext | None = None,
) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=1, context=context) as resp:
                if resp.status == 200:
                    return
        except (OSError, urllib.error.URLError):
            pass
        try:
            waited, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            waited, status = 0, 0
        if waited:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
            raise StartError(f"{name} exited ({status}); the end of {log}:\n{tail}")
        if time.monotonic() > deadline:
            raise StartError(f"{name} did not serve {url} within {timeout:.0f}s; see {log}")
        time.sleep(0.1)


class StartError(RuntimeError):
    """A component failed to start (the message says why, and where its log is)."""


def _etcd_endpoint(started: list[Process]) -> str:
    return next(p.endpoint for p in started if p.name == "etcd")


def _broker_starter(index: int) -> Callable[[Options, list[Process], Say], Process]:
    suffix, zone = BROKERS[index]

    def start(options: Options, started: list[Process], say: Say) -> Process:
        taken = _ports_of(started)
        wanted = options.broker_port + 2 * index if options.broker_port else 0
        port = _port_pair(wanted, suffix, say, taken)
        http_port = port + 1
        bdir = options.data / "brokers" / suffix
        file_root = options.data / "fragments"
        file_root.mkdir(parents=True, exist_ok=True)
        argv = [
            sys.executable, "-m", "gazette.broker",
            "--broker.zone", zone,
            "--broker.id", suffix,
            "--broker.host", "127.0.0.1",
            "--broker.port", str(port),
            "--broker.http-port", str(http_port),
            "--broker.file-root", str(file_root.resolve()),
            "--broker.spool-dir", str((bdir / "spool").resolve()),
            "--etcd.address", _etcd_endpoint(started),
            "--etcd.lease", "10s",
            "--broker.drain-timeout", DRAIN_TIMEOUT,
            "--log.level", "info",
        ]  # fmt: skip
        context, scheme = None, "http"
        if options.secure:
            certs = secure_certs(options.data)
            # Secrets by file (0600), never on a command line that `ps` shows.
            keys_file = str(_tls_dir(options.data) / "auth-keys")
            argv += [*certs.broker_args(), "--broker.auth-keys-file", keys_file]
            argv += _etcd_args(options.data)
            context, scheme = certs.client_ssl_context(), "https"
        log = bdir / "broker.log"
        pid = _spawn(argv, log)
        http = f"{scheme}://127.0.0.1:{http_port}"
        _wait_http(f"{http}/debug/ready", pid, suffix, log, options.timeout, context)
        return Process(suffix, pid, argv, f"{scheme}://127.0.0.1:{port}", str(log), 1, http)

    return start


#: The cluster, in start order (``down`` stops by descending stage).
COMPONENTS: list[Component] = [
    Component("etcd", _start_etcd),
    *(Component(suffix, _broker_starter(i)) for i, (suffix, _) in enumerate(BROKERS)),
]


# --- TLS and authorization (--secure) -----------------------------------------------

#: Lifetime of the bearer token ``up --secure`` mints for curl.
TOKEN_LIFETIME = 24 * 3600.0


def _tls_dir(data: pathlib.Path) -> pathlib.Path:
    return (data / "tls").resolve()


def _make_secrets(data: pathlib.Path) -> None:
    """A fresh CA, certificates and auth key under ``<data>/tls`` (each ``up`` makes new ones)."""
    tlstesting.make_certs(_tls_dir(data))
    _write_secret(data, "auth-keys", base64.b64encode(secrets.token_bytes(32)).decode())


#: The etcd user of ``up --secure``'s brokers (read and write under ``/gazette/`` only).
ETCD_USER = "gazette"


def _write_secret(data: pathlib.Path, name: str, value: str) -> None:
    """``value`` into ``<data>/tls/<name>``, readable by its owner only (0600)."""
    fd = os.open(_tls_dir(data) / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(value + "\n")


def _secret(data: pathlib.Path, name: str) -> str:
    """A fresh random secret in ``<data>/tls/<name>`` (0600)."""
    value = secrets.token_urlsafe(24)
    _write_secret(data, name, value)
    return value


def _etcd_args(data: pathlib.Path) -> list[str]:
    """How a broker of ``up --secure`` reaches etcd: its client certificate and user."""
    d = _tls_dir(data)
    return [
        "--etcd.cert-file", str(d / "client.crt"),
        "--etcd.cert-key-file", str(d / "client.key"),
        "--etcd.trusted-ca-file", str(d / "ca.crt"),
        "--etcd.username", ETCD_USER,
        "--etcd.password-file", str(d / "etcd-password"),
    ]  # fmt: skip


def secure_certs(data: pathlib.Path) -> tlstesting.Certs:
    """The certificates ``up --secure`` made under ``data``."""
    d = _tls_dir(data)
    ca = tlstesting.CA(d, "ca", d / "ca.crt", d / "ca.key")
    return tlstesting.Certs(ca, d / "node.crt", d / "node.key", d / "client.crt", d / "client.key")


def _auth_keys(data: pathlib.Path) -> str:
    return (_tls_dir(data) / "auth-keys").read_text().strip()


def _client_config(options: Options, broker: str) -> client.ClientConfig:
    if not options.secure:
        return client.ClientConfig(address=broker)
    tls = secure_certs(options.data).client_tls()
    return client.ClientConfig(
        address=broker,
        auth_keys=_auth_keys(options.data),
        cert_file=tls.cert_file,
        cert_key_file=tls.key_file,
        trusted_ca_file=tls.ca_file,
    )


def _secure_env(options: Options) -> list[tuple[str, str]]:
    """gazctl's (and curl's) variables of a ``--secure`` cluster."""
    certs = secure_certs(options.data)
    keys = _auth_keys(options.data)
    token = auth.KeyedAuth(keys).sign(
        auth.Claims(auth.Capability.ALL, pb.LabelSelector()), TOKEN_LIFETIME
    )
    return [
        *certs.client_env().items(),
        ("BROKER_AUTH_KEYS", keys),
        ("BROKER_AUTH_TOKEN", token),
    ]


# --- Journals ------------------------------------------------------------------


async def _apply_journals(
    options: Options, broker: str, text: str, within: float, say: Say
) -> list[str]:
    tree = journalspace.load(text)
    request = pb.ApplyRequest(changes=journalspace.flatten(tree))
    names = [c.upsert.name for c in request.changes if c.HasField("upsert")]
    async with client.JournalClient(_client_config(options, broker)) as jc:
        existing = await client.list_journals(jc)
        revisions = {j.spec.name: j.mod_revision for j in existing.journals}
        for change in request.changes:
            if change.HasField("upsert"):
                # Re-applying over an earlier `up` of the same data dir is fine.
                change.expect_mod_revision = revisions.get(change.upsert.name, 0)
        await client.apply_journals(jc, request)
        # Wait until each journal takes appends (a zero-byte append commits nothing),
        # so the first thing a newcomer tries doesn't wait on assignment.
        deadline = time.monotonic() + within
        for name in names:
            while True:
                try:
                    await asyncio.wait_for(client.append(jc, name, b""), 10)
                    break
                except client.errors.IndexHasGreaterOffset:
                    head = await asyncio.wait_for(journals.reset_head(jc, name), 10)
                    say(
                        f"{name}: its fragments outlived the last `down`; write head reset to {head}"
                    )
                except (client.errors.ClientError, TimeoutError):
                    if time.monotonic() > deadline:
                        raise StartError(f"journal {name} did not become writable") from None
                    await asyncio.sleep(0.2)
    return names


def _write_env(options: Options, processes: list[Process]) -> pathlib.Path:
    by_name = {p.name: p for p in processes}
    broker = by_name[BROKERS[0][0]]
    lines = [
        f"export ETCD_ADDRESS={by_name['etcd'].endpoint}",
        f"export BROKER_ADDRESS={broker.endpoint}",
        # The journal HTTP gateway, on the first broker's HTTP port.
        f"export GATEWAY={broker.http}",
    ]
    if options.secure:
        lines += [f"export {k}={v}" for k, v in _secure_env(options)]
        d = _tls_dir(options.data)
        lines += [
            f"export ETCD_CERT_FILE={d / 'client.crt'}",
            f"export ETCD_CERT_KEY_FILE={d / 'client.key'}",
            f"export ETCD_TRUSTED_CA_FILE={d / 'ca.crt'}",
            f"export ETCD_USERNAME={ETCD_USER}",
            f"export ETCD_PASSWORD_FILE={d / 'etcd-password'}",
        ]
    path = options.data / "env"
    path.write_text("\n".join(lines) + "\n")
    return path


def _next_steps(options: Options, processes: list[Process], journals: list[str], say: Say) -> None:
    by_name = {p.name: p for p in processes}
    broker = by_name[BROKERS[0][0]].endpoint
    flag = (
        "" if broker == f"http://127.0.0.1:{DEFAULT_BROKER_PORT}" else f" --broker.address {broker}"
    )
    journal = next(
        (j for j in journals if j.startswith("examples/logs/")), journals[0] if journals else ""
    )
    say("")
    curl = "curl"
    if options.secure:
        flag = ""  # BROKER_ADDRESS is set below.
        env = options.data / "env"
        say(f"mutual TLS and authorization: gazctl needs these variables (`source {env}`):")
        for key, value in [("BROKER_ADDRESS", broker), *_secure_env(options)]:
            shown = value if key not in ("BROKER_AUTH_KEYS", "BROKER_AUTH_TOKEN") else "..."
            say(f"  export {key}={shown}")
        say(f"(the keys are in {_tls_dir(options.data) / 'auth-keys'}; the values in {env})")
        curl = (
            'curl --cacert "$BROKER_TRUSTED_CA_FILE" --cert "$BROKER_CERT_FILE"'
            ' --key "$BROKER_CERT_KEY_FILE" -H "Authorization: Bearer $BROKER_AUTH_TOKEN"'
        )
    say(f"applied {len(journals)} journals from {options.journals}. Try:")
    say(f"  gazctl journals list -l topic=logs{flag}")
    if journal:
        # JSON, as the journals' content type says (and the Spark section reads back).
        say(
            f"""  echo '{{"level":"info","msg":"hello"}}' | gazctl journals append"""
            f" -l name={journal}{flag}"
        )
        say(f"  gazctl journals read -l name={journal}{flag}")
        gw = by_name[BROKERS[0][0]].http  # Every broker's HTTP port serves the gateway.
        say(
            f"""  echo '{{"level":"warn","msg":"over http"}}' | {curl} -X PUT"""
            f" --data-binary @- {gw}/{journal}"
        )
        say(f"  {curl} '{gw}/{journal}?offset=0'")
    say(
        f"(`source {options.data / 'env'}` sets BROKER_ADDRESS for gazctl and GATEWAY for curl; "
        "`make down` stops it all.)"
    )


# --- State ---------------------------------------------------------------------


def _state_path(data: pathlib.Path) -> pathlib.Path:
    return data / STATE_FILE


def read_state(data: pathlib.Path) -> list[Process]:
    """The processes recorded by ``up`` (empty when none)."""
    try:
        raw = json.loads(_state_path(data).read_text())
    except FileNotFoundError:
        return []
    return [Process(**p) for p in raw["processes"]]


def _write_state(data: pathlib.Path, processes: list[Process]) -> None:
    path = _state_path(data)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"processes": [dataclasses.asdict(p) for p in processes]}, indent=2))
    tmp.replace(path)


def is_running(process: Process) -> bool:
    """Whether ``process.pid`` is alive and still runs ``process.argv`` (pids get reused)."""
    proc = pathlib.Path(f"/proc/{process.pid}")
    try:
        stat = (proc / "stat").read_text()
        cmdline = (proc / "cmdline").read_bytes()
    except OSError:  # Gone (or never ours to read).
        return False
    # A zombie has exited; it just awaits reaping by its new parent.
    if stat.rpartition(")")[2].split()[0] == "Z":
        return False
    return cmdline.split(b"\0")[:-1] == [a.encode() for a in process.argv]


# --- Commands ------------------------------------------------------------------


def up(options: Options, say: Say = print) -> list[Process]:
    """Start the cluster (or report the one already running); returns its processes."""
    options.data.mkdir(parents=True, exist_ok=True)
    recorded = read_state(options.data)
    running = [p for p in recorded if is_running(p)]
    if running:
        say(f"already up (data in {options.data}):")
        _describe(running, say)
        say("stop it with: make down")
        return running

    if options.secure:
        _make_secrets(options.data)
    started: list[Process] = []
    try:
        for component in COMPONENTS:
            process = component.start(options, started, say)
            started.append(process)
            # Record each process as soon as it runs, so `down` finds it even
            # if a later component fails to start.
            _write_state(options.data, started)
    except BaseException:
        _stop_all(started, say)
        _state_path(options.data).unlink(missing_ok=True)
        raise

    _write_env(options, started)
    say(f"up (data in {options.data}):")
    _describe(started, say)
    if options.journals is not None:
        broker = next(p.endpoint for p in started if p.name == BROKERS[0][0])
        try:
            journals = asyncio.run(
                _apply_journals(options, broker, options.journals.read_text(), options.timeout, say)
            )
        except (client.errors.ClientError, journalspace.JournalSpaceError, pb.ValidationError) as e:
            raise StartError(f"applying {options.journals} failed: {e}") from e
        _next_steps(options, started, journals, say)
    else:
        say("stop it with: make down")
    return started


def down(data: pathlib.Path, say: Say = print, timeout: float = STOP_TIMEOUT) -> list[Stopped]:
    """Stop what ``up`` recorded under ``data``, and nothing else; returns how each stopped.

    Each stage gets SIGTERM and up to ``timeout`` seconds to exit gracefully (a
    broker drains and persists its spools first); only then are the stragglers
    sent SIGKILL, which is said plainly and marked ``forced`` in the result.
    """
    recorded = read_state(data)
    if not recorded:
        say(f"nothing to stop (no {STATE_FILE} in {data})")
        return []
    stopped = _stop_all(recorded, say, timeout)
    _state_path(data).unlink(missing_ok=True)
    return stopped


@dataclasses.dataclass(frozen=True, slots=True)
class Stopped:
    """How one process of ``down`` ended: after ``seconds``; ``forced`` when by SIGKILL."""

    process: Process
    seconds: float
    forced: bool


def _stop_all(processes: list[Process], say: Say, timeout: float = STOP_TIMEOUT) -> list[Stopped]:
    stopped: list[Stopped] = []
    for stage in sorted({p.stage for p in processes}, reverse=True):
        group = [p for p in processes if p.stage == stage]
        running = []
        for process in group:
            if not is_running(process):
                say(f"{process.name} (pid {process.pid}) is not running")
                continue
            running.append(process)
        # Signal a stage's processes together, then wait for them all: brokers
        # exiting one by one would each wait on the others to take their journals.
        stopped.extend(_stop(running, timeout, say))
    return stopped


def _stop(processes: list[Process], timeout: float, say: Say) -> list[Stopped]:
    """SIGTERM ``processes``, wait up to ``timeout`` for each, then SIGKILL the rest.

    The first ``down`` printed "stopped" for brokers it had SIGKILLed after 10 s
    of draining (found by the chaos suite's ``make down`` fault): every line now
    says which way each process ended.
    """
    if not processes:
        return []
    for process in processes:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGTERM)
    names = ", ".join(p.name for p in processes)
    say(f"sent SIGTERM to {names}; waiting up to {timeout:.0f}s for a graceful exit")
    started = time.monotonic()
    next_progress = started + PROGRESS_EVERY
    alive = list(processes)
    done: list[Stopped] = []
    while alive and time.monotonic() - started < timeout:
        time.sleep(0.05)
        for p in [p for p in alive if not is_running(p)]:
            alive.remove(p)
            elapsed = time.monotonic() - started
            done.append(Stopped(p, elapsed, forced=False))
            say(f"stopped {p.name} (pid {p.pid}) after {elapsed:.1f}s")
        if alive and time.monotonic() >= next_progress:
            next_progress += PROGRESS_EVERY
            say(
                f"  still waiting for {', '.join(p.name for p in alive)} to exit "
                f"({time.monotonic() - started:.0f}s of at most {timeout:.0f}s; "
                "brokers drain and persist their spools first)"
            )
    for p in alive:
        say(
            f"{p.name} (pid {p.pid}) did not exit within {timeout:.0f}s of SIGTERM: "
            f"sending SIGKILL (what it had not persisted is lost); see {p.log}"
        )
        with contextlib.suppress(ProcessLookupError):
            os.kill(p.pid, signal.SIGKILL)
    kill_deadline = time.monotonic() + KILL_WAIT
    while alive:
        for p in [p for p in alive if not is_running(p)]:
            alive.remove(p)
            done.append(Stopped(p, time.monotonic() - started, forced=True))
            say(f"KILLED {p.name} (pid {p.pid}) with SIGKILL")
        if alive and time.monotonic() > kill_deadline:
            for p in alive:
                say(f"{p.name} (pid {p.pid}) is still running after SIGKILL")
            break
        time.sleep(0.05)
    return done


def _describe(processes: list[Process], say: Say) -> None:
    width = max(len(p.name) for p in processes)
    for p in processes:
        say(f"  {p.name:<{width}}  pid {p.pid:<7}  {p.endpoint}  log {p.log}")
