"""An in-process broker cluster: N brokers serving in the caller's event loop.

Gazette's ``brokertest`` idea: each broker is :func:`gazette.broker.server.process.serve`
run as a task of the test's own loop, against a real etcd (for instance
:class:`gazette.keyspace.testing.EtcdServer`), on 127.0.0.1 with ports of its
own and a shared ``file://`` root. Nothing is forked, so a test starts a
cluster in a fraction of a second, sees every broker's logs in its own
output, and can stop a broker gracefully (its ``stop`` event) or abruptly
(its task cancelled: no drain and no persisting).
Subprocess clusters (:class:`gazette.broker.testing.BrokerCluster`) remain the
tool for real process faults (SIGKILL, SIGSTOP). The request helpers of
:mod:`gazette.broker.testing` (``apply_specs``, ``append``, ``read``) work with both.

Usage::

    from gazette.broker import testing
    from gazette.broker.server import testing as server_testing

    async with server_testing.InProcessCluster(etcd.endpoint, work_dir=tmp_path) as cluster:
        async with cluster.channel(0) as ch:
            stub = pb2_grpc.JournalStub(ch)
            await testing.apply_specs(stub, testing.journal_spec("a/j", stores=[cluster.store_url]))
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import pathlib
import uuid
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import Any

import grpc

from gazette.broker import client
from gazette.broker import protocol as pb
from gazette.broker.protocol import dial
from gazette.broker.server import config, process
from gazette.keyspace import testing as ks_testing

_MAX_MESSAGE = 64 << 20


@dataclasses.dataclass
class InProcessBroker:
    """One broker of an :class:`InProcessCluster`."""

    zone: str
    suffix: str
    args: list[str]
    spool_dir: pathlib.Path
    task: asyncio.Task[None] | None = None
    stop_event: asyncio.Event | None = None
    serving: process.Serving | None = None

    @property
    def id(self) -> pb.ProcessSpec.ID:
        return pb.ProcessSpec.ID(zone=self.zone, suffix=self.suffix)

    @property
    def endpoint(self) -> str:
        assert self.serving is not None, "broker not started"
        return self.serving.endpoint

    @property
    def alive(self) -> bool:
        return self.task is not None and not self.task.done()

    async def start(self, within: float = 60.0) -> None:
        if self.alive:
            raise RuntimeError(f"broker {self.suffix} is already running")
        self.spool_dir.mkdir(parents=True, exist_ok=True)
        loop = asyncio.get_running_loop()
        started: asyncio.Future[process.Serving] = loop.create_future()
        self.stop_event = asyncio.Event()
        self.task = asyncio.create_task(
            process.serve(config.parse(self.args), stop=self.stop_event, started=started),
            name=f"broker {self.zone}#{self.suffix}",
        )
        waits: set[asyncio.Future[Any]] = {started, self.task}
        done, _ = await asyncio.wait(waits, timeout=within, return_when=asyncio.FIRST_COMPLETED)
        if started in done:
            self.serving = started.result()
            return
        started.cancel()
        if self.task in done:
            self.task.result()  # Raises why it ended.
            raise RuntimeError(f"broker {self.suffix} returned before serving")
        await self.kill()
        raise TimeoutError(f"broker {self.suffix} not serving after {within}s")

    async def stop(self, within: float = 60.0) -> None:
        """Stop gracefully (as on SIGTERM) and wait until it returns."""
        if self.task is None or self.stop_event is None:
            return
        self.stop_event.set()
        async with asyncio.timeout(within):
            await self.task

    async def kill(self) -> None:
        """Cancel the broker's task: no drain and no persisting of its spools."""
        if self.task is not None and not self.task.done():
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task


class InProcessCluster:
    """N brokers in this event loop against one etcd; see the module docstring.

    ``zones`` are dealt round-robin; ``lease`` is ``--etcd.lease``; ``extra_args``
    go to every broker. Each cluster lives under its own etcd prefix (default: a
    fresh one), which is deleted when the cluster exits.
    """

    def __init__(
        self,
        etcd_endpoint: str,
        *,
        work_dir: pathlib.Path,
        brokers: int = 3,
        zones: Sequence[str] = ("zone-a", "zone-b"),
        etcd_prefix: str | None = None,
        lease: str = "3s",
        extra_args: Iterable[str] = (),
    ) -> None:
        self.etcd_endpoint = etcd_endpoint
        self.etcd_prefix = etcd_prefix or f"/gazette/inproc-{uuid.uuid4().hex[:8]}"
        self.file_root = work_dir / "fragments"
        self.file_root.mkdir(parents=True, exist_ok=True)
        self.brokers: list[InProcessBroker] = []
        for i in range(brokers):
            zone, suffix = zones[i % len(zones)], f"broker-{i:02d}"
            spool = work_dir / suffix / "spool"
            args = [
                "--broker.zone", zone,
                "--broker.id", suffix,
                "--broker.host", "127.0.0.1",
                "--broker.port", "0",
                "--broker.http-port", "0",
                "--broker.file-root", str(self.file_root),
                "--broker.spool-dir", str(spool),
                "--broker.max-grpc-recv-size", str(_MAX_MESSAGE),
                "--etcd.address", etcd_endpoint,
                "--etcd.prefix", self.etcd_prefix,
                "--etcd.lease", lease,
                *extra_args,
            ]  # fmt: skip
            self.brokers.append(InProcessBroker(zone, suffix, args, spool))

    @property
    def store_url(self) -> str:
        """A ``file://`` fragment store under the cluster's shared root."""
        return "file:///"

    def __len__(self) -> int:
        return len(self.brokers)

    def __getitem__(self, i: int) -> InProcessBroker:
        return self.brokers[i]

    async def __aenter__(self) -> InProcessCluster:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def start(self) -> None:
        for b in self.brokers:
            await b.start()

    async def close(self) -> None:
        """Kill every broker and delete the cluster's keys."""
        for b in self.brokers:
            await b.kill()
        await asyncio.to_thread(ks_testing.wipe_prefix, self.etcd_endpoint, self.etcd_prefix + "/")

    async def apply(self, *specs: pb.JournalSpec) -> None:
        """Create (or update) the journals of ``specs`` through broker 0."""
        async with client.JournalClient(client.ClientConfig(address=self[0].endpoint)) as jc:
            await client.apply_journals(
                jc, pb.ApplyRequest(changes=[pb.ApplyRequest.Change(upsert=s) for s in specs])
            )

    def channel(self, i: int = 0) -> grpc.aio.Channel:
        """A channel to broker ``i`` (use as ``async with``)."""
        return dial.channel(
            self.brokers[i].endpoint, dial.DialConfig(max_message_size=_MAX_MESSAGE)
        )
