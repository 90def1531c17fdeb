"""The append state machine (Gazette ``broker/append_fsm.go``), restated for asyncio.

An append converges towards a synchronised replication pipeline before it may
stream content, and may back-track to re-resolve whenever the journal's
topology moves under it::

    RESOLVE -> ACQUIRE_PIPELINE -> START_PIPELINE -> SEND_PIPELINE_SYNC
      -> RECV_PIPELINE_SYNC -> UPDATE_ASSIGNMENTS -> AWAIT_DESIRED_REPLICAS
      -> VALIDATE_PRECONDITIONS -> (UPDATE_SUSPEND) -> STREAM_CONTENT
      -> READ_ACKNOWLEDGEMENTS -> FINISHED
    terminal alternatives: ERROR (a status and/or an exception), PROXY

Each state has one ``_on_<state>()`` coroutine that first asserts it is in
that state and leaves the machine in the next one; :meth:`AppendFSM.run_to`
drives until a target state. Tests step it one transition at a time.

:meth:`AppendFSM.run` owns the whole loop, as Gazette's ``appendFSM.run``
does: the Append RPC builds a machine from the client's first message and
awaits ``run`` with the rest of the stream (a replica's pulse passes none);
client content then flows through flow control into the content phase
(:mod:`gazette.broker.server.append_content`). The machine reaches its broker
through :class:`~gazette.broker.server.append_state.Deps` (resolution, etcd
transactions, rolling, store health) and the
:class:`~gazette.broker.server.resolver.Resolution` it gets back (the local
replica, its spool and pipeline slots), so it is unit-tested with in-process
fakes and served by the real broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from gazette import task
from gazette.broker import protocol as pb
from gazette.broker.protocol import protocol_pb2 as pb2
from gazette.broker.server import errors, resolver
from gazette.broker.server import pipeline as pipeline_
from gazette.broker.server import replica as replica_
from gazette.broker.server.append_content import ContentPhase
from gazette.broker.server.append_state import (
    ABORT_GRACE,
    DEFAULT_FLUSH_INTERVAL_S,
    REPLICATE_CONTENT_BYTES,
    STORE_HEALTH_CHECK_RETRIES,
    TERMINAL,
    Deps,
    State,
    Status,
    copy_labels,
)

log = logging.getLogger(__name__)

__all__ = [
    "ABORT_GRACE",
    "DEFAULT_FLUSH_INTERVAL_S",
    "REPLICATE_CONTENT_BYTES",
    "STORE_HEALTH_CHECK_RETRIES",
    "TERMINAL",
    "AppendFSM",
    "Deps",
    "State",
]

T = TypeVar("T")


class AppendFSM(ContentPhase):
    """One execution of an append (an Append RPC, or a replica's pulse)."""

    def __init__(
        self,
        deps: Deps,
        req: pb2.AppendRequest,
        *,
        clock: Callable[[], float] = time.time,
        authorized: Callable[[pb2.JournalSpec], bool] | None = None,
    ) -> None:
        """``authorized(spec)``: whether the client's claims select the journal (default: yes)."""
        self.deps = deps
        self.req = req
        self.authorized = authorized
        self.clock = clock
        self.state = State.RESOLVE
        self.resolved: resolver.Resolution | None = None
        self.pln: pipeline_.Pipeline | None = None
        self.pln_header = False
        self.pln_owned = False  # Do we hold the replica's pipeline slot?
        # The replica whose slot we hold: a later resolution may name another
        # replica (demoted and re-created), and the pipeline goes back where it came from.
        self.pln_replica: replica_.Replica | None = None
        self.read_through_rev = 0
        self.roll_to_offset = 0
        self.roll_after_sync = False
        self.registers = pb2.LabelSet()
        self.next_suspend: pb2.JournalSpec.Suspend | None = None
        self.client_commit = False
        self.client_fragment: pb2.Fragment | None = None
        self.client_summer: Any = None  # hashlib's SHA-1 object (no public type).
        # Client content read but not yet scattered (see REPLICATE_CONTENT_BYTES):
        # it begins at ``client_fragment.end - pending_size``.
        self.pending: list[bytes] = []
        self.pending_size = 0
        self.proposal: pb2.Fragment | None = None
        self.commit_sent = False
        self.rolled_back = False
        self.replicate_content_bytes = REPLICATE_CONTENT_BYTES
        self.err: BaseException | None = None
        # Set by the driver once its client went away (or a pulse timed out): waits
        # before content streaming end in ERROR. Content and acknowledgements are
        # never interrupted half-way, since that would desynchronise the pipeline.
        self.aborted = asyncio.Event()

    # -- Driving ---------------------------------------------------------------------------

    def must_state(self, state: State) -> None:
        assert self.state == state, f"expected state {state.name}, at {self.state.name}"

    @property
    def status(self) -> int:
        return self.resolved.status if self.resolved is not None else Status.OK

    async def step(self) -> None:
        """Run exactly one transition from the current (non-terminal) state."""
        handler: Callable[[], Awaitable[None]] = {
            State.RESOLVE: self._on_resolve,
            State.ACQUIRE_PIPELINE: self._on_acquire_pipeline,
            State.START_PIPELINE: self._on_start_pipeline,
            State.SEND_PIPELINE_SYNC: self._on_send_pipeline_sync,
            State.RECV_PIPELINE_SYNC: self._on_recv_pipeline_sync,
            State.UPDATE_ASSIGNMENTS: self._on_update_assignments,
            State.AWAIT_DESIRED_REPLICAS: self._on_await_desired_replicas,
            State.VALIDATE_PRECONDITIONS: self._on_validate_preconditions,
            State.UPDATE_SUSPEND: self._on_update_suspend,
            State.READ_ACKNOWLEDGEMENTS: self._on_read_acknowledgements,
        }[self.state]
        if self.aborted.is_set() and self.state != State.READ_ACKNOWLEDGEMENTS:
            self.err = errors.Cancelled()
            self.state = State.ERROR
            return
        await handler()

    async def run_to(self, target: State) -> bool:
        """Step until ``target``; False if another terminal (or STREAM_CONTENT) comes first."""
        while self.state != target:
            if self.state in TERMINAL or self.state == State.STREAM_CONTENT:
                return False
            await self.step()
        return True

    async def run(
        self,
        requests: AsyncIterator[pb2.AppendRequest] | None,
        *,
        give_up_after: float | None = None,
    ) -> tuple[int, int]:
        """Run to a terminal state; returns the client's (total, delayed) content chunks.

        ``requests`` are the client's messages after the first (None: a pulse, which
        commits zero bytes). The machine runs in a task of its own: if our caller is
        cancelled (the client went away) or ``give_up_after`` seconds pass, it is
        asked to abort and given :data:`ABORT_GRACE` to get its pipeline back in
        order; only then is the pipeline torn down (:meth:`abandon`).
        """
        task = asyncio.ensure_future(self._run(requests))
        try:
            done, _ = await asyncio.wait({task}, timeout=give_up_after)
            if not done:
                self.aborted.set()
                done, _ = await asyncio.wait({task}, timeout=ABORT_GRACE)
            if done:
                return task.result()
        except asyncio.CancelledError:
            self.aborted.set()
            done, _ = await asyncio.wait({task}, timeout=ABORT_GRACE)
            if not done:
                await self._give_up(task)
            raise
        await self._give_up(task)
        return 0, 0

    async def _give_up(self, task: asyncio.Future[tuple[int, int]]) -> None:
        log.warning("abandoning append of %s in state %s", self.req.journal, self.state.name)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await self.abandon()
        if self.state not in TERMINAL:
            self.err = errors.Cancelled()
            self.state = State.ERROR

    async def _run(self, requests: AsyncIterator[pb2.AppendRequest] | None) -> tuple[int, int]:
        totals = (0, 0)
        try:
            if not await self.run_to(State.STREAM_CONTENT):
                return totals
            if requests is None:
                await self.on_stream_content(pb2.AppendRequest(), None)  # Intent to commit.
                # A pipeline that failed (or broke off: Pipeline.acknowledged) ends the
                # content phase at the intent already: there is no commit to send.
                if self.state == State.STREAM_CONTENT:
                    await self.on_stream_content(None, None)  # Commit.
            else:
                totals = await self._stream_client_content(requests)
            await self.run_to(State.FINISHED)
            return totals
        finally:
            await self.release_pipeline()

    async def release_pipeline(self) -> None:
        """Return a held pipeline slot (always called when the FSM is done)."""
        if self.pln_owned:
            assert self.pln_replica is not None
            self.pln_replica.pipeline_slot.put_nowait(self.pln)
            self.pln_owned, self.pln_replica = False, None

    def _replica(self) -> replica_.Replica:
        assert self.resolved is not None and self.resolved.replica is not None
        return self.resolved.replica

    def _spec(self) -> pb2.JournalSpec:
        assert self.resolved is not None and self.resolved.journal_spec is not None
        return self.resolved.journal_spec

    def _pipeline(self) -> pipeline_.Pipeline:
        assert self.pln is not None
        return self.pln

    async def _race(
        self,
        aw: Awaitable[T],
        *,
        resolved: bool = True,
        give_back: Callable[[T], object] | None = None,
    ) -> tuple[T, bool] | tuple[None, bool]:
        """Await ``aw`` unless the resolution is invalidated (or the FSM aborted) first.

        Returns (result, interrupted); an interrupted FSM re-resolves, and an aborted
        one then stops at its next step. See :func:`gazette.task.race`.
        """
        events = [self.aborted]
        if resolved:
            assert self.resolved is not None
            events.append(self.resolved.invalidated)
        return await task.race(aw, *events, give_back=give_back)

    async def abandon(self) -> None:
        """Hard teardown when the driver could not finish the FSM (cancelled, timed out).

        A pipeline we hold may be half-way through a request, so it is aborted and
        its slot given back empty: the next append builds a fresh one.
        """
        if self.pln_owned:
            if self.pln is not None:
                await self.pln.abort()
            self.pln = None
            await self.release_pipeline()

    # -- States ----------------------------------------------------------------------------

    async def _on_resolve(self) -> None:
        self.must_state(State.RESOLVE)
        min_revision = max(self.req.min_etcd_revision, self.read_through_rev)
        proxy_header = self.req.header if self.req.HasField("header") else None
        resolution = self.deps.resolve(
            self.req.journal,
            may_proxy=not self.req.do_not_proxy,
            require_primary=True,
            min_etcd_revision=min_revision,
            proxy_header=proxy_header,
            authorized=self.authorized,
        )
        res: resolver.Resolution | None
        try:
            if min_revision == 0 and proxy_header is None:
                # Nothing to wait for (resolving waits only for an etcd revision the
                # request names): await it as is, sparing every append the tasks of
                # racing it against an abort that step() has just ruled out.
                res, aborted = await resolution, False
            else:
                res, aborted = await self._race(resolution, resolved=False)
        except errors.BrokerServerError as e:
            self.err = e
            self.state = State.ERROR
            return
        if aborted or res is None:
            self.err = errors.Cancelled()
            self.state = State.ERROR
            return
        self.resolved = res
        if res.status == Status.SUSPENDED and self.req.suspend == pb2.AppendRequest.SUSPEND_RESUME:
            spec = self._spec()
            self.next_suspend = pb2.JournalSpec.Suspend(
                level=pb2.JournalSpec.Suspend.NONE, offset=spec.suspend.offset
            )
            self.state = State.UPDATE_SUSPEND
        elif res.status != Status.OK:
            self.state = State.ERROR
        elif res.header.process_id != res.local_id:
            # A pipeline held from an earlier resolution must be released: we now proxy.
            await self.release_pipeline()
            self.pln = None
            self.state = State.AWAIT_DESIRED_REPLICAS
        elif res.replica is None:
            self.err = errors.ReplicaStopped(self.req.journal)
            self.state = State.ERROR
        elif self.pln_owned and self.pln_replica is res.replica:
            self.state = State.START_PIPELINE
        elif self.pln_owned:
            # The replica was re-created since we took its pipeline: hand that back.
            await self.release_pipeline()
            self.pln = None
            self.state = State.ACQUIRE_PIPELINE
        else:
            self.state = State.ACQUIRE_PIPELINE

    async def _on_acquire_pipeline(self) -> None:
        self.must_state(State.ACQUIRE_PIPELINE)
        replica = self._replica()
        slot = replica.pipeline_slot
        if not slot.empty():
            # The common case, without _race's tasks: a get that can't wait wins anyway.
            pln, invalidated = slot.get_nowait(), False
        else:
            pln, invalidated = await self._race(slot.get(), give_back=slot.put_nowait)
        if invalidated:
            self.state = State.RESOLVE
            return
        self.pln, self.pln_owned, self.pln_replica = pln, True, replica
        self.state = State.START_PIPELINE

    async def _on_start_pipeline(self) -> None:
        self.must_state(State.START_PIPELINE)
        assert self.resolved is not None
        if self.pln is not None and pb.route_equivalent(
            self.pln.header.route, self.resolved.header.route
        ):
            self.registers = copy_labels(self.pln.spool.registers)
            self.state = State.UPDATE_ASSIGNMENTS
            return
        if self.pln is not None:
            old, self.pln = self.pln, None
            await old.shutdown(False)

        spool_slot = self._replica().spool_slot
        spool, invalidated = await self._race(spool_slot.get(), give_back=spool_slot.put_nowait)
        if invalidated:
            self.state = State.RESOLVE
            return
        assert spool is not None
        self.registers = copy_labels(spool.registers)
        self.pln = self.deps.new_pipeline(self.resolved, spool)
        self.pln_header = True
        # A new pipeline follows a route change or a failed one: once its members
        # agree on our fragment (its SHA-1 tells them it is the content they hold,
        # which they may then publish), they roll their spools, so that what they
        # hold is persisted now (the primary's copy at once), not at the next roll.
        self.roll_after_sync = spool.spec.begin != spool.spec.end
        self.state = State.SEND_PIPELINE_SYNC

    async def _on_send_pipeline_sync(self) -> None:
        self.must_state(State.SEND_PIPELINE_SYNC)
        pln = self._pipeline()
        proposal = self.deps.maybe_roll(pln.spool, self.roll_to_offset, self._spec())
        req = pb2.ReplicateRequest(proposal=proposal, registers=self.registers, acknowledge=True)
        if self.pln_header:
            req.header.CopyFrom(pln.header)
            req.deprecated_journal = pln.spool.spec.journal
            self.pln_header = False
        if (err := await pln.acknowledged()) is not None:
            # An earlier append's proposal failed at a peer (see Pipeline.acknowledged).
            self.pln = None
            await pln.shutdown(True)
            self._replica().request_flush()
            self.err = errors.PipelineError(f"sync: {err}")
            self.state = State.ERROR
            return
        await pln.scatter(req)
        self.state = State.RECV_PIPELINE_SYNC

    async def _on_recv_pipeline_sync(self) -> None:
        self.must_state(State.RECV_PIPELINE_SYNC)
        pln = self._pipeline()
        self.roll_to_offset, roll_registers, self.read_through_rev = await pln.gather_sync()
        self.err = pln.failure()
        if self.err is not None:
            self.pln = None
            await pln.shutdown(True)
            self._replica().request_flush()  # A member is failing: store our copy now.
            self.err = errors.PipelineError(f"gatherSync: {self.err}")
            self.state = State.ERROR
        elif self.roll_to_offset != 0:
            # A peer is further along (or at an equal offset with another fragment):
            # propose that everyone rolls forward to it, taking its registers.
            if roll_registers is not None:
                self.registers = copy_labels(roll_registers)
            self.state = State.SEND_PIPELINE_SYNC
        elif self.read_through_rev != 0:
            # A peer has a newer, different route: re-resolve at its revision.
            self.pln = None
            await pln.shutdown(False)
            self.state = State.RESOLVE
        else:
            # Every member holds our fragment (or rolled to its end): the route goes on
            # from our content, so what we hold is the journal's.
            spool = pln.spool
            spool.confirm(spool.spec.end)
            await spool.record_confirmed()
            self._replica().settle_held(spool.spec.begin, adopt=True)
            if self.roll_after_sync and spool.spec.begin != spool.spec.end:
                self.roll_after_sync = False
                self.roll_to_offset = spool.spec.end
                self.state = State.SEND_PIPELINE_SYNC
                return
            self.roll_after_sync = False
            self.state = State.UPDATE_ASSIGNMENTS

    async def _on_update_assignments(self) -> None:
        self.must_state(State.UPDATE_ASSIGNMENTS)
        assert self.resolved is not None
        if self.resolved.assignments_consistent:
            self.state = State.AWAIT_DESIRED_REPLICAS
            return
        try:
            self.read_through_rev = await self.deps.update_assignments(self.resolved)
        except errors.BrokerServerError as e:
            self.err = e
            self.state = State.ERROR
            return
        self.state = State.RESOLVE

    async def _on_await_desired_replicas(self) -> None:
        self.must_state(State.AWAIT_DESIRED_REPLICAS)
        assert self.resolved is not None
        n = len(self.resolved.header.route.members)
        d = self.deps.desired_replication(self._spec())
        if n > d:
            # The allocator over-subscribed the journal ahead of removing a member:
            # wait for that removal rather than replicate to (or proxy through) it.
            self.read_through_rev = self.resolved.header.etcd.revision + 1
            self.state = State.RESOLVE
        elif n < d:
            self.resolved.status = Status.INSUFFICIENT_JOURNAL_BROKERS
            self.state = State.ERROR
        elif self.resolved.header.process_id != self.resolved.local_id:
            self.state = State.PROXY
        else:
            self.state = State.VALIDATE_PRECONDITIONS

    async def _on_validate_preconditions(self) -> None:
        self.must_state(State.VALIDATE_PRECONDITIONS)
        res, spec, pln = self.resolved, self._spec(), self._pipeline()
        assert res is not None
        replica = self._replica()

        if (
            replica.index.first_refresh_done
            and self.deps.store_healthy(res)
            and not res.invalidated.is_set()
        ):
            # The usual case: the index is loaded, the store healthy and the resolution
            # current, so there's nothing to wait for and no tasks to race.
            health_err, invalidated = None, False
        else:
            health_err, invalidated = await self._race(
                self._await_index_and_store(res, replica, spec)
            )
        if invalidated:
            self.state = State.RESOLVE
            return
        if health_err:
            res.status = Status.FRAGMENT_STORE_UNHEALTHY
            self.err = errors.BrokerServerError(health_err)
            self.state = State.ERROR
            return

        index_min, index_max, index_mod_time = replica.index.summary()
        suspend = spec.suspend
        flush_s = spec.fragment.flush_interval.seconds or DEFAULT_FLUSH_INTERVAL_S
        index_dirty = index_mod_time == 0 or index_mod_time > int(self.clock()) - flush_s
        spool_end = pln.spool.spec.end
        max_offset = max(spool_end, index_max)

        if (
            self.req.HasField("check_registers")
            and len(self.registers.labels) != 0
            and not pb.matches(self.req.check_registers, self.registers)
        ):
            res.status = Status.REGISTER_MISMATCH
            self.state = State.ERROR
            return
        if spool_end < suspend.offset:
            self.roll_to_offset = suspend.offset
            self.state = State.SEND_PIPELINE_SYNC
            return
        if spool_end != max_offset and self.req.offset == 0 and pb.journal_may_write(spec):
            if replica.head_recovery_ready(spool_end, index_max):
                try:
                    resume = await self.deps.head_resumes_at(self.req.journal, index_max)
                except errors.BrokerServerError as e:
                    self.err = e
                    self.state = State.ERROR
                    return
                if resume is not None:
                    log.warning(
                        "journal %s resumes at %d (its persisted fragments end at %d): content"
                        " that was appended past them and never persisted is lost",
                        self.req.journal,
                        resume,
                        index_max,
                    )
                    self.roll_to_offset = resume
                    self.state = State.SEND_PIPELINE_SYNC
                    return
                replica.refuse_head_gap(
                    spool_end,
                    index_max,
                    "its acknowledgement fence, which tells how far appends were"
                    " acknowledged past them, can't be read (etcd denies it)",
                )
            res.status = Status.INDEX_HAS_GREATER_OFFSET
            self.state = State.ERROR
            return
        if spool_end == max_offset:
            replica.head_gap_closed()
        if self.req.offset != 0 and self.req.offset != max_offset:
            res.status = Status.WRONG_APPEND_OFFSET
            self.state = State.ERROR
            return
        if self.req.offset != 0 and spool_end != max_offset:
            self.roll_to_offset = max_offset
            self.state = State.SEND_PIPELINE_SYNC
            return

        level, S = suspend.level, pb2.JournalSpec.Suspend
        mode, A = self.req.suspend, pb2.AppendRequest
        if mode == A.SUSPEND_RESUME:
            if level != S.NONE:
                self.next_suspend = S(level=S.NONE, offset=spool_end)
                self.state = State.UPDATE_SUSPEND
                return
        elif mode == A.SUSPEND_NO_RESUME:
            if level != S.NONE:
                res.status = Status.SUSPENDED
                self.state = State.ERROR
                return
        elif mode in (A.SUSPEND_IF_FLUSHED, A.SUSPEND_NOW):
            if level != S.FULL and index_min == index_max:
                self.next_suspend = S(level=S.FULL, offset=spool_end)
                self.state = State.UPDATE_SUSPEND
                return
            if level == S.NONE and (not index_dirty or mode == A.SUSPEND_NOW):
                self.next_suspend = S(level=S.PARTIAL, offset=spool_end)
                # Replication drops to one, yet we likely stay primary: roll the
                # dirty spool now so it's persisted rather than held.
                self.roll_to_offset = spool_end
                self.state = State.UPDATE_SUSPEND
                return
            if level == S.PARTIAL:
                res.status = Status.SUSPENDED
        # SUSPEND_KEEP: proceed and leave suspension as it is.

        if pln.spool.spec.begin == index_min:
            # The spool holds the journal's first known write: roll it soon, so
            # that the stores show a "dirty" index to recovering brokers.
            self.roll_to_offset = spool_end
        self.state = State.STREAM_CONTENT

    async def _await_index_and_store(
        self, res: resolver.Resolution, replica: replica_.Replica, spec: pb2.JournalSpec
    ) -> str | None:
        """Wait for the index's first store listing and a healthy primary store, together.

        An unhealthy store fails the append even while the listing is still
        missing (a store that can't be built can't be listed either).
        """
        refresh = asyncio.ensure_future(replica.index.wait_first_refresh())
        pending: set[asyncio.Future[Any]] = {refresh}
        health: asyncio.Future[str | None] | None = None
        if spec.fragment.stores:
            health = asyncio.ensure_future(self.deps.await_store_health(res))
            pending.add(health)
        try:
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                if health is not None and health in done and (err := health.result()):
                    return err
            return None
        finally:
            for f in (refresh, health):
                if f is not None and not f.done():
                    f.cancel()

    async def _on_update_suspend(self) -> None:
        self.must_state(State.UPDATE_SUSPEND)
        assert self.resolved is not None and self.next_suspend is not None
        update = pb2.JournalSpec()
        update.CopyFrom(self._spec())
        update.suspend.CopyFrom(self.next_suspend)
        try:
            self.read_through_rev = await self.deps.update_journal_spec(self.resolved, update)
        except errors.BrokerServerError as e:
            self.err = e
            self.state = State.ERROR
            return
        log.info(
            "updated journal suspension",
            extra={
                "journal": update.name,
                "revision": self.read_through_rev,
                "suspend": str(update.suspend),
            },
        )
        self.state = State.RESOLVE
