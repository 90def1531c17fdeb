"""Local replicas of assigned journals (Gazette ``broker/replica.go``, ``resolver.go``).

A :class:`Replica` is this broker's runtime state of one journal assigned to
it: the fragment :class:`~gazette.broker.fragment.index.Index`, an exclusive
*spool slot* (the :class:`~gazette.broker.fragment.spool.Spool`, owned by one
Append pipeline or one Replicate stream at a time), an exclusive *pipeline
slot* (one appender sends at a time), the journal's flow-control state, and a
``signal`` event set (and replaced) whenever the journal's assignments or
stores change, which wakes RPCs waiting on the slots so they re-resolve.

Two daemons run per replica while it lives:

* *refresh*: lists every store of the journal now and then every
  ``fragment.refresh_interval``, replacing the index's remote fragments, and
  sooner when asked: a read of a hole below the write head asks (see
  :meth:`Replica._on_hole`), as does a head gap;
* *pulse*: a zero-byte append through the append FSM right away, after every
  route change and every minute. Only the primary gets past resolution; its
  pulse builds the pipeline and writes the Route into the assignment values,
  which is what lets the allocator see the journal as consistent;
* *flush*: on request (:meth:`Replica.request_flush`: a Replicate stream from
  the primary broke, the route changed, the broker's lease is in doubt), rolls
  the spool to an empty fragment at its end as soon as no pipeline holds it,
  which hands the committed content to the persister at once instead of
  leaving it in this broker's memory until the next roll.

A journal whose spool is behind the end of its persisted fragments (every
broker that held its unpersisted tail is gone) may resume at that end, once
:meth:`Replica.head_recovery_ready` says it is safe; see there.

On shutdown (the assignment went away, or the broker stops) the replica
closes its pipeline, rolls its spool to an empty fragment at its end, which
hands the last fragment to the persister, and closes its index.

:class:`ReplicaSet` is the KeySpace observer that creates and stops replicas
from the allocator state's local items, in its own TaskGroup.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

from gazette import allocator, task
from gazette.broker import protocol as pb
from gazette.broker.fragment import cover_set, index, spool, stores
from gazette.broker.fragment import errors as frag_errors
from gazette.broker.server import errors, fences, flow_control, metrics, pipeline

log = logging.getLogger(__name__)

PULSE_INTERVAL = 60.0  # Gazette's healthCheckInterval.
AUTO_SUSPEND_STABLE_TICKS = 15
SHUTDOWN_PIPELINE_TIMEOUT = 10.0
# How long a head gap must have been seen before the journal resumes past it.
DEFAULT_RECOVERY_DELAY = 20.0
# How long a journal must be quiet after an answered append before its replicas are
# told that the append is confirmed (see Replica._confirm_daemon).
CONFIRM_DELAY = 0.02
# The first back-off between store listings asked for by reads of one hole.
HOLE_LISTING_BACKOFF = 0.5
# How long a held tail that the route went on from without this broker's word
# waits before a store listing decides it (settle_held): time enough for the
# members that did confirm that range to store it (the persister's replica delay
# is 2 s).
DOUBT_DELAY = 5.0


class ReplicaHost(Protocol):
    """What a replica needs of its broker (implemented by the Service)."""

    registry: stores.StoreRegistry

    def lookup_spec(self, journal: str) -> pb.JournalSpec | None: ...

    def spool_complete(self, sp: spool.Spool, primary: bool, *, held: bool = False) -> None: ...

    async def pulse(self, replica: Replica, stable_ticks: int) -> asyncio.Event | None:
        """Run one pulse; returns the event signalling the next route change, if known."""
        ...

    async def checkpoint_head(self, replica: Replica, offset: int) -> None:
        """Record that the journal goes on at ``offset`` (a primary stopping)."""
        ...

    def new_fence(self, journal: str) -> fences.JournalFence | None:
        """The acknowledgement fence a primary of ``journal`` keeps (None: none is kept)."""
        ...

    async def skipped_ranges(self, journal: str) -> tuple[tuple[int, int], ...]:
        """Offset ranges ``journal`` skipped for good (recorded with its fence)."""
        ...

    def index_changed(self, replica: Replica) -> None:
        """A store listing was applied to a native replica's index: the data plane
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
        spool_config: spool.SpoolConfig | None = None,
        pulse_interval: float = PULSE_INTERVAL,
        recovery_delay: float = DEFAULT_RECOVERY_DELAY,
        resume_head_gaps: bool = True,
        clock: Callable[[], float] = time.monotonic,
        native: bool = False,
    ) -> None:
        self.journal = journal
        self.host = host
        # The native data plane holds the spool, the index reads are served from, and
        # runs the daemons but refresh; this replica lists the stores into an index of
        # listings alone, which the plane's index takes on (see server.native).
        self.native = native
        self.primary = primary
        self.create_revision = create_revision
        # The etcd lease of our assignment when this replica was made (ReplicaSet).
        self.lease = 0
        self.pulse_interval = pulse_interval
        self.index = index.Index(signer=host.registry.sign_get_url, on_hole=self._on_hole)
        self.spool_slot: asyncio.Queue[spool.Spool] = asyncio.Queue(1)
        self.spool_slot.put_nowait(
            spool.Spool(journal, self, config=spool_config or spool.SpoolConfig())
        )
        self.pipeline_slot: asyncio.Queue[pipeline.Pipeline | None] = asyncio.Queue(1)
        self.pipeline_slot.put_nowait(None)
        # The pipeline built last (idle in pipeline_slot or held by an append).
        self.pipeline: pipeline.Pipeline | None = None
        self._fence: fences.JournalFence | None = None
        self.flow = flow_control.FlowState()
        self.signal = asyncio.Event()
        # What the last invalidation was computed from.
        self.assignment_revisions: tuple[tuple[str, int], ...] = ()
        self.stores: tuple[str, ...] = ()
        self.recovery_delay = recovery_delay
        self.resume_head_gaps = resume_head_gaps
        self._clock = clock
        self._stopping = asyncio.Event()
        self._flush = asyncio.Event()
        self._confirm = asyncio.Event()
        # >0 while spools completed now are stored at once (see storing_at_once).
        self._store_at_once = 0
        # Completed spools with content no route has confirmed (see spool_complete).
        self._held: list[spool.Spool] = []
        # Held spools waiting for a store listing to decide them (_decide_doubtful).
        self._doubtful: dict[spool.Spool, asyncio.Task[None]] = {}
        self._refresh_now = asyncio.Event()
        # Monotonic time at which the newest applied store listing was started.
        self.listed_at = -1.0
        # A head gap seen by the primary: ((spool end, index end), first seen at).
        self._head_gap: tuple[tuple[int, int], float] | None = None
        self._skipped_lookup: asyncio.Task[None] | None = None
        # A head gap refused until reset (refuse_head_gap): (spool end, index end).
        self._refused: tuple[int, int] | None = None
        # Listings asked for by reads of a hole below the write head: where the hole
        # ends, the back-off before the next such listing, and when it may start.
        self._hole: tuple[int, float, float] | None = None

    def __repr__(self) -> str:
        return f"Replica({self.journal}, primary={self.primary})"

    # -- SpoolObserver ------------------------------------------------------------------

    def spool_commit(self, fragment: cover_set.Fragment) -> None:
        self.index.spool_commit(fragment)

    def spool_complete(self, sp: spool.Spool, primary: bool) -> None:
        at_once = primary or self._store_at_once > 0
        if sp.confirmed or not sp.continued:
            # All of it is the journal's; or it was rolled past (the journal went on
            # from a later offset), so its unconfirmed tail never will be.
            self.host.spool_complete(sp, at_once)
            return
        # Its tail was committed here but no route has confirmed it yet. The route
        # may still go on from its end (adopt_held), or it may not: keep it until a
        # synchronised pipeline tells (settle_held); store the confirmed part now.
        log.info(
            "journal %s: holding [%d, %d) until its route confirms it",
            self.journal,
            sp.confirmed_end,
            sp.end,
        )
        self._held.append(sp)
        self.host.spool_complete(sp, at_once, held=True)

    def settle_held(self, head: int, *, adopt: bool) -> None:
        """A pipeline synchronised at ``head``: decide the spools held back.

        Held spools that chain back from ``head`` are content the route went on
        from. With ``adopt``, it went on from ours (we are its primary, or told
        the primary our end): they are the journal's and stored whole. Without,
        the primary had that end from elsewhere: from another holder of the same
        content (the chaos suite's sigkill-rapid: a member that rolled to our
        reported end under an earlier primary, then became primary), or from
        other content that happens to end at the same offset. A store listing
        tells them apart after DOUBT_DELAY (_decide_doubtful): a range nobody
        stored is ours to store, or the journal keeps a hole that stalls every
        reader. Every other held spool can no longer become the journal's: its
        confirmed part is stored and the rest quarantined.
        """
        if not self._held:
            return
        held, self._held = self._held, []
        for sp in reversed(held):
            if sp.end != head:  # (release_held's head, -1, is no spool's end.)
                self.host.spool_complete(sp, True)
                continue
            head = sp.begin
            if adopt:
                self._adopt(sp, "confirmed by a synchronised pipeline")
                continue
            log.info(
                "journal %s: the route went on from the end of held [%d, %d) without"
                " this broker's word; it is stored in %.0fs unless a store holds it by then",
                self.journal,
                sp.confirmed_end,
                sp.end,
                DOUBT_DELAY,
            )
            self._doubtful[sp] = asyncio.get_running_loop().create_task(
                self._decide_doubtful(sp), name=f"held tail of {self.journal}"
            )

    def _adopt(self, sp: spool.Spool, why: str) -> None:
        log.info("journal %s: [%d, %d) %s", self.journal, sp.begin, sp.end, why)
        sp.confirmed_end = sp.end
        sp.post_confirmed()  # A crash before it is stored must not quarantine it.
        self.host.spool_complete(sp, True)

    async def _decide_doubtful(self, sp: spool.Spool) -> None:
        """Store held ``sp`` whole unless a fresh store listing covers its tail."""
        await asyncio.sleep(DOUBT_DELAY)
        asked = self._clock()
        self.refresh_now()
        while self.listed_at < asked:  # A store outage keeps it held, never lost.
            await self.index.next_listing()
            if self.stopping:
                return  # release_held decides it.
        del self._doubtful[sp]
        if self.index.stored_covers(max(sp.begin, sp.confirmed_end), sp.end):
            log.warning(
                "journal %s: [%d, %d) held here is stored from another member; this copy is not",
                self.journal,
                sp.confirmed_end,
                sp.end,
            )
            self.host.spool_complete(sp, True)
        else:
            self._adopt(sp, "is stored: the route went on from its end and no store held it")

    def release_held(self) -> None:
        """This replica's route is over: nothing held back can become the journal's."""
        self.settle_held(-1, adopt=False)
        for sp, decide in list(self._doubtful.items()):
            decide.cancel()
            self.host.spool_complete(sp, True)
        self._doubtful.clear()

    @contextlib.contextmanager
    def storing_at_once(self) -> Iterator[None]:
        """Within, a replica's completed spool is stored at once, as a primary's is.

        For rolls that happen because other holders of the content may be
        failing: a flush, and a pipeline's synchronisation. The latter may roll
        this replica past a block that only some members committed (an append
        that was never acknowledged); if this replica is one of them and dies
        within the persister's replica delay, the block is gone and the journal
        has a hole that stalls every reader (test_broker_faults' SIGKILL runs).
        """
        self._store_at_once += 1
        try:
            yield
        finally:
            self._store_at_once -= 1

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

    def route_members(self, members: set[tuple[str, str]]) -> None:
        """The journal's route is now of ``members`` ((zone, suffix) pairs).

        A peer of the pipeline that left the route is no longer waited on: the
        appends behind it fail now rather than at the pipeline's timeout (a
        member cut off by a partition neither answers nor fails), and the next
        append builds a pipeline over the new route.
        """
        pln = self.pipeline
        if pln is None:
            return
        gone = [f"{m.zone}/{m.suffix}" for m in pln.members if (m.zone, m.suffix) not in members]
        if gone:
            pln.interrupt(f"{', '.join(gone)} left the route of {self.journal}")

    def stop(self) -> None:
        """Begin shutdown; waiters on the slots wake and re-resolve (elsewhere)."""
        if not self._stopping.is_set():
            log.info("stopping local journal replica %s (primary %s)", self.journal, self.primary)
            self._stopping.set()
            self.signal.set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def request_flush(self) -> None:
        """Roll the spool and hand its committed content to the persister, soon."""
        self._flush.set()

    def refresh_now(self) -> None:
        """List the journal's stores now rather than at the next refresh interval."""
        self._refresh_now.set()

    async def return_spool(self, sp: spool.Spool, *, broken: bool) -> None:
        """Give back a spool a Replicate stream held, rolling back uncommitted content.

        ``broken``: the stream ended without the primary's EOF (the primary died or
        was cut off): what this replica committed may now exist nowhere else, so
        it is persisted at once.
        """
        frag = pb.Fragment()
        frag.CopyFrom(sp.spec)
        await sp.must_apply(pb.ReplicateRequest(proposal=frag, registers=sp.registers))
        self.spool_slot.put_nowait(sp)
        if broken:
            self.request_flush()

    def _on_hole(self, hole_end: int) -> bool:
        """A read found a hole (ending at ``hole_end``) below the write head: list the stores.

        A broker that joined the journal's replicas holds only what was appended
        since; what came before was persisted by the earlier members, but this
        index learns of it only from a listing (after ``refresh_interval``, five
        minutes by default). Gazette waits for that. Here a read of the hole asks
        for a listing now, and again with back-off (0.5 s, doubling up to the
        refresh interval) while the same hole stays, as its fragment may still be
        on its way to the store.
        """
        now = self._clock()
        if self._hole is not None and self._hole[0] == hole_end:
            _, backoff, not_before = self._hole
            if now < not_before:
                return False
            spec = self.host.lookup_spec(self.journal)
            ceiling = pb.duration_seconds(spec.fragment.refresh_interval) if spec else 300.0
            backoff = min(backoff * 2, max(ceiling, HOLE_LISTING_BACKOFF))
        else:
            backoff = HOLE_LISTING_BACKOFF
        self._hole = (hole_end, backoff, now + backoff)
        self.list_for_hole()
        return True

    def list_for_hole(self) -> None:
        """A read found a hole below the write head: list the stores now.

        Called by :meth:`_on_hole`, and for reads the native data plane serves
        (it backs off as :meth:`_on_hole` does, and its index takes the listing).
        """
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

    def head_recovery_ready(self, spool_end: int, index_end: int) -> bool:
        """Whether the primary may resume the journal at ``index_end`` > ``spool_end``.

        The persisted fragments end beyond the synchronised spools: every broker
        that held the content past ``spool_end`` is gone or has stored it. Gazette
        refuses such appends (INDEX_HAS_GREATER_OFFSET) until an operator acts,
        since a live earlier primary might still be writing. We resume on our
        own once the gap was seen for ``recovery_delay`` (at least a member lease:
        by then an earlier primary cut off from etcd has stopped serving, its
        lease being gone, and any holder of the tail that is alive has stored it)
        and a store listing started after that still shows it.
        """
        now = self._clock()
        key = (spool_end, index_end)
        if key == self._refused:
            return False
        if not self.resume_head_gaps:
            self.refuse_head_gap(
                spool_end,
                index_end,
                "every broker that held what came after may be gone, with offsets"
                " acknowledged but never persisted (brokers run with"
                " --broker.resume-head-gaps go on past them by themselves)",
            )
            return False
        if self._head_gap is None or self._head_gap[0] != key:
            self._head_gap = (key, now)
            log.warning(
                "journal %s: spools end at %d but persisted fragments reach %d;"
                " resuming at %d in %.0fs unless the gap closes",
                self.journal,
                spool_end,
                index_end,
                index_end,
                self.recovery_delay,
            )
            self._schedule_refresh(self.recovery_delay)
            return False
        due = self._head_gap[1] + self.recovery_delay
        if now < due:
            return False
        if self.listed_at < due:
            self.refresh_now()
            return False
        self._head_gap = None
        metrics.JOURNAL_HEAD_RECOVERIES.inc()
        return True

    def refuse_head_gap(self, spool_end: int, index_end: int, why: str) -> None:
        """Refuse the journal's head gap until it is reset (logged once per gap)."""
        key = (spool_end, index_end)
        if self._refused == key:
            return
        self._refused = key
        log.error(
            "journal %s: its brokers hold content through %d, but its persisted fragments"
            " end at %d: %s. Appends are refused (INDEX_HAS_GREATER_OFFSET) rather than"
            " hand those offsets out again. Once every broker that served the journal"
            " before has exited or stored what it held, resume it with"
            " `gazctl journals reset-head -l name=%s`",
            self.journal,
            spool_end,
            index_end,
            why,
            self.journal,
        )

    def head_gap_closed(self) -> None:
        """The primary found its spools at the index end: forget a pending head gap.

        (Else the pulse daemon would keep waking for a recovery that is not needed.)
        """
        self._head_gap = None

    def head_recovery_due(self) -> float | None:
        """Monotonic time at which a pending head recovery may proceed, if any."""
        if self._head_gap is None or not self.resume_head_gaps:
            return None
        return self._head_gap[1] + self.recovery_delay

    def _schedule_refresh(self, delay: float) -> None:
        loop = asyncio.get_running_loop()
        loop.call_later(delay, self._refresh_now.set)

    # -- Lifetime -----------------------------------------------------------------------

    def clock(self) -> float:
        """The replica's monotonic clock (``listed_at`` is in its seconds)."""
        return self._clock()

    async def serve(self) -> None:
        """Run the daemons until :meth:`stop`, then shut down."""
        log.info("starting local journal replica %s (primary %s)", self.journal, self.primary)
        if self.native:
            async with asyncio.TaskGroup() as tg:
                refresh = tg.create_task(self._refresh_daemon(), name=f"refresh {self.journal}")
                await self._stopping.wait()
                refresh.cancel()
            self.index.close()
            return
        async with asyncio.TaskGroup() as tg:
            refresh = tg.create_task(self._refresh_daemon(), name=f"refresh {self.journal}")
            flush = tg.create_task(self._flush_daemon(), name=f"flush {self.journal}")
            tg.create_task(self._pulse_daemon(), name=f"pulse {self.journal}")
            confirm = tg.create_task(self._confirm_daemon(), name=f"confirm {self.journal}")
            await self._stopping.wait()
            refresh.cancel()
            flush.cancel()
            confirm.cancel()
        await self._shut_down()

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
                if self.native:
                    self.host.index_changed(self)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(
                    max(1.0, pb.duration_seconds(spec.fragment.refresh_interval))
                ):
                    await self._refresh_now.wait()

    async def _flush_daemon(self) -> None:
        while True:
            await self._flush.wait()
            self._flush.clear()
            # A primary's idle pipeline holds the spool: close it (handing the spool
            # back, and ending the replicas' streams so that they can flush too).
            # The next append builds a new one.
            pln = await self.pipeline_slot.get()
            try:
                if pln is not None:
                    await _close_pipeline(pln, self.journal)
            finally:
                self.pipeline_slot.put_nowait(None)
            sp = await self.spool_slot.get()
            try:
                if sp.content_length != 0:
                    log.info(
                        "persisting [%d, %d) of %s now", sp.spec.begin, sp.spec.end, self.journal
                    )
                    with self.storing_at_once():
                        await sp.must_apply(
                            pb.ReplicateRequest(proposal=_empty_at_end(sp), registers=sp.registers)
                        )
            finally:
                self.spool_slot.put_nowait(sp)

    def tell_confirmed_soon(self) -> None:
        """An append's commit is confirmed: tell the replicas once the pipeline is idle."""
        self._confirm.set()

    async def _confirm_daemon(self) -> None:
        """Tell the replicas of an idle pipeline that its last commit is confirmed.

        A replica learns it from the next proposal (see Spool.confirm), which on
        an idle journal may not come for long: if the primary then died, the
        replicas would hold its last acknowledged append back until a new route
        took it on from them. So, once an append was answered, a pipeline no
        append is using repeats its fragment to the replicas as a proposal that
        asks for no answer (a no-op for any spool, Gazette's included). It runs
        after the answer, as a daemon, and only once the journal was quiet for
        :data:`CONFIRM_DELAY`, to keep it off the path of appends (a busy
        journal's next proposal tells the replicas anyway).
        """
        while True:
            await self._confirm.wait()
            while True:  # Until the journal was quiet for a moment: a next append says it too.
                self._confirm.clear()
                await asyncio.sleep(CONFIRM_DELAY)
                if not self._confirm.is_set():
                    break
            slot = self.pipeline_slot
            if slot.empty():
                continue  # An append holds it: its own proposal will say as much.
            pln = slot.get_nowait()
            try:
                if pln is not None:
                    await pln.confirm_replicas()
            finally:
                slot.put_nowait(pln)

    async def _pulse_daemon(self) -> None:
        stable_ticks = 0
        while not self._stopping.is_set():
            changed = await self.host.pulse(self, stable_ticks)
            events = [self._stopping] if changed is None else [self._stopping, changed]
            timeout = self.pulse_interval
            if (due := self.head_recovery_due()) is not None:
                # Pulse again as soon as the journal may resume past its head gap.
                timeout = min(timeout, max(0.0, due - self._clock()) + 0.1)
            _, signalled = await task.race(asyncio.sleep(timeout), *events)
            stable_ticks = 0 if signalled else stable_ticks + 1

    async def _shut_down(self) -> None:
        pln = await self.pipeline_slot.get()
        if pln is not None:
            await _close_pipeline(pln, self.journal)
        sp = await self.spool_slot.get()
        # Where what we publish ends: content past it (an append whose acknowledgements
        # never came) is quarantined below, so the journal must go on from here, or
        # it would have a hole where that content was (chaos suite, make down/up).
        head = min([sp.confirmed_end] + [h.confirmed_end for h in [*self._held, *self._doubtful]])
        # Roll to an empty fragment at the end: the last fragment goes to the persister.
        await sp.must_apply(pb.ReplicateRequest(proposal=_empty_at_end(sp), registers=sp.registers))
        self.release_held()
        if self.primary and head > 0:
            try:
                async with asyncio.timeout(SHUTDOWN_PIPELINE_TIMEOUT):
                    await self.host.checkpoint_head(self, head)
            except (TimeoutError, errors.BrokerServerError) as e:
                log.warning("journal %s: head at %d not recorded: %s", self.journal, head, e)
        self.index.close()
        # The slots are intentionally left empty: nothing may use this replica again.


async def _close_pipeline(pln: pipeline.Pipeline, journal: str) -> None:
    """Close a pipeline with its EOF handshake, or abort it if that takes too long."""
    try:
        async with asyncio.timeout(SHUTDOWN_PIPELINE_TIMEOUT):
            await pln.shutdown(False)
    except TimeoutError:
        log.warning("pipeline of %s did not close in time; aborting it", journal)
        await pln.abort()


def _empty_at_end(sp: spool.Spool) -> pb.Fragment:
    """The proposal that completes ``sp``: an empty fragment at its end."""
    frag = pb.Fragment()
    frag.CopyFrom(sp.spec)
    frag.begin = frag.end
    frag.ClearField("sum")
    return frag


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
                rep.route_members(
                    {(kv.decoded.member_zone, kv.decoded.member_suffix) for kv in li.assignments}
                )
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
