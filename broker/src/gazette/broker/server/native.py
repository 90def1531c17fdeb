"""The Python side of the native data plane (``gazette.dataplane.Plane``).

The broker's Append and Replicate RPCs, its spools, pipelines, flow control and
pulses run in the Rust data plane, on its own threads;
this module is what the plane needs of the Python control plane, and it is never on
the path of an acknowledgement:

* :meth:`NativeHost.update_local` tells the plane, after every keyspace update and
  before the topology is published, which journals are assigned here (so that a
  journal resolving here finds its replica);
* :meth:`NativeHost.publish_index`, :meth:`publish_store_health` and
  :meth:`publish_lease` publish ahead of time what an append checks on its way;
* the plane's *outbox* is drained when it writes a byte to our pipe: spool commits
  go to the journal's fragment index (reads are served from it), completed
  fragments to the persister, and *asks* (etcd transactions, store listings,
  fences) are answered in tasks of their own (see the crate's ``bridge``).

Spool files stay the plane's: Python reads and uploads them through descriptors of
its own (``SpoolHandle.dup``), and removes a recoverable file's names once it is
stored, as it does for its own spools.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from gazette import allocator
from gazette.broker import protocol as pb
from gazette.broker.fragment import cover_set, files, index, spool, stores
from gazette.broker.protocol import dial
from gazette.broker.server import config, metrics

if TYPE_CHECKING:
    from gazette.dataplane import Plane, SpoolHandle

log = logging.getLogger(__name__)

# How often the lease and store health are published while nothing else tells.
PUBLISH_INTERVAL = 0.2
# How long the plane's replicas get on shutdown to close their pipelines and hand
# their last fragments to the persister.
STOP_TIMEOUT = 20.0


class Host(Protocol):
    """What the host needs of the broker's Service."""

    registry: stores.StoreRegistry

    def publish_lease(self) -> None:
        """Tell the plane how long the broker's lease is surely valid."""
        ...

    def served_stores(self) -> set[str]:
        """The primary stores of the journals served here (appends check their health)."""
        ...

    def local_index(self, journal: str) -> index.Index | None: ...
    def primary_here(self, journal: str) -> bool:
        """Whether this broker is the journal's primary (its gauges are the primary's)."""
        ...

    def spool_complete(self, sp: spool.Spool, primary: bool, *, held: bool = False) -> None: ...
    async def answer_ask(self, kind: str, journal: str, a: int, b: int, extra: Any) -> int | None:
        """Python's answer to an ask of the plane (see the crate's ``bridge.Ask``)."""
        ...


class _NoObserver:
    """Completed copies handed to the persister observe nothing."""

    def spool_commit(self, fragment: cover_set.Fragment) -> None:
        pass

    def spool_complete(self, sp: spool.Spool, primary: bool) -> None:
        pass


_NO_OBSERVER = _NoObserver()


def local_assignments(
    state: allocator.State,
) -> list[tuple[str, bool, int, int, list[tuple[str, str]]]]:
    """The journals assigned to this broker, as ``Plane.update_local`` takes them.

    The same rules as :class:`~gazette.broker.server.replica.ReplicaSet`: the
    first local item of a journal counts; slot 0 is the primary.
    """
    out = []
    seen: set[str] = set()
    for li in state.local_items:
        name = li.item.decoded.id
        if name in seen:
            continue
        seen.add(name)
        members = [(kv.decoded.member_zone, kv.decoded.member_suffix) for kv in li.assignments]
        out.append(
            (
                name,
                li.assignment.slot == 0,
                int(li.item.create_revision),
                int(li.assignments[li.index].lease),
                members,
            )
        )
    return out


class NativeHost:
    """Runs a :class:`Plane` for a broker's Service; see the module docstring."""

    @classmethod
    def for_broker(
        cls,
        bcfg: config.BrokerConfig,
        front: dial.NativePort,
        host: Host,
        spool_config: spool.SpoolConfig,
        peer_tls: dial.TLS,
        lease_ttl: int,
    ) -> NativeHost:
        """The native data plane of a broker, serving on ``front``'s threads."""

        def make(wake_fd: int) -> Plane:
            return front.plane(
                wake_fd,
                spool_dir=spool_config.directory,
                recoverable=spool_config.recoverable,
                sync=spool_config.sync,
                write_timeout=spool_config.write_timeout,
                max_append_rate=bcfg.max_append_rate,
                min_append_rate=bcfg.min_append_rate,
                max_replication=bcfg.max_replication,
                max_message_size=bcfg.max_grpc_recv_size,
                # A gap must outlast any earlier member's lease (see head_gap).
                recovery_delay=lease_ttl + 2.0,
                resume_head_gaps=bcfg.resume_head_gaps,
                auto_suspend=bcfg.auto_suspend,
                peer_ca_file=peer_tls.ca_file or None,
                peer_cert_file=peer_tls.cert_file or None,
                peer_key_file=peer_tls.key_file or None,
            )

        return cls(make, host, spool_config)

    def __init__(
        self,
        make_plane: Callable[[int], Plane],
        host: Host,
        spool_config: spool.SpoolConfig,
    ) -> None:
        self.host = host
        self.spool_config = spool_config
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._read_fd, False)
        os.set_blocking(self._write_fd, False)
        self.plane = make_plane(self._write_fd)
        # The file of each journal's latest commit: (serial, our descriptor of it).
        self._files: dict[str, tuple[int, files.SpoolFile]] = {}
        self._asks: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    # -- Lifetime -----------------------------------------------------------------------

    def start(self) -> None:
        """Drain the outbox on this event loop from now on, and serve natively."""
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self._read_fd, self._on_wake)
        self.plane.serve()

    async def stop(self, within: float) -> None:
        """Stop every replica (their last fragments reach the persister), then close."""
        await asyncio.to_thread(self.plane.stop, within)
        self._on_wake()  # What the replicas handed over as they stopped.
        self.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.plane.close()
        if self._loop is not None:
            self._loop.remove_reader(self._read_fd)
        for task in self._asks:
            task.cancel()
        for fd in (self._read_fd, self._write_fd):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._files.clear()

    # -- Publishing ---------------------------------------------------------------------

    def update_local(self, state: allocator.State) -> None:
        self.plane.update_local(local_assignments(state))

    def publish_index(self, journal: str, idx: index.Index) -> None:
        begin, end, mod_time = idx.summary()
        self.plane.set_index(journal, idx.first_refresh_done, begin, end, mod_time)

    def publish_lease(self, valid_for: float | None, cut_off: str | None) -> None:
        self.plane.set_lease(valid_for, cut_off)

    async def publish(self) -> None:
        """Keep the lease and the served stores' health current in the plane."""
        while True:
            self.host.publish_lease()
            for url in self.host.served_stores():
                _, err = self.host.registry.get(url).health_status()
                self.plane.set_store_health(url, None if err is None else str(err))
            await asyncio.sleep(PUBLISH_INTERVAL)

    # -- The outbox ---------------------------------------------------------------------

    def _on_wake(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            while os.read(self._read_fd, 4096):
                pass
        if self._closed:
            return
        grown: set[str] = set()
        for event in self.plane.drain():
            kind = event[0]
            try:
                if kind == "commit":
                    # (The plane knows its own spools: the index summary it reads
                    # matters for what stores hold, published on listings.)
                    self._commit(event[1], event[2], event[3])
                elif kind == "complete":
                    self._complete(*event[1:])
                    grown.add(event[1])
                else:
                    self._ask(event[1], event[2], event[3], event[4], event[5], event[6])
            except Exception:  # One bad event must not stop the others.
                log.exception("data plane event %s of %s failed", kind, event[1])
        for journal in grown:
            idx = self.host.local_index(journal)
            if idx is not None:
                self.publish_index(journal, idx)

    def _file(self, journal: str, handle: SpoolHandle | None) -> files.SpoolFile | None:
        if handle is None:
            return None
        known = self._files.get(journal)
        if known is not None and known[0] == handle.serial:
            return known[1]
        f = files.SpoolFile(handle.dup())
        self._files[journal] = (handle.serial, f)
        return f

    def _commit(self, journal: str, spec: bytes, handle: SpoolHandle | None) -> None:
        idx = self.host.local_index(journal)
        if idx is None:
            return  # Not (or no longer) ours: its commits don't matter to reads here.
        fragment = pb.Fragment.FromString(spec)
        if self.host.primary_here(journal):
            metrics.write_head.labels(journal).set(fragment.end)
        idx.spool_commit(cover_set.Fragment(fragment, self._file(journal, handle)))

    def _complete(
        self,
        journal: str,
        spec: bytes,
        handle: SpoolHandle | None,
        compressed: SpoolHandle | None,
        compressed_length: int,
        confirmed_end: int,
        continued: bool,
        at_once: bool,
        held: bool,
        registers: bytes,
        first_append_time: float | None,
    ) -> None:
        sp = spool.Spool(journal, _NO_OBSERVER, config=self.spool_config)
        sp.spec = pb.Fragment.FromString(spec)
        if handle is not None:
            # The plane writes the record; we only remove it once the content is stored.
            record = (
                None if handle.record_path is None else files.SpoolRecord.named(handle.record_path)
            )
            sp.file = files.SpoolFile(handle.dup(), handle.path, record)
        if compressed is not None and compressed_length > 0:
            sp.compressed_file = files.SpoolFile(compressed.dup())
            sp.compressed_length = compressed_length
        sp.confirmed_end = confirmed_end
        sp.continued = continued
        sp.registers = pb.LabelSet.FromString(registers)
        if first_append_time is not None:
            sp.first_append_time = datetime.datetime.fromtimestamp(first_append_time, datetime.UTC)
        idx = self.host.local_index(journal)
        if idx is not None and sp.file is not None:
            # Its last commit, if the index missed it (commits coalesce).
            idx.spool_commit(cover_set.Fragment(sp.spec, self._file(journal, handle)))
        self.host.spool_complete(sp, at_once, held=held)

    def _ask(self, id: int, kind: str, journal: str, a: int, b: int, extra: Any) -> None:
        task = asyncio.get_running_loop().create_task(
            self._answer(id, kind, journal, a, b, extra), name=f"{kind} {journal}"
        )
        self._asks.add(task)
        task.add_done_callback(self._asks.discard)

    async def _answer(self, id: int, kind: str, journal: str, a: int, b: int, extra: Any) -> None:
        try:
            value = await self.host.answer_ask(kind, journal, a, b, extra)
        except asyncio.CancelledError:
            self.plane.answer(id, error="the broker is stopping")
            raise
        except Exception as e:  # noqa: BLE001  # the plane's asker gets it as its error
            if not self._closed:
                self.plane.answer(id, error=str(e) or type(e).__name__)
            return
        if not self._closed:
            self.plane.answer(id, value)
