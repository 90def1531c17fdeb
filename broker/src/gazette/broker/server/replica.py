"""Local replicas of assigned journals, as the control plane keeps them.

The native data plane (``broker/dataplane``, see :mod:`gazette.broker.server.native`)
holds each assigned journal's spool, pipeline, flow control, pulse and the
fragment index reads use, after Gazette's ``broker/replica.go``. What the Python
broker keeps of a journal assigned to it is a :class:`Replica`: its store
listings (a :class:`~gazette.broker.fragment.index.Index` of them, which the
plane's index takes on), its acknowledgement fence as primary (see
:mod:`~gazette.broker.server.fences`), and a ``signal`` event set (and
replaced) whenever the journal's assignments or stores change, which wakes
resolutions waiting on it.

One daemon runs per replica while it lives, *refresh*: it lists every store of
the journal now and then every ``fragment.refresh_interval``, replacing the
index's remote fragments and handing the listing to the data plane, and sooner
when asked: the plane's reads of a hole below the write head ask
(:meth:`Replica.list_for_hole`), as do its asks for a fresh listing.

:class:`ReplicaSet` is the KeySpace observer that creates and stops replicas
from the allocator state's local items, in its own TaskGroup, with the same
rules as the data plane's replica set.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from gazette import allocator
from gazette.broker import protocol as pb
from gazette.broker.fragment import errors as frag_errors
from gazette.broker.fragment import index, stores
from gazette.broker.server import fences

log = logging.getLogger(__name__)


class ReplicaHost(Protocol):
    """What a replica needs of its broker (implemented by the Service)."""

    registry: stores.StoreRegistry

    def lookup_spec(self, journal: str) -> pb.JournalSpec | None: ...

    def new_fence(self, journal: str) -> fences.JournalFence | None:
        """The acknowledgement fence a primary of ``journal`` keeps (None: none is kept)."""
        ...

    async def skipped_ranges(self, journal: str) -> tuple[tuple[int, int], ...]:
        """Offset ranges ``journal`` skipped for good (recorded with its fence)."""
        ...

    def index_changed(self, replica: Replica) -> None:
        """A store listing was applied to the replica's index: the data plane
        takes it (its own index serves reads) and the summary its appends check."""
        ...


class Replica:
    """Runtime state of one locally assigned journal; see the module docstring."""

    def __init__(
        self,
        journal: str,
        host: ReplicaHost,
        *,
        primary: bool,
        create_revision: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.journal = journal
        self.host = host
        self.primary = primary
        self.create_revision = create_revision
        # The etcd lease of our assignment when this replica was made (ReplicaSet).
        self.lease = 0
        # Store listings only: the plane's index of the journal takes each one
        # (ReplicaHost.index_changed); reads and ListFragments use the plane's.
        self.index = index.Index()
        self._fence: fences.JournalFence | None = None
        self.signal = asyncio.Event()
        # What the last invalidation was computed from.
        self.assignment_revisions: tuple[tuple[str, int], ...] = ()
        self.stores: tuple[str, ...] = ()
        self._clock = clock
        self._stopping = asyncio.Event()
        self._refresh_now = asyncio.Event()
        # Monotonic time at which the newest applied store listing was started.
        self.listed_at = -1.0
        self._skipped_lookup: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"Replica({self.journal}, primary={self.primary})"

    # -- Signals ------------------------------------------------------------------------

    def invalidate(self) -> None:
        """Wake everything that resolved against the previous assignments."""
        if self._stopping.is_set():
            return  # The final signal stays set.
        signal, self.signal = self.signal, asyncio.Event()
        signal.set()

    @property
    def fence(self) -> fences.JournalFence | None:
        """As primary, the acknowledgement fence of the journal (made on first use)."""
        if self._fence is None and self.primary:
            self._fence = self.host.new_fence(self.journal)
        return self._fence

    def stop(self) -> None:
        """Begin shutdown; resolutions waiting on the signal wake and resolve again."""
        if not self._stopping.is_set():
            log.info("stopping local journal replica %s (primary %s)", self.journal, self.primary)
            self._stopping.set()
            self.signal.set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def refresh_now(self) -> None:
        """List the journal's stores now rather than at the next refresh interval."""
        self._refresh_now.set()

    def list_for_hole(self) -> None:
        """A read the data plane serves found a hole below the write head (the plane
        backs off between such asks): list the stores now; its index takes the listing."""
        self.refresh_now()
        # The hole may be a range the journal skipped for good: ask etcd as well.
        if self._skipped_lookup is None or self._skipped_lookup.done():
            self._skipped_lookup = asyncio.get_running_loop().create_task(
                self._look_up_skipped(), name=f"skipped ranges of {self.journal}"
            )

    async def _look_up_skipped(self) -> None:
        try:
            self.learn_skipped(await self.host.skipped_ranges(self.journal))
        except Exception as e:  # noqa: BLE001  # the next hole asks again
            log.warning("journal %s: skipped ranges not read: %s", self.journal, e)

    def learn_skipped(self, ranges: Sequence[tuple[int, int]]) -> None:
        """The journal skipped ``ranges`` for good: reads jump them, after a fresh listing."""
        self.index.mark_skipped(ranges)
        self.refresh_now()

    # -- Lifetime -----------------------------------------------------------------------

    def clock(self) -> float:
        """The replica's monotonic clock (``listed_at`` is in its seconds)."""
        return self._clock()

    async def serve(self) -> None:
        """Run the refresh daemon until :meth:`stop`, then close the index."""
        log.info("starting local journal replica %s (primary %s)", self.journal, self.primary)
        async with asyncio.TaskGroup() as tg:
            refresh = tg.create_task(self._refresh_daemon(), name=f"refresh {self.journal}")
            await self._stopping.wait()
            refresh.cancel()
        self.index.close()

    async def _refresh_daemon(self) -> None:
        while True:
            spec = self.host.lookup_spec(self.journal)
            if spec is None:
                log.warning("stopped refreshing fragments of %s (JournalSpec gone)", self.journal)
                return
            self._refresh_now.clear()
            started = self._clock()
            try:
                listing = await index.walk_all_stores(
                    self.host.registry, spec.name, list(spec.fragment.stores)
                )
            except (frag_errors.FragmentError, OSError) as e:
                log.warning("failed to refresh fragments of %s (will retry): %s", self.journal, e)
            else:
                self.index.replace_remote(listing)
                self.listed_at = started
                self.host.index_changed(self)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(
                    max(1.0, pb.duration_seconds(spec.fragment.refresh_interval))
                ):
                    await self._refresh_now.wait()


ReplicaFactory = Callable[[str, bool, int], Replica]
"""Builds a replica of (journal, primary, item create revision)."""


class ReplicaSet:
    """Keeps one :class:`Replica` per locally assigned journal (a KeySpace observer)."""

    def __init__(self, observed: allocator.ObservedState, factory: ReplicaFactory) -> None:
        self.observed = observed
        self._factory = factory
        self._replicas: dict[str, Replica] = {}
        self._tg: asyncio.TaskGroup | None = None
        self._stopped = False
        self._done = asyncio.Event()

    def get(self, journal: str) -> Replica | None:
        return None if self._stopped else self._replicas.get(journal)

    def __len__(self) -> int:
        return len(self._replicas)

    def all(self) -> list[Replica]:
        return list(self._replicas.values())

    async def run(self) -> None:
        """Serve replicas until :meth:`stop_all`; returns once every replica shut down."""
        async with asyncio.TaskGroup() as tg:
            self._tg = tg
            self.update()
            self.observed.ks.add_observer(self.update)
            await self._done.wait()
        self._tg = None

    def update(self) -> None:
        """Reconcile replicas with the current local items (runs on every KeySpace update)."""
        if self._stopped or self._tg is None:
            return
        state = self.observed.state
        nxt: dict[str, Replica] = {}
        for li in state.local_items:
            item: allocator.Item = li.item.decoded
            spec: pb.JournalSpec = item.spec
            name = item.id
            if name in nxt:
                continue
            primary = li.assignment.slot == 0
            lease = li.assignments[li.index].lease
            rep = self._replicas.get(name)
            # A fresh replica when newly assigned, when demoted from primary, when the
            # journal was deleted and re-created (possibly within one batch of events),
            # or when our assignment is under another lease: this broker lost its lease
            # and announced again, and what its spool holds from before may be a tail
            # the journal did not keep (the old replica releases it on stopping).
            if (
                rep is None
                or (not primary and rep.primary)
                or rep.create_revision != li.item.create_revision
                or rep.lease != lease
            ):
                rep = self._factory(name, primary, li.item.create_revision)
                rep.lease = lease
                self._tg.create_task(rep.serve(), name=f"replica {name}")
                # A previous replica of the name stays in self._replicas and is stopped below.
            else:
                del self._replicas[name]
                rep.primary = primary
            nxt[name] = rep

            revisions = tuple((kv.key, kv.mod_revision) for kv in li.assignments)
            stores_ = tuple(spec.fragment.stores)
            if revisions != rep.assignment_revisions or stores_ != rep.stores:
                rep.assignment_revisions, rep.stores = revisions, stores_
                rep.invalidate()

        prev, self._replicas = self._replicas, nxt
        for rep in prev.values():
            rep.stop()

    def stop_all(self) -> None:
        """Stop every replica, and create none from now on."""
        self._stopped = True
        for rep in self._replicas.values():
            rep.stop()
        self._replicas = {}
        self._done.set()
