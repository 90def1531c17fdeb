"""The Sequencer: read-uncommitted envelopes in, committed messages out, exactly once.

Gazette `message/sequencer.go`. Journals hold every message ever appended:
duplicates (a producer retried an append), messages of transactions still
open, and of transactions rolled back. The Sequencer reads them all, in
journal order and interleaved across producers, and lets out each committed
message exactly once, as soon as it commits (no head-of-line blocking: one
producer's open transaction never holds back another's messages).

Per (journal, producer) it keeps a *partial*: the clock of the producer's
last acknowledgement (``min_clock``, exclusive), the largest clock of its
open span (``max_clock``), where the span begins (``begin``, or -1), and
where the span's envelopes are in a fixed-size **ring** of recent envelopes
(a linked list threaded through the ring by ``next`` indices). An
acknowledgement whose whole span is still in the ring is served from the
ring; one whose span began before the oldest envelope the ring holds needs
a **replay**: the caller reads ``replay_range()`` again and hands that
iterator to :meth:`Sequencer.start_replay`.

Usage (what :class:`~gazette.message.ReadCommittedIter` does)::

    outcome = seq.queue_uncommitted(env)
    if outcome is message.QueueOutcome.ACK_COMMIT_REPLAY:
        journal, begin, end = seq.replay_range()
        seq.start_replay(message.ReadUncommittedIter(jc, pb.ReadRequest(
            journal=journal, offset=begin, end_offset=end), new_message))
    while await seq.step():
        handle(seq.dequeued)

:meth:`Sequencer.checkpoint` gives the read-through offsets and producer
states to persist; a Sequencer built from them resumes exactly where the
processing stopped, even in the middle of a span (the bounds are tightened
as each message is stepped past).
"""

from __future__ import annotations

import enum
import logging
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

from gazette.message import errors, interfaces, metrics, uuids

__all__ = ["QueueOutcome", "Sequencer"]

log = logging.getLogger(__name__)

_MASK48 = (1 << 48) - 1
_OUTSIDE, _CONTINUE, _ACK = 0, 1, 2


class QueueOutcome(enum.Enum):
    """What :meth:`Sequencer.queue_uncommitted` decided; values are Gazette's metric labels."""

    #: An OUTSIDE_TXN message already processed: ignored.
    OUTSIDE_ALREADY_ACKED = "outsideAlreadyAcked"
    #: An OUTSIDE_TXN message, committed: step to dequeue it.
    OUTSIDE_COMMIT = "outsideCommit"
    #: A CONTINUE_TXN message of a span already acknowledged: ignored.
    CONTINUE_ALREADY_ACKED = "continueAlreadyAcked"
    #: A CONTINUE_TXN message at or below the open span's largest clock (a duplicate): ignored.
    CONTINUE_TXN_CLOCK_LARGER = "continueRingClockLarger"
    #: A CONTINUE_TXN message which opens a span of its producer.
    CONTINUE_BEGIN_SPAN = "continueBeginSpan"
    #: A CONTINUE_TXN message which extends its producer's open span.
    CONTINUE_EXTEND_SPAN = "continueExtendSpan"
    #: An ACK_TXN which rolls the producer back to its clock, dropping the open span.
    ACK_ROLLBACK = "ackRollback"
    #: An ACK_TXN without preceding messages: step to dequeue it.
    ACK_EMPTY = "ackEmpty"
    #: An ACK_TXN whose whole span is in the ring: step to dequeue it.
    ACK_COMMIT_RING = "ackCommitRing"
    #: An ACK_TXN whose span began before the ring: start a replay, then step.
    ACK_COMMIT_REPLAY = "ackCommitReplay"

    @property
    def label(self) -> str:
        """Gazette's name of the outcome (the ``outcome`` label of ``gazette_sequencer_queued``)."""
        return str(self.value)


_Q = QueueOutcome
_IGNORED = (_Q.OUTSIDE_ALREADY_ACKED, _Q.CONTINUE_ALREADY_ACKED, _Q.CONTINUE_TXN_CLOCK_LARGER)


class _Partial:
    """The sequence state of one (journal, producer)."""

    __slots__ = ("begin", "key", "max_clock", "min_clock", "ring_start", "ring_stop")

    def __init__(self, key: tuple[str, int], min_clock: int, max_clock: int, begin: int) -> None:
        self.key = key
        self.min_clock = min_clock  # Exclusive: the last acknowledged clock.
        self.max_clock = max_clock  # Inclusive: the largest clock of the span so far.
        self.begin = begin  # Offset of the span's first message, or -1.
        self.ring_start = -1  # Ring indices of the span's first and last envelopes
        self.ring_stop = -1  # still in the ring, or -1.

    def __repr__(self) -> str:
        return (
            f"_Partial(min={self.min_clock}, max={self.max_clock}, begin={self.begin}, "
            f"ring={self.ring_start}..{self.ring_stop})"
        )


class Sequencer:
    """Sequences read-uncommitted envelopes into committed messages; see the module docstring.

    ``offsets`` and ``states`` come from a checkpoint (``{}`` and ``[]`` to
    start afresh); ``buffer`` is the ring's size (at least 1).
    """

    def __init__(
        self,
        offsets: Mapping[str, int] | None,
        states: Iterable[interfaces.ProducerState],
        buffer: int,
    ) -> None:
        cap = max(1, buffer)
        self._offsets: dict[str, int] = dict(offsets or {})
        self._partials: dict[tuple[str, int], _Partial] = {}
        self._pending: set[_Partial] = set()
        self._emit: _Partial | None = None
        self._replay_it: AsyncIterator[interfaces.Envelope] | None = None
        self._cap = cap
        self._filled = 0
        self._head = 0
        self._ring: list[interfaces.Envelope | None] = [None] * cap
        self._ring_key: list[tuple[str, int] | None] = [None] * cap
        self._ring_clock: list[int] = [0] * cap
        self._next: list[int] = [-1] * cap
        #: The committed envelope to process now; set by :meth:`step` returning True.
        self.dequeued: interfaces.Envelope | None = None
        # Its clock as queued (the application may change the message's UUID, e.g. by
        # publishing it, before stepping past it).
        self._dequeued_clock = 0
        self._counters: dict[tuple[str, int, QueueOutcome], Any] = {}
        for s in states:
            key = (s.journal, int.from_bytes(s.producer, "big"))
            self._partials[key] = _Partial(key, s.last_ack, s.last_ack, s.begin)

    @property
    def offsets(self) -> dict[str, int]:
        """Per journal, the offset reading may resume from (don't modify it)."""
        return self._offsets

    def queue_uncommitted(self, env: interfaces.Envelope) -> QueueOutcome:
        """Sequence the next read-uncommitted envelope; see :class:`QueueOutcome`.

        Must not be called while committed messages remain to dequeue.
        """
        if self._emit is not None:
            raise RuntimeError("committed messages remain to dequeue")
        self._evict_at_head()

        i = env.message.get_uuid().int
        journal = env.journal.name
        key = (journal, i & _MASK48)
        clock = real_clock = uuids.clock_of_int(i)
        flags = (i >> 48) & 0x3FF

        if clock == 0:
            # No UUID: committed at once, and not tracked (at-least-once processing).
            partial = _Partial(key, 0, 0, -1)
            flags, clock = _OUTSIDE, 1
        else:
            found = self._partials.get(key)
            if found is None:
                found = self._partials[key] = _Partial(key, clock - 1, clock - 1, -1)
            partial = found

        # Decide, without changing state.
        if flags == _CONTINUE:
            if clock <= partial.min_clock:
                outcome = _Q.CONTINUE_ALREADY_ACKED
            elif clock <= partial.max_clock:
                outcome = _Q.CONTINUE_TXN_CLOCK_LARGER
            elif partial.begin == -1:
                outcome = _Q.CONTINUE_BEGIN_SPAN
            else:
                outcome = _Q.CONTINUE_EXTEND_SPAN
        elif flags == _ACK:
            if clock < partial.min_clock:
                # The producer recovered an older checkpoint than one whose ACK we
                # saw: it will redo (and republish) work, perhaps under new UUIDs.
                # Going back with it risks duplicates; refusing would risk losses.
                self._log_error(
                    env,
                    partial,
                    "unexpected ACK_TXN which is less than lastACK (loss of exactly-once semantics)",
                )
                outcome = _Q.ACK_ROLLBACK
            elif clock == partial.min_clock:
                outcome = _Q.ACK_ROLLBACK
            elif partial.begin == -1:
                outcome = _Q.ACK_EMPTY
            elif partial.ring_start == -1:
                outcome = _Q.ACK_COMMIT_REPLAY  # None of the span is in the ring.
            elif partial.begin != self._ring[partial.ring_start].begin:  # type: ignore[union-attr]
                outcome = _Q.ACK_COMMIT_REPLAY  # Only a suffix of the span is in the ring.
            else:
                outcome = _Q.ACK_COMMIT_RING
        else:
            if flags != _OUTSIDE:
                self._log_error(env, partial, "unexpected UUID flags")
            if clock <= partial.min_clock:
                outcome = _Q.OUTSIDE_ALREADY_ACKED
            else:
                if partial.begin != -1:
                    self._log_error(
                        env,
                        partial,
                        "unexpected OUTSIDE_TXN with a preceding CONTINUE_TXN"
                        " (mixed use of publish_uncommitted and publish_committed to the same journal?)",
                    )
                outcome = _Q.OUTSIDE_COMMIT

        # Apply. Each case either sets |emit| or moves |offsets|, never both: a
        # committing message moves offsets only once it's dequeued, so that a
        # checkpoint taken before then reads it (and commits its span) again.
        if outcome in _IGNORED:
            self._offsets[journal] = env.end
        elif outcome is _Q.CONTINUE_BEGIN_SPAN or outcome is _Q.CONTINUE_EXTEND_SPAN:
            if outcome is _Q.CONTINUE_BEGIN_SPAN:
                partial.begin = env.begin
                self._pending.add(partial)
            self._add_at_head(env, key, real_clock, partial)
            partial.max_clock = clock
            self._offsets[journal] = env.end
        elif outcome is _Q.ACK_ROLLBACK:
            partial.min_clock = partial.max_clock = clock
            partial.begin = partial.ring_start = partial.ring_stop = -1
            self._pending.discard(partial)
            self._offsets[journal] = env.end
        else:  # ACK_EMPTY, ACK_COMMIT_RING, ACK_COMMIT_REPLAY, OUTSIDE_COMMIT.
            self._add_at_head(env, key, real_clock, partial)
            if outcome is _Q.ACK_EMPTY:
                partial.begin = env.begin
            elif outcome is _Q.OUTSIDE_COMMIT:
                # Any open span of the producer is clobbered (in effect, rolled back).
                partial.begin = env.begin
                partial.ring_start = partial.ring_stop
            # Commit through |clock|, which may be less than the span's largest
            # clock: messages above it are dropped when dequeuing.
            partial.max_clock = clock
            self._emit = partial

        ckey = (journal, flags, outcome)
        counter = self._counters.get(ckey)
        if counter is None:
            counter = self._counters[ckey] = metrics.SEQUENCER_QUEUED.labels(
                journal, uuids.flags_label(flags), outcome.value
            )
        counter.inc()
        return outcome

    async def step(self) -> bool:
        """Step to the next committed message: True if it is now :attr:`dequeued`.

        False when the committed span is exhausted (or nothing was committed);
        :attr:`dequeued` is then None. Stepping also marks the previously
        dequeued message as processed (checkpoints resume after it).
        """
        emit = self._emit
        if emit is None:
            return False
        ring = self._ring
        if (
            self.dequeued is None
            and self._replay_it is None
            and emit.begin != ring[emit.ring_start].begin  # type: ignore[union-attr]
        ):
            raise RuntimeError("caller was required to start_replay, and didn't")

        if self.dequeued is not None:
            emit.min_clock = self._dequeued_clock  # Tighten to the processed message.

        while emit.ring_start != -1:
            if self._replay_it is None:
                idx = emit.ring_start
                env = ring[idx]
                assert env is not None
                clock = self._ring_clock[idx]
                emit.ring_start = self._next[idx]
            else:
                replayed = await self._next_replayed(emit)
                if replayed is None:
                    continue
                env = replayed
                i = env.message.get_uuid().int
                if i & _MASK48 != emit.key[1]:
                    # Another producer's message: replayed ranges interleave them.
                    continue
                clock = uuids.clock_of_int(i)

            self.dequeued = env
            self._dequeued_clock = clock
            if clock != 0 and clock <= emit.min_clock:
                # A duplicate. None are kept in the ring, but replays can meet them,
                # and so can a ring span which straddles a recovered checkpoint
                # (checkpoints keep the last ACK, not the tightened lower bound).
                continue
            if clock > emit.max_clock:
                continue  # Not covered by the ACK: rolled back.
            emit.begin = env.begin  # Tighten to the message being processed.
            return True

        # The span is done. Its ACK (the last envelope) moves the offset only now.
        assert self.dequeued is not None
        self._offsets[emit.key[0]] = self.dequeued.end
        emit.max_clock = emit.min_clock
        emit.begin = emit.ring_start = emit.ring_stop = -1
        self._pending.discard(emit)
        self.dequeued = None
        self._emit = None
        self._dequeued_clock = 0
        return False

    async def _next_replayed(self, emit: _Partial) -> interfaces.Envelope | None:
        """The next replayed envelope, validated; None when the replay has ended."""
        it = self._replay_it
        assert it is not None
        try:
            env = await anext(it)
        except StopAsyncIteration:
            await self._close_replay()
            return None
        except errors.ReplayError:
            await self._close_replay()
            raise
        except Exception as e:
            await self._close_replay()
            raise errors.ReplayError(f"replay reader: {e}") from e
        journal = emit.key[0]
        first = self._ring[emit.ring_start]
        assert first is not None
        problem = None
        if env.journal.name != journal:
            problem = f"replay of wrong journal ({env.journal.name}; expected {journal})"
        elif env.begin < emit.begin:
            problem = f"replay has wrong Begin ({env.begin}; expected >= {emit.begin})"
        elif env.end > first.begin:
            problem = f"replay has wrong End ({env.end}; expected <= {first.begin})"
        if problem is not None:
            await self._close_replay()
            raise errors.ReplayError(problem)
        metrics.SEQUENCER_REPLAY.labels(journal).inc()
        return env

    async def _close_replay(self) -> None:
        it, self._replay_it = self._replay_it, None
        aclose = getattr(it, "aclose", None)
        if aclose is not None:
            await aclose()

    def replay_range(self) -> tuple[str, int, int]:
        """The journal and ``[begin, end)`` offsets to read again for the committed span."""
        emit = self._emit
        if emit is None:
            raise RuntimeError("no committed span to replay")
        first = self._ring[emit.ring_start]
        assert first is not None  # The committing ACK itself is always in the ring.
        return emit.key[0], emit.begin, first.begin

    def start_replay(self, it: AsyncIterator[interfaces.Envelope]) -> None:
        """Dequeue the committed span from ``it``, which reads :meth:`replay_range`.

        The Sequencer closes ``it`` (``aclose``, if it has one) when it is done with it.
        """
        if self._emit is None:
            raise RuntimeError("no committed span to replay")
        self._replay_it = it

    def has_pending(self) -> bool:
        """Whether a span was opened or extended since the last checkpoint (more may come soon)."""
        return bool(self._pending)

    def checkpoint(
        self, prune_horizon_ns: int = 0
    ) -> tuple[dict[str, int], list[interfaces.ProducerState]]:
        """Read-through offsets (a copy) and producer states to persist.

        Producers whose latest clock is older than ``prune_horizon_ns`` before
        the newest acknowledged clock of their journal are forgotten (0: keep
        all). Pending spans stop being pending.
        """
        tops: dict[str, int] = {}
        for (journal, _), p in self._partials.items():
            if p.min_clock > tops.get(journal, 0):
                tops[journal] = p.min_clock
        # Clock units are 100 ns, above 4 bits of sequence counter.
        delta = (prune_horizon_ns // 100) << 4 if prune_horizon_ns > 0 else -1
        states = []
        for key, p in list(self._partials.items()):
            threshold = max(0, tops.get(key[0], 0) - delta) if delta >= 0 else 0
            if p.max_clock >= threshold:
                states.append(
                    interfaces.ProducerState(
                        key[0], key[1].to_bytes(6, "big"), p.min_clock, p.begin
                    )
                )
            else:
                del self._partials[key]
        # A span not completed by this checkpoint no longer holds a transaction open.
        self._pending.clear()
        return dict(self._offsets), states

    def _evict_at_head(self) -> None:
        head = self._head
        if self._filled < self._cap:
            self._filled += 1  # Still filling: the slot at head is free.
            return
        if self._ring[head] is None:
            return
        key = self._ring_key[head]
        assert key is not None
        p = self._partials.get(key)
        if p is not None and p.ring_start == head:
            nxt = self._next[head]
            if p.ring_start == p.ring_stop and nxt == -1:
                p.ring_start = p.ring_stop = -1
            elif p.ring_start != p.ring_stop and nxt != -1:
                p.ring_start = nxt
            else:
                raise RuntimeError(
                    "invariant violated: ring_start == ring_stop iff next[ring_start] == -1"
                )
        self._ring[head] = None
        self._ring_key[head] = None
        self._next[head] = -1

    def _add_at_head(
        self, env: interfaces.Envelope, key: tuple[str, int], clock: int, p: _Partial
    ) -> None:
        head = self._head
        self._ring[head] = env
        self._ring_key[head] = key
        self._ring_clock[head] = clock
        self._next[head] = -1
        if p.ring_stop == -1:
            p.ring_start = head
        else:
            self._next[p.ring_stop] = head
        p.ring_stop = head
        head += 1
        self._head = 0 if head == self._cap else head

    def _log_error(self, env: interfaces.Envelope, p: _Partial, text: str) -> None:
        u = env.message.get_uuid()
        log.error(
            "%s (journal %s, offsets [%d, %d), producer %s, clock %d, flags %#x; "
            "partial min %d, max %d, begin %d, ring %d..%d)",
            text,
            env.journal.name,
            env.begin,
            env.end,
            uuids.get_producer(u).hex(),
            uuids.get_clock(u),
            uuids.get_flags(u),
            p.min_clock,
            p.max_clock,
            p.begin,
            p.ring_start,
            p.ring_stop,
            extra={"journal": env.journal.name, "begin": env.begin, "end": env.end},
        )
