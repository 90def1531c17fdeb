"""The Python side of the native data plane (``gazette.dataplane.Plane``).

The broker's Append, Replicate and Read RPCs, its spools, pipelines, flow control,
pulses and fragment indexes run in the Rust data plane, on its own threads;
this module is what the plane needs of the Python control plane, and it is never on
the path of an acknowledgement:

* :meth:`NativeHost.update_local` tells the plane, after every keyspace update and
  before the topology is published, which journals are assigned here (so that a
  journal resolving here finds its replica);
* :meth:`NativeHost.publish` and :meth:`publish_lease` publish ahead of time what
  an append checks on its way, and :meth:`NativeHost.publish_listing` each store
  listing of a journal (and the ranges it skipped for good) into the index of its
  replica in the plane. That index, fed by the replica's spool, is the journal's:
  reads are served from it, appends check its extent, and ListFragments answers
  from it (:meth:`NativeHost.fragments`), so commits never reach Python;
* the plane's *outbox* is drained when it writes a byte to our pipe: completed
  fragments go to the persister, and *asks* (etcd transactions, store listings,
  fences, URLs to sign) are answered in tasks of their own (see the crate's
  ``bridge``);
* a read of a stored fragment has us read it from its store (the stores and
  their codecs are ours) and hand its decoded chunks to the plane, never more
  than the read's credit ahead of it (:class:`_StoredRead`); a read of a hole
  below the write head has us list the journal's stores now.

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
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Protocol

from gazette import allocator
from gazette.broker import protocol as pb
from gazette.broker.fragment import cover_set, files, index, reader, spool, stores
from gazette.broker.protocol import dial
from gazette.broker.server import config, errors, metrics

if TYPE_CHECKING:
    from gazette.dataplane import Plane, SpoolHandle

log = logging.getLogger(__name__)

# How often the lease and store health are published while nothing else tells.
PUBLISH_INTERVAL = 0.2
# Bytes of a stored fragment read at a time for a read of the plane: its ReadResponses'
# content size (READ_CHUNK_SIZE of the crate's read.rs), so a chunk goes out whole.
READ_CHUNK_SIZE = 1 << 18
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

    def spool_complete(self, sp: spool.Spool, primary: bool, *, held: bool = False) -> None: ...
    def list_now(self, journal: str) -> None:
        """List the journal's stores now (a read found a hole below its write head)."""
        ...

    async def answer_ask(
        self, kind: str, journal: str, a: int, b: int, extra: Any
    ) -> int | str | None:
        """Python's answer to an ask of the plane (see the crate's ``bridge.Ask``)."""
        ...


class _NoObserver:
    """Completed copies handed to the persister observe nothing."""

    def spool_commit(self, fragment: cover_set.Fragment) -> None:
        pass

    def spool_complete(self, sp: spool.Spool, primary: bool) -> None:
        pass


_NO_OBSERVER = _NoObserver()


class _StoredRead:
    """A stored fragment a read of the plane wants: how many chunks may go before
    the read takes one (``credit``), and the task that reads them from the store."""

    def __init__(self, credit: int) -> None:
        self.credit = credit
        self.more = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    def grant(self) -> None:
        self.credit += 1
        self.more.set()

    async def spend(self) -> None:
        """Wait for credit, and take one."""
        while self.credit == 0:
            self.more.clear()
            await self.more.wait()
        self.credit -= 1


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
        self._asks: set[asyncio.Task[None]] = set()
        self._stored: dict[int, _StoredRead] = {}
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
        self._stored.clear()
        for fd in (self._read_fd, self._write_fd):
            with contextlib.suppress(OSError):
                os.close(fd)

    # -- Publishing ---------------------------------------------------------------------

    def update_local(self, state: allocator.State) -> None:
        self.plane.update_local(local_assignments(state))

    def publish_listing(self, journal: str, idx: index.Index) -> None:
        """A store listing was applied to ``idx``: the plane's index of the journal
        takes it too, after the ranges the journal skipped for good (a listing
        applied after them lets reads jump them)."""
        listing = [f.spec.SerializeToString() for f in idx.listed_remote()]
        try:
            if idx.skipped:
                self.plane.mark_skipped(journal, list(idx.skipped))
            self.plane.replace_stored(journal, listing)
        except ValueError:  # A listing the plane refuses must not stop the refreshes.
            log.exception("journal %s: the data plane refused its store listing", journal)

    def fragments(self, journal: str) -> list[cover_set.Fragment] | None:
        """Every fragment of the journal's index in the plane, local and stored, in
        offset order (None: no replica of it here)."""
        specs = self.plane.fragments(journal)
        if specs is None:
            return None
        return [cover_set.Fragment(pb.Fragment.FromString(spec)) for spec in specs]

    def publish_lease(self, valid_for: float | None, cut_off: str | None) -> None:
        self.plane.set_lease(valid_for, cut_off)

    async def publish(self) -> None:
        """Keep the lease and the served stores' health current in the plane, and the
        write-head gauges of our primaries current from it."""
        heads: set[str] = set()
        while True:
            self.host.publish_lease()
            for url in self.host.served_stores():
                _, err = self.host.registry.get(url).health_status()
                self.plane.set_store_health(url, None if err is None else str(err))
            heads = self._gauge_write_heads(heads)
            await asyncio.sleep(PUBLISH_INTERVAL)

    def _gauge_write_heads(self, before: set[str]) -> set[str]:
        """Set ``gazette_write_head`` of each journal we are primary of (as Gazette's
        primaries do), dropping those we no longer are; returns the journals set."""
        now = set()
        for journal, head in self.plane.write_heads():
            metrics.write_head.labels(journal).set(head)
            now.add(journal)
        for journal in before - now:
            with contextlib.suppress(KeyError):
                metrics.write_head.remove(journal)
        return now

    # -- The outbox ---------------------------------------------------------------------

    def _on_wake(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            while os.read(self._read_fd, 4096):
                pass
        if self._closed:
            return
        for event in self.plane.drain():
            kind = event[0]
            try:
                if kind == "complete":
                    self._complete(*event[1:])
                elif kind == "read_credit":
                    reading = self._stored.get(event[1])
                    if reading is not None:
                        reading.grant()
                elif kind == "read_cancel":
                    reading = self._stored.pop(event[1], None)
                    if reading is not None and reading.task is not None:
                        reading.task.cancel()
                elif kind == "read_stored":
                    self._read_stored(event[1], event[2], event[3], event[4], event[5])
                elif kind == "list_now":
                    self.host.list_now(event[1])
                else:
                    self._ask(event[1], event[2], event[3], event[4], event[5], event[6])
            except Exception:  # One bad event must not stop the others.
                log.exception("data plane event %s of %s failed", kind, event[1])

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
        self.host.spool_complete(sp, at_once, held=held)

    def _ask(self, id: int, kind: str, journal: str, a: int, b: int, extra: Any) -> None:
        self._spawn(self._answer(id, kind, journal, a, b, extra), f"{kind} {journal}")

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._asks.add(task)  # Cancelled on close.
        task.add_done_callback(self._asks.discard)
        return task

    def _read_stored(self, id: int, journal: str, spec: bytes, offset: int, credit: int) -> None:
        reading = _StoredRead(credit)
        self._stored[id] = reading
        fragment = pb.Fragment.FromString(spec)
        reading.task = self._spawn(
            self._send_stored(id, fragment, offset, reading), f"stored read of {journal}"
        )

    async def _send_stored(
        self, id: int, fragment: pb.Fragment, offset: int, reading: _StoredRead
    ) -> None:
        """Read ``fragment`` from its store from ``offset`` on, into stored read ``id``.

        The next chunk is read while the plane sends the ones it has, and handed
        over once the read has credit for it.
        """
        chunks = reader.read_fragment(
            self.host.registry, fragment, offset, block_size=READ_CHUNK_SIZE
        )
        try:
            async for chunk in chunks:
                await reading.spend()
                if self._closed or not self.plane.stored_chunk(id, chunk):
                    return  # The read is over: its client went, or it has enough.
        except Exception as e:  # noqa: BLE001  # the read fails with it, as Python's would
            if not self._closed:
                self.plane.stored_end(id, errors.grpc_status_of(e)[1])
            return
        finally:
            self._stored.pop(id, None)
            # Lets go of the store's object now, not when the generator is collected.
            aclose = getattr(chunks, "aclose", None)
            if aclose is not None:
                await aclose()
        if not self._closed:
            self.plane.stored_end(id)

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
        if self._closed:
            return
        if isinstance(value, str):
            self.plane.answer(id, text=value)
        else:
            self.plane.answer(id, value)
