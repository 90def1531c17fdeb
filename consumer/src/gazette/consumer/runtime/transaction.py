"""Consumer transactions: the loop a primary shard runs over its read messages.

Gazette's ``consumer/transaction.go``, as an explicit state machine driven one
:meth:`Transactions.step` at a time (tests drive single transitions). Each
transaction reads messages from the shard's :class:`Channel`, sequences them
(:class:`gazette.message.Sequencer`: duplicates dropped, uncommitted spans held
until their ACK), hands committed ones to the application, and closes when
its bounds say so:

* it does not close before ``min_txn_duration`` elapsed (timer), nor while the
  previous transaction's commit and ACK appends are unresolved (the barrier);
* it stops reading at ``max_txn_duration``;
* between those, it closes as soon as no message is ready, unless a span it
  began waits for its ACK (``disable_wait_for_ack`` turns that off).

Closing = :meth:`Transactions.start_commit`: the application finalizes, the
sequencer and publisher give the Checkpoint (read-through offsets, producer
states, ACK intents), the store commits it with the state once every
in-flight append of the shard succeeded, and the ACK intents are appended only
after that commit (:meth:`Transactions.acknowledge`). Transactions pipeline:
the next one consumes while the previous one commits, and may not commit
before it.

States of one transaction (``Txn.phase``)::

    READING ──(nothing ready, not blocked)──> COMMITTING   (start_commit + acknowledge)
       │                                         │
       └──(channel closed and nothing consumed)──> DRAINED

Every source of progress (a message in the channel, the timer, the previous
transaction's barrier) calls one wake-up, so a blocked step waits on a single
event rather than a task per source.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import enum
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

from gazette import message
from gazette.broker import protocol as pb
from gazette.broker.client import AsyncAppend, AsyncOperation
from gazette.consumer import protocol as pc
from gazette.consumer.runtime import checkpoints, errors, interfaces, metrics

__all__ = [
    "CLOSED",
    "Channel",
    "LoopTimer",
    "Phase",
    "Timer",
    "Transactions",
    "Txn",
]

log = logging.getLogger(__name__)

#: Producer states older than this (by clock) are pruned from checkpoints (Gazette: 24h).
PRUNE_HORIZON_NS = 24 * 3600 * 10**9


class _Closed:
    def __repr__(self) -> str:
        return "CLOSED"


#: What a :class:`Channel` yields once its writers are done.
CLOSED: Any = _Closed()
_EMPTY: Any = object()


class Channel:
    """A bounded queue of read envelopes (or errors) from reader tasks to the loop.

    Readers ``await put()`` (back-pressure once ``capacity`` items wait); the
    loop takes items with :meth:`get_nowait` and is woken by ``wake`` when one
    arrives. :meth:`close` ends it: :data:`CLOSED` follows everything put before.
    """

    def __init__(self, capacity: int, wake: Callable[[], None]) -> None:
        self._items: collections.deque[Any] = collections.deque()
        self._capacity = max(1, capacity)
        self._wake = wake
        self._space = asyncio.Event()
        self._space.set()
        self._closed = False

    def __len__(self) -> int:
        return len(self._items)

    async def put(self, item: Any) -> None:
        while len(self._items) >= self._capacity:
            self._space.clear()
            await self._space.wait()
        if self._closed:
            return
        self._items.append(item)
        if len(self._items) == 1:
            self._wake()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._items.append(CLOSED)
            self._wake()

    def get_nowait(self) -> Any:
        """The next item, :data:`CLOSED` at the end, or ``_EMPTY`` if none is ready."""
        items = self._items
        if not items:
            return _EMPTY
        item = items[0]
        if item is CLOSED:
            return CLOSED  # Stays: every later get sees it too.
        items.popleft()
        if not self._space.is_set() and len(items) < self._capacity:
            self._space.set()
        return item


class Timer(Protocol):
    """The transaction timer (Gazette's ``txnTimer``); injected so tests control time."""

    def now(self) -> float:
        """Seconds, monotonic."""

    def reset(self, delay: float) -> None:
        """Fire ``delay`` seconds from now (replacing any pending firing)."""

    def stop(self) -> None:
        """Cancel a pending firing, and forget one that fired but was not polled."""

    def poll(self) -> float | None:
        """The time it fired at, once (None if it hasn't)."""


class LoopTimer:
    """A :class:`Timer` on the event loop's clock, which calls ``wake`` when it fires."""

    def __init__(self, wake: Callable[[], None]) -> None:
        self._loop = asyncio.get_running_loop()
        self._wake = wake
        self._handle: asyncio.TimerHandle | None = None
        self._fired: float | None = None

    def now(self) -> float:
        return self._loop.time()

    def reset(self, delay: float) -> None:
        self.stop()
        self._handle = self._loop.call_later(max(0.0, delay), self._fire)

    def _fire(self) -> None:
        self._handle = None
        self._fired = self._loop.time()
        self._wake()

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._fired = None

    def poll(self) -> float | None:
        fired, self._fired = self._fired, None
        return fired


class Phase(enum.Enum):
    READING = "reading"
    COMMITTING = "committing"  # start_commit returned: the next transaction may begin.
    DRAINED = "drained"  # The channel closed and nothing was consumed.


@dataclasses.dataclass
class Txn:
    """One consumer transaction (Gazette's ``transaction``)."""

    min_dur: float = 0.0  # -1 once elapsed.
    max_dur: float = 0.0  # -1 once elapsed.
    wait_for_ack: bool = True
    #: The previous transaction's next unresolved operation: its commit, then its ACKs.
    barrier: AsyncOperation | None = None
    reading: bool = True  # False once the channel closed, max_dur elapsed or the app deferred.
    consumed_count: int = 0
    consumed_bytes: int = 0
    checkpoint: pc.Checkpoint = dataclasses.field(default_factory=pc.Checkpoint)
    commit_barrier: AsyncOperation = dataclasses.field(
        default_factory=lambda: AsyncOperation.finished()
    )
    acks: list[AsyncOperation] = dataclasses.field(default_factory=list)
    phase: Phase = Phase.READING

    began_at: float = 0.0
    stalled_at: float = 0.0
    prepare_began_at: float = 0.0
    prepare_done_at: float = 0.0
    committed_at: float = 0.0
    acked_at: float = 0.0


class ReplayFactory(Protocol):
    def __call__(self, journal: str, begin: int, end: int) -> AsyncIterator[message.Envelope]: ...


class Transactions:
    """Runs a primary shard's consumer transactions (Gazette ``runTransactions``).

    ``wake`` is the loop's single wake-up: give it to the :class:`Channel` and
    :class:`LoopTimer` feeding this loop.
    """

    def __init__(
        self,
        shard: ShardHandle,
        app: interfaces.Application,
        store: interfaces.Store,
        sequencer: message.Sequencer,
        publisher: message.Publisher,
        channel: Channel,
        timer: Timer,
        replay: ReplayFactory,
        wake: asyncio.Event,
        publish_clock_delta_ns: int = 0,
    ) -> None:
        self.shard = shard
        self.app = app
        self.store = store
        self.sequencer = sequencer
        self.publisher = publisher
        self.channel = channel
        self.timer = timer
        self.replay = replay
        self.wake = wake
        self.publish_clock_delta_ns = publish_clock_delta_ns
        self.begin_finisher = app if isinstance(app, interfaces.BeginFinisher) else None
        now = timer.now()
        self.prev = Txn(
            prepare_done_at=now,
            began_at=now,
            stalled_at=now,
            prepare_began_at=now,
            phase=Phase.COMMITTING,
        )
        self.txn = Txn()

    # -- the outer loop ---------------------------------------------------

    def resend_ack_intents(self, cp: pc.Checkpoint) -> None:
        """Append the recovered checkpoint's ACK intents again (its first step).

        If the previous primary appended them, these are duplicates readers
        drop; if it did not, they commit its transaction's messages now.
        """
        self.prev.checkpoint = cp
        for journal, intent in cp.ack_intents.items():
            aa = self.shard.append_service.start_append(journal)
            with aa:
                aa.write(intent)
            self.prev.acks.append(_tolerate_missing_journal(aa))

    async def run(self, cp: pc.Checkpoint) -> None:
        """Run transactions until the channel closed and drained (or an error)."""
        self.resend_ack_intents(cp)
        while True:
            self.init_txn()
            await self.run_txn()
            if self.txn.consumed_count == 0:
                return
            self.prev, self.txn = self.txn, self.prev

    def init_txn(self) -> None:
        spec = self.shard.spec
        self.txn = Txn(
            min_dur=_seconds(spec.min_txn_duration),
            max_dur=_seconds(spec.max_txn_duration),
            wait_for_ack=not spec.disable_wait_for_ack,
            # The previous transaction's commit, then its ACKs, bar this one from
            # committing until they resolve: on_barrier_resolved walks them.
            barrier=self.prev.commit_barrier,
            prepare_done_at=self.prev.prepare_done_at,
        )
        self.prev.commit_barrier.add_done_callback(self._wake)

    async def run_txn(self) -> None:
        err: BaseException | None = None
        try:
            while not await self.step():
                pass
        except BaseException as e:
            err = e
            raise
        finally:
            bf = self.begin_finisher
            if bf is not None and self.txn.began_at and self.txn.consumed_count:
                if err is not None and not isinstance(err, asyncio.CancelledError):
                    bf.finished_txn(self.shard, self.store, AsyncOperation.finished(err))
                elif err is None and self.txn.phase is Phase.COMMITTING:
                    bf.finished_txn(self.shard, self.store, self.txn.commit_barrier)

    # -- one transition ---------------------------------------------------

    def blocks(self) -> bool:
        """Whether the transaction must wait rather than close (Gazette ``txnBlocks``)."""
        txn = self.txn
        if txn.barrier is not None:
            return True
        if not txn.reading and txn.consumed_count == 0:
            return False
        return (
            txn.consumed_count == 0
            or txn.min_dur != -1
            or (
                txn.wait_for_ack
                and txn.reading
                and txn.max_dur != -1
                and self.sequencer.has_pending()
            )
        )

    async def step(self) -> bool:
        """Take one transition; True once the transaction started committing or drained."""
        txn = self.txn
        assert txn.phase is Phase.READING, txn.phase
        if txn.reading and self.sequencer.dequeued is not None:
            tick = self.timer.poll()
            if tick is not None:
                self.on_tick(tick)
            else:
                await self.consume()
            return False

        while True:
            self.wake.clear()
            if txn.barrier is not None and txn.barrier.done():
                self.on_barrier_resolved()
                return False
            tick = self.timer.poll()
            if tick is not None:
                self.on_tick(tick)
                return False
            if txn.reading:
                item = self.channel.get_nowait()
                if item is not _EMPTY:
                    await self.on_read(item)
                    return False
            if not self.blocks():
                break
            await self.wake.wait()

        if txn.consumed_count == 0:
            txn.phase = Phase.DRAINED
            return True
        cp = await self.start_commit()
        self.acknowledge(cp)
        self.timer.stop()
        txn.phase = Phase.COMMITTING
        return True

    def _wake(self) -> None:
        self.wake.set()

    async def on_read(self, item: Any) -> None:
        """A channel item: an envelope to sequence, a reader's error, or the end."""
        txn = self.txn
        if item is CLOSED:
            txn.reading = False
            return
        if isinstance(item, BaseException):
            raise errors.ReadError(f"reading messages: {item}") from item
        env: message.Envelope = item
        name = env.journal.name
        metrics.bytes_consumed.inc(env.end - env.begin)
        seq = self.sequencer
        outcome = seq.queue_uncommitted(env)
        Q = message.QueueOutcome
        if outcome is Q.ACK_COMMIT_REPLAY:
            journal, begin, end = seq.replay_range()
            seq.start_replay(self.replay(journal, begin, end))
            await seq.step()
        elif outcome in (Q.ACK_COMMIT_RING, Q.ACK_EMPTY, Q.OUTSIDE_COMMIT):
            await seq.step()
        elif outcome in (Q.CONTINUE_BEGIN_SPAN, Q.CONTINUE_EXTEND_SPAN):
            pass
        else:
            # A duplicate or rolled-back message: only progress moves.
            if txn.consumed_count != 0:
                pass
            elif txn.barrier is not None:
                src = self.prev.checkpoint.sources[name]
                src.read_through = env.end
            else:
                self.shard.signal_progress({name: env.end}, {})

    async def consume(self) -> None:
        """Hand the dequeued message to the application (Gazette ``txnConsume``)."""
        txn = self.txn
        seq = self.sequencer
        env = seq.dequeued
        assert env is not None
        if txn.consumed_count == 0:
            if self.begin_finisher is not None:
                await self.begin_finisher.begin_txn(self.shard, self.store)
            txn.began_at = self.timer.now()
            self.timer.reset(max(0.0, txn.min_dur))
            self.publisher.clock.update(time.time_ns() + self.publish_clock_delta_ns)

        result = await self.app.consume_message(self.shard, self.store, env, self.publisher)
        if result is interfaces.DEFER:
            if txn.consumed_count == 0:
                raise errors.ConsumerError(
                    "consumer transaction is empty, but the application deferred its first message"
                )
            txn.reading = False
            return
        txn.consumed_count += 1
        txn.consumed_bytes += env.end - env.begin
        await seq.step()

    def on_tick(self, tick: float) -> None:
        """The timer fired: min_dur elapsed, or max_dur (stop reading)."""
        txn = self.txn
        txn.min_dur = -1
        deadline = txn.began_at + txn.max_dur
        if tick < deadline:
            self.timer.reset(deadline - tick)
        else:
            txn.max_dur = -1
            txn.reading = False
            if txn.barrier is not None:
                txn.stalled_at = tick

    def on_barrier_resolved(self) -> None:
        """The previous transaction's commit or one of its ACKs resolved."""
        txn, prev = self.txn, self.prev
        assert not prev.acked_at
        now = self.timer.now()
        if not prev.committed_at:
            err = prev.commit_barrier.error
            if err is not None:
                raise errors.CommitError(f"store commit failed: {err}") from err
            prev.committed_at = now
        txn.barrier = None
        for ack in prev.acks:
            if ack.done():
                if ack.error is not None:
                    raise errors.AckError(f"appending an ACK: {ack.error}") from ack.error
            else:
                txn.barrier = ack
                ack.add_done_callback(self._wake)
                return
        prev.acked_at = now
        self._record(prev)
        publish_at: dict[str, int] = {}
        for ack in prev.acks:
            # ACK appends (not the recovered ones, wrapped to tolerate a deleted journal).
            response = getattr(ack, "response", None)
            if response is not None:
                publish_at[ack.journal] = response.commit.end  # type: ignore[attr-defined]
        self.shard.signal_progress(
            {j: src.read_through for j, src in prev.checkpoint.sources.items()}, publish_at
        )

    async def start_commit(self) -> pc.Checkpoint:
        """Finalize, build the Checkpoint and start the store's commit (Gazette ``txnStartCommit``)."""
        txn = self.txn
        txn.prepare_began_at = self.timer.now()
        if not txn.stalled_at:
            txn.stalled_at = txn.prepare_began_at
        await self.app.finalize_txn(self.shard, self.store, self.publisher)
        offsets, states = self.sequencer.checkpoint(PRUNE_HORIZON_NS)
        intents = self.publisher.build_ack_intents()
        txn.checkpoint = checkpoints.build_checkpoint(offsets, states, intents)
        wait_for = self.shard.append_service.pending_except("")
        # The store gets its own copy: duplicates read while it commits move this
        # transaction's read-through (progress only), never what is committed.
        committed = pc.Checkpoint()
        committed.CopyFrom(txn.checkpoint)
        barrier = self.store.start_commit(self.shard, committed, wait_for)
        if barrier.done() and barrier.error is not None:
            raise errors.CommitError(f"store commit failed: {barrier.error}") from barrier.error
        txn.commit_barrier = barrier
        txn.prepare_done_at = self.timer.now()
        return txn.checkpoint

    def acknowledge(self, cp: pc.Checkpoint) -> None:
        """Queue the ACK intents behind the commit (Gazette ``txnAcknowledge``)."""
        txn = self.txn
        for journal, intent in cp.ack_intents.items():
            aa = self.shard.append_service.start_append(journal, dependencies=[txn.commit_barrier])
            with aa:
                aa.write(intent)
            txn.acks.append(aa)

    def _record(self, txn: Txn) -> None:
        fqn = self.shard.fqn
        metrics.txn_total.inc()
        metrics.txn_messages_total.inc(txn.consumed_count)
        metrics.shard_txn_total.labels(fqn).inc()
        metrics.shard_read_msgs_total.labels(fqn).inc(txn.consumed_count)
        metrics.shard_read_bytes_total.labels(fqn).inc(txn.consumed_bytes)
        if txn.committed_at and txn.began_at:
            metrics.txn_seconds_total.inc(max(0.0, txn.committed_at - txn.began_at))


class ShardHandle(interfaces.Shard, Protocol):
    """What the loop needs of the runtime's shard beyond the application's view."""

    def signal_progress(self, read_through: dict[str, int], publish_at: dict[str, int]) -> None: ...


def _seconds(d: Any) -> float:
    return float(d.seconds) + float(d.nanos) / 1e9


def _tolerate_missing_journal(aa: AsyncAppend) -> AsyncOperation:
    """An operation like ``aa`` that succeeds if the journal no longer exists.

    A recovered ACK intent for a deleted journal has nothing left to commit.
    """
    op = AsyncOperation()

    def done() -> None:
        err = aa.error
        if err is not None and _is_journal_not_found(err):
            log.warning("discarding a recovered ACK intent of missing journal %s", aa.journal)
            err = None
        op.resolve(err)

    aa.add_done_callback(done)
    return op


def _is_journal_not_found(err: BaseException) -> bool:
    status = getattr(err, "status", None)
    return status == pb.Status.JOURNAL_NOT_FOUND
