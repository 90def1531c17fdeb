"""A ProcessCluster whose etcd and brokers each live in a network namespace of their own.

:class:`NetCluster` first builds a private network (:class:`chaos.netns.Netns`:
one namespace per process, all on one bridge, plus the test process's own
veth), then runs etcd and every broker under ``ip netns exec <ns>``, each
listening on its namespace's address only. Brokers announce
``http://<their address>:<port>``, so peers, proxies and the test's
appenders all go through the bridge, where :attr:`NetCluster.net` can cut any
link. Since every namespace has its own ports, every broker uses the same
pair (:data:`BROKER_PORT`, +1 for HTTP) and etcd its usual 2379/2380: no
free-port races. Spool directories and the shared ``file://`` root are plain
directories, seen alike from every namespace.

Everything else is :class:`~chaos.clusters.ProcessCluster`'s: the exit monitor,
restarts (in the same namespace), :meth:`~NetCluster.close` — which also
deletes the network, after the processes are gone.

With ``consumers=N`` the network has N more nodes, ``consumer-<i:02d>``, for
consumer processes (:class:`NetConsumerCluster`, started by
:meth:`NetCluster.start_consumers`): each runs in its namespace on
:data:`CONSUMER_PORT`, dials one broker, and is watched by the same exit
monitor as the brokers.

With ``go=True`` (the suite's ``CHAOS_GO=1``) the brokers are Gazette's own Go
broker (``gazette serve``, gRPC and HTTP on one port), built once by
``broker/tests/interop/go/build.sh`` into the tool cache: the same faults then
show how the reference implementation behaves. :class:`GoUnavailable` is
raised where ``go`` is not on PATH (the build script needs it even to find a
cached binary).

Usage::

    cluster = NetCluster(tmp_path, lease_s=5.0, brokers=3)
    try:
        cluster.prepare(); cluster.start()
        cluster.net.isolate(cluster.brokers[0].suffix)
        ...
    finally:
        cluster.close()
"""

from __future__ import annotations

import asyncio
import dataclasses
import pathlib
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence

from chaos import netns
from chaos.clusters import REPO, Exit, HarnessError, ProcessCluster
from gazette.broker import testing
from gazette.consumer import testing as consumer_testing
from gazette.keyspace import testing as ks_testing

__all__ = [
    "BROKER_PORT",
    "CONSUMER_PORT",
    "ETCD",
    "GoUnavailable",
    "NetBrokerCluster",
    "NetBrokerProcess",
    "NetCluster",
    "NetConsumerCluster",
    "NetEtcd",
    "NetGoBrokerProcess",
    "go_gazette",
]

#: The node name of etcd in the network.
ETCD = "etcd"
#: Every broker's gRPC port in its own namespace (HTTP is the next one).
BROKER_PORT = 8080
#: Every consumer process's gRPC port in its own namespace (HTTP is the next one).
CONSUMER_PORT = 9090
#: Builds (once) and names the directory of Gazette's Go binaries.
_GO_BUILD = REPO / "broker/tests/interop/go/build.sh"


class GoUnavailable(HarnessError):
    """Gazette's Go broker can't be had here (no Go toolchain); says why."""


def go_gazette(timeout: float = 900.0) -> pathlib.Path:
    """The path of Gazette's ``gazette`` binary, built on first use (slow once)."""
    if shutil.which("go") is None:
        raise GoUnavailable("`go` is not on PATH: no Go Gazette broker to run")
    try:
        out = subprocess.run(
            [str(_GO_BUILD)], capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as e:
        raise HarnessError(f"{_GO_BUILD} took over {timeout:.0f}s") from e
    if out.returncode != 0:
        raise HarnessError(f"{_GO_BUILD} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return pathlib.Path(out.stdout.strip().splitlines()[-1]) / "gazette"


class NetEtcd(ks_testing.EtcdServer):
    """An :class:`~gazette.keyspace.testing.EtcdServer` run in a namespace, on its address."""

    def __init__(self, prefix: Sequence[str], host: str, **kwargs: object) -> None:
        super().__init__(client_port=2379, peer_port=2380, **kwargs)  # type: ignore[arg-type]
        self.host = host
        self._prefix = list(prefix)

    def argv(self) -> list[str]:
        # setpriv (the die-with-parent prefix) execs ip, which enters the
        # namespace and execs etcd: one pid all along, so signals reach etcd.
        return [*self._prefix, *super().argv()]


@dataclasses.dataclass
class NetBrokerProcess(testing.BrokerProcess):
    """A broker process started in a namespace (``prefix``), reached at ``host``."""

    host: str = "127.0.0.1"
    prefix: list[str] = dataclasses.field(default_factory=list)

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def command(self) -> list[str]:
        # The namespace's `ip netns exec` goes between die-with-parent and the broker.
        return [*self.prefix, *super().command()]

    def ready(self) -> bool:
        try:
            url = f"http://{self.host}:{self.http_port}/debug/ready"
            with urllib.request.urlopen(url, timeout=1) as resp:
                return bool(resp.status == 200)
        except (OSError, urllib.error.URLError):
            return False


@dataclasses.dataclass
class NetGoBrokerProcess(NetBrokerProcess):
    """Gazette's Go broker (``binary``) in a namespace: gRPC and HTTP share its port."""

    binary: str = ""

    def command(self) -> list[str]:
        return [*self.prefix, self.binary, "serve", *self.args]

    def ready(self) -> bool:
        # Gazette has no /debug/ready; it serves HTTP once it joined etcd.
        try:
            url = f"http://{self.host}:{self.port}/debug/metrics"
            with urllib.request.urlopen(url, timeout=1) as resp:
                return bool(resp.status == 200)
        except (OSError, urllib.error.URLError):
            return False


def _go_args(b: testing.BrokerProcess, host: str) -> list[str]:
    """``gazette serve`` flags doing what ``b``'s (Python broker) flags do."""
    keep = (
        "--broker.zone", "--broker.id", "--broker.file-root", "--broker.limit",
        "--etcd.address", "--etcd.prefix", "--etcd.lease", "--log.level",
    )  # fmt: skip
    args = [f"{flag}={b.args[b.args.index(flag) + 1]}" for flag in keep if flag in b.args]
    return [*args, f"--broker.host={host}", f"--broker.port={BROKER_PORT}"]


def _with_flag(args: list[str], flag: str, value: str) -> list[str]:
    """``args`` with ``flag``'s value replaced (it must be there, as ``flag value``)."""
    out = list(args)
    i = out.index(flag)
    out[i + 1] = value
    return out


class NetBrokerCluster(testing.BrokerCluster):
    """A :class:`~gazette.broker.testing.BrokerCluster` whose brokers run in ``net``'s namespaces.

    Broker ``i`` is the node named ``broker-<i:02d>`` (its suffix) of ``net``,
    which must already be created. With ``go_binary`` the brokers are Gazette's.
    """

    def __init__(
        self,
        net: netns.Netns,
        etcd_endpoint: str,
        *,
        go_binary: pathlib.Path | None = None,
        **kwargs: object,
    ) -> None:
        super().__init__(etcd_endpoint, **kwargs)  # type: ignore[arg-type]
        moved: list[NetBrokerProcess] = []
        for b in self.brokers:
            host = net.address(b.suffix)
            if go_binary is not None:
                moved.append(
                    NetGoBrokerProcess(
                        b.zone,
                        b.suffix,
                        BROKER_PORT,
                        BROKER_PORT,
                        b.spool_dir,
                        b.log_path,
                        _go_args(b, host),
                        b.env,
                        host=host,
                        prefix=net.exec_argv(b.suffix),
                        binary=str(go_binary),
                    )
                )
                continue
            args = _with_flag(b.args, "--broker.host", host)
            args = _with_flag(args, "--broker.port", str(BROKER_PORT))
            args = _with_flag(args, "--broker.http-port", str(BROKER_PORT + 1))
            moved.append(
                NetBrokerProcess(
                    b.zone,
                    b.suffix,
                    BROKER_PORT,
                    BROKER_PORT + 1,
                    b.spool_dir,
                    b.log_path,
                    args,
                    b.env,
                    host=host,
                    prefix=net.exec_argv(b.suffix),
                )
            )
        self.brokers = list(moved)


class NetConsumerCluster(consumer_testing.ConsumerCluster):
    """A :class:`~gazette.consumer.testing.ConsumerCluster` whose processes run in ``net``'s
    namespaces: process ``i`` is the node named ``consumer-<i:02d>`` (its suffix)."""

    def __init__(self, net: netns.Netns, app: str, **kwargs: object) -> None:
        super().__init__(app, **kwargs)  # type: ignore[arg-type]
        moved: list[testing.BrokerProcess] = []
        for p in self.processes:
            host = net.address(p.suffix)
            args = _with_flag(p.args, "--consumer.host", host)
            args = _with_flag(args, "--consumer.port", str(CONSUMER_PORT))
            args = _with_flag(args, "--consumer.http-port", str(CONSUMER_PORT + 1))
            moved.append(
                NetBrokerProcess(
                    p.zone,
                    p.suffix,
                    CONSUMER_PORT,
                    CONSUMER_PORT + 1,
                    p.spool_dir,
                    p.log_path,
                    args,
                    p.env,
                    module=p.module,
                    host=host,
                    prefix=net.exec_argv(p.suffix),
                )
            )
        self.processes = moved


class NetCluster(ProcessCluster):
    """etcd + ``brokers`` brokers, one namespace each; see the module docstring.

    ``how`` is how :attr:`net` cuts links (:data:`chaos.netns.BLACKHOLE` or
    :data:`chaos.netns.NEIGH`); ``go`` runs Gazette's Go brokers instead of ours.
    """

    def __init__(
        self,
        work_dir: pathlib.Path,
        *,
        lease_s: float,
        brokers: int = 3,
        zones: Sequence[str] = ("zone-a", "zone-b", "zone-c"),
        extra_args: Sequence[str] = (),
        how: str = netns.BLACKHOLE,
        go: bool = False,
        consumers: int = 0,
    ) -> None:
        super().__init__(
            work_dir, lease_s=lease_s, brokers=brokers, zones=zones, extra_args=extra_args
        )
        self.go = go
        self.net = netns.Netns(how=how)
        self.addresses: dict[str, str] = {}
        self._consumers = consumers
        self.consumers: NetConsumerCluster | None = None

    @property
    def broker_names(self) -> list[str]:
        """The network's node names of the brokers, by index."""
        return [f"broker-{i:02d}" for i in range(self._brokers)]

    @property
    def consumer_names(self) -> list[str]:
        """The network's node names of the consumer processes, by index."""
        return [f"consumer-{i:02d}" for i in range(self._consumers)]

    def prepare(self) -> testing.BrokerCluster:
        go_binary = go_gazette() if self.go else None
        self.addresses = self.net.create([ETCD, *self.broker_names, *self.consumer_names])
        self.etcd = NetEtcd(
            self.net.exec_argv(ETCD), self.addresses[ETCD], work_dir=self.work_dir / "etcd"
        )
        self.etcd.start()
        self._cluster = NetBrokerCluster(
            self.net,
            self.etcd.endpoint,
            go_binary=go_binary,
            env=self._env(),
            work_dir=self.work_dir,
            brokers=self._brokers,
            zones=self._zones,
            lease=f"{self.lease_s:g}s",
            extra_args=self._extra_args,
        )
        if [b.suffix for b in self._cluster.brokers] != self.broker_names:
            raise netns.NetnsError("broker suffixes are not the network's node names")
        return self._cluster

    def name_of(self, i: int) -> str:
        """Broker ``i``'s node name in :attr:`net`."""
        return self.broker_names[i]

    def start_consumers(
        self,
        app: str,
        *,
        etcd_prefix: str,
        lease_s: float,
        app_args: Sequence[str] = (),
        env: dict[str, str] | None = None,
        timeout: float = 60.0,
    ) -> NetConsumerCluster:
        """Start a process of ``app`` on every consumer node; process ``i`` dials broker
        ``i`` (modulo their number). Each is ready when this returns."""
        if self._consumers == 0:
            raise HarnessError("this NetCluster was made without consumer nodes")
        brokers = self.brokers.brokers
        consumers = NetConsumerCluster(
            self.net,
            app,
            etcd_endpoint=self.etcd.endpoint,
            etcd_prefix=etcd_prefix,
            broker_address=brokers[0].endpoint,
            work_dir=self.work_dir / "consumers",
            processes=self._consumers,
            zones=self._zones,
            lease=f"{lease_s:g}s",
            app_args=list(app_args),
            env=env,
        )
        for i, p in enumerate(consumers.processes):
            p.args = _with_flag(p.args, "--broker.address", brokers[i % len(brokers)].endpoint)
        self.consumers = consumers
        consumers.start(timeout)
        return consumers

    async def monitor(self, stop: asyncio.Event, poll_s: float = 0.25) -> None:
        """The brokers' exit monitor, and the same for the consumer processes."""
        async with asyncio.TaskGroup() as tg:
            tg.create_task(super().monitor(stop, poll_s), name="broker-exits")
            tg.create_task(self._watch_consumers(stop, poll_s), name="consumer-exits")

    async def _watch_consumers(self, stop: asyncio.Event, poll_s: float) -> None:
        while not stop.is_set():
            consumers = self.consumers
            processes = consumers.processes if consumers is not None else []
            for i, p in enumerate(processes):
                if consumers is None or not p.exited_on_its_own:
                    continue
                self.exits.append(Exit(p.suffix, p.returncode, time.monotonic(), p.log_tail(15)))
                try:
                    await asyncio.to_thread(consumers.restart, i)
                except (RuntimeError, TimeoutError) as e:
                    self.exits.append(Exit(p.suffix, p.returncode, time.monotonic(), str(e)))
            await asyncio.sleep(poll_s)

    def close(self) -> None:
        try:
            if self.consumers is not None:
                self.consumers.kill_all()
            super().close()
        finally:
            self.net.close()
