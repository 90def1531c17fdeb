"""Test seam: a cluster of real broker processes on loopback, and a small client.

:class:`BrokerCluster` runs N ``python -m gazette.broker`` processes against
a given etcd (e.g. :class:`gazette.keyspace.testing.EtcdServer`), each on
127.0.0.1 with its own ports and spool directory, spread over zones, sharing
one ``file://`` root. It waits until every broker reports ``/debug/ready``;
brokers can be killed (SIGKILL), paused (SIGSTOP / SIGCONT), restarted, or
stopped gracefully (SIGTERM). A broker that exits without having been signalled
by the cluster is reported by :meth:`BrokerCluster.exited_on_their_own`.
Tests, benchmarks and ``make up`` use it; the processes die with their parent.

The async helpers speak ``protocol.Journal`` through a grpc.aio stub:
:func:`apply_specs`, :func:`append`, :func:`read`, :func:`wait_writable`.

Usage::

    from gazette.broker import testing

    with testing.BrokerCluster(etcd.endpoint, work_dir=tmp_path, brokers=3) as cluster:
        async with cluster.channel(0) as ch:
            stub = pb2_grpc.JournalStub(ch)
            await testing.apply_specs(stub, testing.journal_spec("a/journal", replication=3,
                                                                 stores=[cluster.store_url]))
            await testing.wait_writable(stub, "a/journal")
            resp = await testing.append(stub, "a/journal", [b"hello\\n"])
            content, _ = await testing.read(stub, "a/journal")
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import pathlib
import signal
import ssl
import subprocess
import sys
import time
import types
import urllib.error
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence

import grpc

from gazette.broker import protocol as pb
from gazette.broker.protocol import dial, tlstesting
from gazette.broker.protocol import protocol_pb2_grpc as pb2_grpc
from gazette.keyspace import testing as ks_testing

__all__ = [
    "BrokerCluster",
    "BrokerProcess",
    "append",
    "apply_specs",
    "free_port",
    "free_port_pairs",
    "free_ports",
    "journal_spec",
    "read",
    "running_cluster",
    "wait_writable",
]

_MAX_MESSAGE = 64 << 20


free_port = ks_testing.free_port
free_ports = ks_testing.free_ports
free_port_pairs = ks_testing.free_port_pairs


@dataclasses.dataclass
class BrokerProcess:
    """One broker process of a :class:`BrokerCluster` (its ports survive restarts).

    ``module`` is what ``python -m`` runs: consumer processes
    (``gazette.consumer.testing``) are run, watched and killed alike.
    """

    zone: str
    suffix: str
    port: int
    http_port: int
    spool_dir: pathlib.Path
    log_path: pathlib.Path
    args: list[str]
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    #: The pid last signalled to exit by us: a process that is gone without
    #: it exited on its own (crashed or gave up). A pid, not a flag reset by
    #: :meth:`start`: a watcher on another thread, between that reset and the
    #: new ``proc``, took the killed process for one that exited on its own.
    signalled_pid: int | None = None
    module: str = "gazette.broker"
    #: Of a process serving TLS: how its HTTP port is reached (``/debug/ready``); its
    #: endpoint is then ``https://``.
    ssl_context: ssl.SSLContext | None = None

    @property
    def endpoint(self) -> str:
        scheme = "http" if self.ssl_context is None else "https"
        return f"{scheme}://127.0.0.1:{self.port}"

    @property
    def address(self) -> str:
        """The gRPC dial address."""
        return f"127.0.0.1:{self.port}"

    @property
    def id(self) -> pb.ProcessSpec.ID:
        return pb.ProcessSpec.ID(zone=self.zone, suffix=self.suffix)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def signalled(self) -> bool:
        """Whether the current process was told to exit (:meth:`kill`, :meth:`send_term`)."""
        return self.proc is not None and self.proc.pid == self.signalled_pid

    @property
    def exited_on_its_own(self) -> bool:
        """The process is gone, and not because :meth:`kill` or :meth:`terminate` asked."""
        proc = self.proc
        return proc is not None and proc.poll() is not None and proc.pid != self.signalled_pid

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def command(self) -> list[str]:
        """What the process runs (a subclass may run it elsewhere, e.g. in a namespace)."""
        return [sys.executable, "-m", self.module, *self.args]

    def start(self) -> None:
        if self.alive:
            raise RuntimeError(f"broker {self.suffix} is already running")
        self.spool_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"--- starting {time.strftime('%H:%M:%S')}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                [*ks_testing.die_with_parent_argv("KILL"), *self.command()],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
            )

    def ready(self) -> bool:
        try:
            scheme = "http" if self.ssl_context is None else "https"
            url = f"{scheme}://127.0.0.1:{self.http_port}/debug/ready"
            with urllib.request.urlopen(url, timeout=1, context=self.ssl_context) as resp:
                return bool(resp.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.ready():
            if not self.alive:
                raise RuntimeError(
                    f"broker {self.suffix} exited ({self.proc and self.proc.returncode}):\n"
                    + self.log_tail()
                )
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"broker {self.suffix} not ready in {timeout}s:\n{self.log_tail()}"
                )
            time.sleep(0.1)

    def kill(self) -> None:
        """SIGKILL: no graceful anything (spools and uncommitted appends are lost)."""
        if self.proc is not None and self.proc.poll() is None:
            self.signalled_pid = self.proc.pid
            self.proc.kill()
            self.proc.wait(timeout=30)

    def pause(self) -> None:
        """SIGSTOP: the process keeps its sockets and state but runs no code (nor keep-alives)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after :meth:`pause`."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)

    def send_term(self) -> None:
        """SIGTERM without waiting (see :meth:`terminate`)."""
        if self.proc is not None and self.proc.poll() is None:
            self.signalled_pid = self.proc.pid
            self.proc.send_signal(signal.SIGTERM)

    def terminate(self, timeout: float = 60.0) -> int | None:
        """SIGTERM and wait for the graceful exit (SIGKILL after ``timeout``)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.send_term()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        return self.proc.returncode

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


class BrokerCluster:
    """N broker processes against one etcd; see the module docstring.

    ``zones`` are dealt round-robin. ``file_root`` (default ``<work_dir>/fragments``)
    backs ``file://`` stores: :attr:`store_url` is ``file:///`` under it.
    ``lease`` is ``--etcd.lease`` (short, so killed brokers leave quickly);
    ``extra_args`` are added to every broker's command line and ``env`` to its
    environment (e.g. S3 credentials). With ``tls`` (:mod:`~gazette.broker.protocol.tlstesting`
    certificates) brokers serve mutual TLS and peer over it, and :meth:`channel`
    dials them with the client certificate.
    """

    def __init__(
        self,
        etcd_endpoint: str,
        *,
        work_dir: pathlib.Path | str,
        brokers: int = 3,
        zones: Sequence[str] = ("zone-a", "zone-b"),
        etcd_prefix: str = "/gazette/cluster",
        file_root: pathlib.Path | str | None = None,
        lease: str = "3s",
        limit: int = 1024,
        log_level: str = "info",
        extra_args: Iterable[str] = (),
        env: dict[str, str] | None = None,
        tls: tlstesting.Certs | None = None,
    ) -> None:
        self.etcd_endpoint = etcd_endpoint
        self.tls = tls
        tls_args = tls.broker_args() if tls is not None else []
        ssl_context = tls.client_ssl_context() if tls is not None else None
        self.work_dir = pathlib.Path(work_dir)
        self.etcd_prefix = etcd_prefix
        self.file_root = pathlib.Path(file_root) if file_root else self.work_dir / "fragments"
        self.file_root.mkdir(parents=True, exist_ok=True)
        self.brokers: list[BrokerProcess] = []
        penv = {**os.environ, **(env or {})}
        # HTTP = gRPC + 1 on every broker, so Location headers name a peer's HTTP port.
        ports = free_port_pairs(brokers)
        for i in range(brokers):
            zone = zones[i % len(zones)]
            suffix = f"broker-{i:02d}"
            port, http_port = ports[i], ports[i] + 1
            bdir = self.work_dir / suffix
            bdir.mkdir(parents=True, exist_ok=True)
            args = [
                "--broker.zone", zone,
                "--broker.id", suffix,
                "--broker.host", "127.0.0.1",
                "--broker.port", str(port),
                "--broker.http-port", str(http_port),
                "--broker.file-root", str(self.file_root),
                "--broker.spool-dir", str(bdir / "spool"),
                "--broker.limit", str(limit),
                "--etcd.address", etcd_endpoint,
                "--etcd.prefix", etcd_prefix,
                "--etcd.lease", lease,
                "--log.level", log_level,
                *tls_args,
                *extra_args,
            ]  # fmt: skip
            self.brokers.append(
                BrokerProcess(
                    zone,
                    suffix,
                    port,
                    http_port,
                    bdir / "spool",
                    bdir / "broker.log",
                    args,
                    penv,
                    ssl_context=ssl_context,
                )
            )

    @property
    def store_url(self) -> str:
        """A ``file://`` FragmentStore of the shared file root."""
        return "file:///"

    def __len__(self) -> int:
        return len(self.brokers)

    def __getitem__(self, i: int) -> BrokerProcess:
        return self.brokers[i]

    def start(self, timeout: float = 90.0) -> None:
        for b in self.brokers:
            b.start()
        for b in self.brokers:
            b.wait_ready(timeout)

    def kill(self, i: int) -> None:
        self.brokers[i].kill()

    def restart(self, i: int, timeout: float = 90.0) -> None:
        """Start broker ``i`` again (after a kill or stop) and wait until it is ready."""
        self.brokers[i].start()
        self.brokers[i].wait_ready(timeout)

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM every broker at once; SIGKILL those still running after ``timeout``.

        Brokers exit gracefully only once the allocator moved their journals
        elsewhere, which it can't when every broker is exiting (or when a journal's
        replication equals the number of brokers): tear-downs use a short timeout.
        """
        for b in self.brokers:
            b.send_term()
        deadline = time.monotonic() + timeout
        for b in self.brokers:
            b.terminate(max(0.0, deadline - time.monotonic()))

    def kill_all(self) -> None:
        for b in self.brokers:
            b.kill()

    def exited_on_their_own(self) -> list[BrokerProcess]:
        """Brokers whose process is gone although nobody signalled it (see the module docs)."""
        return [b for b in self.brokers if b.exited_on_its_own]

    def index_of(self, process_id: pb.ProcessSpec.ID) -> int:
        """The index of the broker with ``process_id`` (e.g. a route's primary)."""
        for i, b in enumerate(self.brokers):
            if b.zone == process_id.zone and b.suffix == process_id.suffix:
                return i
        raise KeyError(f"no broker {process_id.zone}/{process_id.suffix} in this cluster")

    def logs(self, lines: int = 40) -> str:
        return "\n".join(f"== {b.suffix}\n{b.log_tail(lines)}" for b in self.brokers)

    def __enter__(self) -> BrokerCluster:
        try:
            self.start()
        except BaseException:
            self.stop(timeout=5)
            raise
        return self

    def __exit__(
        self,
        et: type[BaseException] | None,
        e: BaseException | None,
        tb: types.TracebackType | None,
    ) -> None:
        self.stop(timeout=5)

    def channel(self, i: int = 0) -> grpc.aio.Channel:
        """A grpc.aio channel to broker ``i`` (use ``async with``)."""
        tls = self.tls.client_tls() if self.tls is not None else dial.TLS()
        return dial.channel(
            self.brokers[i].endpoint, dial.DialConfig(max_message_size=_MAX_MESSAGE, tls=tls)
        )


@contextlib.contextmanager
def running_cluster(
    etcd_endpoint: str, work_dir: pathlib.Path, **options: object
) -> Iterator[BrokerCluster]:
    """A started :class:`BrokerCluster` under a fresh etcd prefix; killed and wiped on exit.

    ``options`` are :class:`BrokerCluster`'s (``brokers``, ``zones``, ``lease``, ...).
    """
    root = f"/gazette/test-{uuid.uuid4().hex[:8]}"
    cluster = BrokerCluster(etcd_endpoint, work_dir=work_dir, etcd_prefix=root, **options)  # type: ignore[arg-type]
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.kill_all()
        ks_testing.wipe_prefix(etcd_endpoint, root + "/")


# -- A small client --------------------------------------------------------------------


def journal_spec(
    name: str,
    *,
    replication: int = 1,
    stores: Sequence[str] = (),
    codec: int = pb.NONE,
    length: int = 1 << 20,
    refresh_interval: float = 1.0,
    flush_interval: float = 0.0,
    flags: int = 0,
    labels: Iterable[tuple[str, str]] = (),
) -> pb.JournalSpec:
    """A valid JournalSpec with test-friendly defaults (1 s store refresh)."""
    spec = pb.JournalSpec(name=name, replication=replication, flags=flags)
    spec.labels.CopyFrom(pb.label_set(list(labels)))
    spec.fragment.length = length
    spec.fragment.compression_codec = codec  # type: ignore[assignment]
    spec.fragment.stores.extend(stores)
    spec.fragment.refresh_interval.CopyFrom(pb.duration_from_seconds(refresh_interval))
    if flush_interval:
        spec.fragment.flush_interval.CopyFrom(pb.duration_from_seconds(flush_interval))
    return spec


#: gRPC call metadata of the helpers below, e.g. ``(("authorization", "Bearer ..."),)``.
Metadata = Sequence[tuple[str, str]] | None


async def apply_specs(
    stub: pb2_grpc.JournalAsyncStub,
    *specs: pb.JournalSpec,
    expect_mod_revision: int = 0,
    metadata: Metadata = None,
) -> pb.ApplyResponse:
    req = pb.ApplyRequest()
    for spec in specs:
        ch = req.changes.add(expect_mod_revision=expect_mod_revision)
        ch.upsert.CopyFrom(spec)
    resp: pb.ApplyResponse = await stub.Apply(req, metadata=metadata)
    return resp


async def append(
    stub: pb2_grpc.JournalAsyncStub,
    journal: str,
    chunks: Iterable[bytes],
    *,
    commit: bool = True,
    deadline: float | None = 30.0,
    metadata: Metadata = None,
    **first: object,
) -> pb.AppendResponse:
    """One Append RPC: ``first`` fields on the opening message, then ``chunks``.

    ``commit=False`` ends the stream without the commit chunk (a rollback).
    """

    async def requests() -> AsyncIterator[pb.AppendRequest]:
        yield pb.AppendRequest(journal=journal, **first)  # type: ignore[arg-type]
        for c in chunks:
            yield pb.AppendRequest(content=c)
        if commit:
            yield pb.AppendRequest()

    resp: pb.AppendResponse = await stub.Append(requests(), timeout=deadline, metadata=metadata)
    return resp


async def read(
    stub: pb2_grpc.JournalAsyncStub,
    journal: str,
    offset: int = 0,
    *,
    block: bool = False,
    end_offset: int = 0,
    deadline: float | None = 30.0,
    metadata: Metadata = None,
    **fields: object,
) -> tuple[bytes, list[pb.ReadResponse]]:
    """One Read RPC: (content, every metadata response), until the stream ends."""
    req = pb.ReadRequest(
        journal=journal,
        offset=offset,
        block=block,
        end_offset=end_offset,
        **fields,  # type: ignore[arg-type]
    )
    parts: list[bytes] = []
    meta: list[pb.ReadResponse] = []
    async for resp in stub.Read(req, timeout=deadline, metadata=metadata):
        if resp.content:
            parts.append(resp.content)
        else:
            meta.append(resp)
    return b"".join(parts), meta


async def wait_writable(
    stub: pb2_grpc.JournalAsyncStub,
    journal: str,
    within: float = 60.0,
    *,
    metadata: Metadata = None,
) -> pb.AppendResponse:
    """Zero-byte appends until one succeeds (the journal is assigned and synchronised)."""
    deadline = time.monotonic() + within
    last: object = None
    while time.monotonic() < deadline:
        try:
            resp = await append(stub, journal, [], deadline=10, metadata=metadata)
            if resp.status == pb.OK:
                return resp
            last = pb.Status.Name(resp.status)
        except grpc.aio.AioRpcError as e:
            last = e
        await asyncio.sleep(0.2)
    raise TimeoutError(f"journal {journal} not writable in {within}s (last: {last})")
