"""The Sequencer: the scenarios of Gazette message/sequencer_test.go, in our words."""

from __future__ import annotations

import pytest
from msg_helpers import JOURNAL, Generator, aiter_of, zero_env

from gazette import message
from gazette.broker import protocol as pb
from gazette.message import errors

Q = message.QueueOutcome
F = message.Flags

A = b"\x01\xaa\xaa\xaa\xaa\xaa"
B = b"\x01\xbb\xbb\xbb\xbb\xbb"
C = b"\x01\xcc\xcc\xcc\xcc\xcc"


def queue(seq: message.Sequencer, *envs: message.Envelope) -> list[message.QueueOutcome]:
    return [seq.queue_uncommitted(e) for e in envs]


def partials(seq: message.Sequencer) -> dict[bytes, tuple[int, int, int, int, int]]:
    """Producer -> (begin, ring_start, ring_stop, min_clock, max_clock)."""
    return {
        key[1].to_bytes(6, "big"): (p.begin, p.ring_start, p.ring_stop, p.min_clock, p.max_clock)
        for key, p in seq._partials.items()
    }


def ring(seq: message.Sequencer) -> list[message.Envelope | None]:
    return seq._ring[: seq._filled]


def clock_of(env: message.Envelope) -> int:
    return message.get_clock(env.message.get_uuid())


async def expect_deque(seq: message.Sequencer, *expect: message.Envelope) -> None:
    for i, env in enumerate(expect):
        assert await seq.step()
        assert seq.dequeued is env
        assert seq._emit is not None
        assert seq._emit.begin == env.begin
        if i > 0:
            assert seq._emit.min_clock == clock_of(expect[i - 1])
    assert not await seq.step()
    assert seq.dequeued is None
    last = expect[-1]
    u = last.message.get_uuid()
    clock = message.get_clock(u)
    if clock != 0:
        # The partial is ready for the producer's next span.
        key = (last.journal.name, int.from_bytes(message.get_producer(u), "big"))
        p = seq._partials[key]
        assert (p.begin, p.ring_start, p.ring_stop, p.min_clock, p.max_clock) == (
            -1,
            -1,
            -1,
            clock,
            clock,
        )
    # Reading through the ACK is now recorded.
    assert seq.offsets[last.journal.name] == last.end


def expect_replay(
    seq: message.Sequencer, begin: int, end: int, *envs: message.Envelope
) -> list[bool]:
    """Check the replay range and start a replay of ``envs``; the list records its closing."""
    journal, b, e = seq.replay_range()
    assert (journal, b, e) == (envs[0].journal.name, begin, end)
    closed: list[bool] = []

    class It:
        def __init__(self) -> None:
            self.left = list(envs)
            self.done = False

        def __aiter__(self) -> It:
            return self

        async def __anext__(self) -> message.Envelope:
            assert not self.done, "unexpected extra replay call"
            if not self.left:
                self.done = True
                raise StopAsyncIteration
            return self.left.pop(0)

        async def aclose(self) -> None:
            closed.append(True)

    seq.start_replay(It())
    return closed


async def test_ring_add_and_evict() -> None:
    seq = message.Sequencer({}, [], 5)
    gen = Generator()
    e1 = gen(A, 100, F.CONTINUE_TXN)
    e2 = gen(B, 200, F.CONTINUE_TXN)
    e3 = gen(A, 300, F.CONTINUE_TXN)
    e4 = gen(A, 400, F.CONTINUE_TXN)
    e5, e6, e7, e8, e9, e10, e11 = (gen(B, c, F.CONTINUE_TXN) for c in range(500, 1200, 100))

    assert ring(seq) == [] and seq._head == 0 and partials(seq) == {}
    assert not seq.has_pending()

    assert seq.queue_uncommitted(e1) is Q.CONTINUE_BEGIN_SPAN
    assert ring(seq) == [e1] and seq._next[:1] == [-1] and seq._head == 1
    assert partials(seq) == {A: (e1.begin, 0, 0, 99, 100)}
    assert seq.has_pending()
    assert seq.offsets == {JOURNAL: e1.end}  # Continuations move read-through offsets.

    assert seq.queue_uncommitted(e2) is Q.CONTINUE_BEGIN_SPAN
    assert ring(seq) == [e1, e2] and seq._next[:2] == [-1, -1] and seq._head == 2
    assert partials(seq) == {A: (e1.begin, 0, 0, 99, 100), B: (e2.begin, 1, 1, 199, 200)}
    assert len(seq._pending) == 2

    assert seq.queue_uncommitted(e3) is Q.CONTINUE_EXTEND_SPAN
    assert ring(seq) == [e1, e2, e3] and seq._next[:3] == [2, -1, -1]  # e1 => e3.
    assert partials(seq)[A] == (e1.begin, 0, 2, 99, 300)

    assert seq.queue_uncommitted(e4) is Q.CONTINUE_EXTEND_SPAN
    assert seq._next[:4] == [2, -1, 3, -1]  # e3 => e4.
    assert partials(seq)[A] == (e1.begin, 0, 3, 99, 400)

    assert seq.queue_uncommitted(e5) is Q.CONTINUE_EXTEND_SPAN
    assert ring(seq) == [e1, e2, e3, e4, e5] and seq._next == [2, 4, 3, -1, -1]  # e2 => e5.
    assert seq._head == 0
    assert partials(seq) == {A: (e1.begin, 0, 3, 99, 400), B: (e2.begin, 1, 4, 199, 500)}

    # The ring is full: e6 evicts e1, and A's span now starts at e3.
    assert seq.queue_uncommitted(e6) is Q.CONTINUE_EXTEND_SPAN
    assert ring(seq) == [e6, e2, e3, e4, e5] and seq._next == [-1, 4, 3, -1, 0]
    assert seq._head == 1
    assert partials(seq) == {A: (e1.begin, 2, 3, 99, 400), B: (e2.begin, 1, 0, 199, 600)}

    assert queue(seq, e7, e8) == [Q.CONTINUE_EXTEND_SPAN] * 2
    assert ring(seq) == [e6, e7, e8, e4, e5] and seq._next == [1, 2, -1, -1, 0]
    assert seq._head == 3
    assert partials(seq) == {A: (e1.begin, 3, 3, 99, 400), B: (e2.begin, 4, 2, 199, 800)}

    # e9 evicts A's last envelope: A's span is still open, but none of it is in the ring.
    assert seq.queue_uncommitted(e9) is Q.CONTINUE_EXTEND_SPAN
    assert ring(seq) == [e6, e7, e8, e9, e5] and seq._next == [1, 2, 3, -1, 0]
    assert partials(seq) == {A: (e1.begin, -1, -1, 99, 400), B: (e2.begin, 4, 3, 199, 900)}

    assert seq.queue_uncommitted(e10) is Q.CONTINUE_EXTEND_SPAN
    assert ring(seq) == [e6, e7, e8, e9, e10] and seq._next == [1, 2, 3, 4, -1]
    assert partials(seq) == {A: (e1.begin, -1, -1, 99, 400), B: (e2.begin, 0, 4, 199, 1000)}

    assert seq.queue_uncommitted(e11) is Q.CONTINUE_EXTEND_SPAN
    assert ring(seq) == [e11, e7, e8, e9, e10] and seq._next == [-1, 2, 3, 4, 0]
    assert seq._head == 1
    assert partials(seq) == {A: (e1.begin, -1, -1, 99, 400), B: (e2.begin, 1, 0, 199, 1100)}
    assert seq.offsets == {JOURNAL: e11.end}


async def test_transaction_cases() -> None:
    gen = Generator()
    seq = message.Sequencer({}, [], 3)

    # Duplicates within a span, all served from the ring.
    a1, a2 = gen(A, 1, F.CONTINUE_TXN), gen(A, 2, F.CONTINUE_TXN)
    a1_dup, a2_dup = gen(A, 1, F.CONTINUE_TXN), gen(A, 2, F.CONTINUE_TXN)
    a3_ack = gen(A, 3, F.ACK_TXN)
    assert queue(seq, a1, a2, a1_dup, a2_dup, a3_ack) == [
        Q.CONTINUE_BEGIN_SPAN,
        Q.CONTINUE_EXTEND_SPAN,
        Q.CONTINUE_TXN_CLOCK_LARGER,
        Q.CONTINUE_TXN_CLOCK_LARGER,
        Q.ACK_COMMIT_RING,
    ]
    await expect_deque(seq, a1, a2, a3_ack)
    assert not seq.has_pending()

    # An ACK without preceding messages: unusual, but allowed.
    a4_ack = gen(A, 4, F.ACK_TXN)
    assert queue(seq, a4_ack) == [Q.ACK_EMPTY]
    await expect_deque(seq, a4_ack)

    # An ACK of only part of the preceding messages.
    a5 = gen(A, 5, F.CONTINUE_TXN)
    a7_no_ack = gen(A, 7, F.CONTINUE_TXN)  # Above the ACK: dropped.
    a6_ack = gen(A, 6, F.ACK_TXN)
    assert queue(seq, a5, a7_no_ack, a6_ack) == [
        Q.CONTINUE_BEGIN_SPAN,
        Q.CONTINUE_EXTEND_SPAN,
        Q.ACK_COMMIT_RING,
    ]
    await expect_deque(seq, a5, a6_ack)
    assert not seq.has_pending()

    # A rollback, with producer B interleaved.
    b1 = gen(B, 1, F.CONTINUE_TXN)  # Evicted later.
    a7_rollback = gen(A, 7, F.CONTINUE_TXN)  # Evicted later.
    a8_rollback = gen(A, 8, F.CONTINUE_TXN)
    b2 = gen(B, 2, F.CONTINUE_TXN)
    a6_abort = gen(A, 6, F.ACK_TXN)  # Back to clock 6.
    assert queue(seq, a7_rollback, b1, a7_rollback, a8_rollback, b2, a6_abort) == [
        Q.CONTINUE_BEGIN_SPAN,
        Q.CONTINUE_BEGIN_SPAN,
        Q.CONTINUE_TXN_CLOCK_LARGER,
        Q.CONTINUE_EXTEND_SPAN,
        Q.CONTINUE_EXTEND_SPAN,
        Q.ACK_ROLLBACK,
    ]
    assert seq._emit is None  # Nothing to dequeue.
    assert seq.has_pending()  # B is still open.
    assert partials(seq) == {A: (-1, -1, -1, 6, 6), B: (b1.begin, 1, 1, 0, 2)}

    # B's ACK: part of its span was evicted, so it's replayed.
    b3_ack = gen(B, 3, F.ACK_TXN)
    assert queue(seq, b3_ack) == [Q.ACK_COMMIT_REPLAY]
    closed = expect_replay(seq, b1.begin, b2.begin, b1, a7_rollback, a8_rollback)
    await expect_deque(seq, b1, b2, b3_ack)
    assert closed == [True]
    assert not seq.has_pending()

    # A replayed span with duplicates inside it and from before it, met both in
    # the ring and in the replay.
    b4 = gen(B, 4, F.CONTINUE_TXN)  # Evicted.
    b1_dup = gen(B, 1, F.CONTINUE_TXN)
    b4_dup = gen(B, 4, F.CONTINUE_TXN)
    b5 = gen(B, 5, F.CONTINUE_TXN)  # Evicted.
    b6 = gen(B, 6, F.CONTINUE_TXN)
    b2_dup = gen(B, 2, F.CONTINUE_TXN)
    b7 = gen(B, 7, F.CONTINUE_TXN)
    b8_ack = gen(B, 8, F.ACK_TXN)
    assert queue(seq, b4, b1_dup, b4_dup, b5, b6, b2_dup, b7, b8_ack) == [
        Q.CONTINUE_BEGIN_SPAN,
        Q.CONTINUE_ALREADY_ACKED,
        Q.CONTINUE_TXN_CLOCK_LARGER,
        Q.CONTINUE_EXTEND_SPAN,
        Q.CONTINUE_EXTEND_SPAN,
        Q.CONTINUE_ALREADY_ACKED,
        Q.CONTINUE_EXTEND_SPAN,
        Q.ACK_COMMIT_REPLAY,
    ]
    expect_replay(seq, b4.begin, b6.begin, b4, b1_dup, b4_dup, b5)
    await expect_deque(seq, b4, b5, b6, b7, b8_ack)
    assert not seq.has_pending()

    # A partial rollback where every ring entry is skipped.
    b9 = gen(B, 9, F.CONTINUE_TXN)  # Evicted.
    b11_no_ack = gen(B, 11, F.CONTINUE_TXN)  # Evicted.
    b12_no_ack = gen(B, 12, F.CONTINUE_TXN)
    b13_no_ack = gen(B, 13, F.CONTINUE_TXN)
    b10_ack = gen(B, 10, F.ACK_TXN)
    assert queue(seq, b9, b11_no_ack, b12_no_ack, b13_no_ack, b10_ack) == [
        Q.CONTINUE_BEGIN_SPAN,
        Q.CONTINUE_EXTEND_SPAN,
        Q.CONTINUE_EXTEND_SPAN,
        Q.CONTINUE_EXTEND_SPAN,
        Q.ACK_COMMIT_REPLAY,
    ]
    expect_replay(seq, b9.begin, b12_no_ack.begin, b9, b11_no_ack)
    await expect_deque(seq, b9, b10_ack)
    assert not seq.has_pending()

    # Two interleaved committed spans, each needing a replay.
    b11 = gen(B, 11, F.CONTINUE_TXN)  # Evicted.
    a7 = gen(A, 7, F.CONTINUE_TXN)  # Evicted.
    a8 = gen(A, 8, F.CONTINUE_TXN)
    b12 = gen(B, 12, F.CONTINUE_TXN)
    a9_ack = gen(A, 9, F.ACK_TXN)
    b13_ack = gen(B, 13, F.ACK_TXN)
    assert queue(seq, b11, a7, a8, b12, a9_ack) == [
        Q.CONTINUE_BEGIN_SPAN,
        Q.CONTINUE_BEGIN_SPAN,
        Q.CONTINUE_EXTEND_SPAN,
        Q.CONTINUE_EXTEND_SPAN,
        Q.ACK_COMMIT_REPLAY,
    ]
    expect_replay(seq, a7.begin, a8.begin, a7)
    await expect_deque(seq, a7, a8, a9_ack)
    assert seq.has_pending()

    assert queue(seq, b13_ack) == [Q.ACK_COMMIT_REPLAY]
    expect_replay(seq, b11.begin, b12.begin, b11, a7, a8)
    await expect_deque(seq, b11, b12, b13_ack)
    assert not seq.has_pending()

    # A reset to an earlier ACK, then clocks used again.
    b8_ack_reset = gen(B, 8, F.ACK_TXN)
    b9_reuse = gen(B, 9, F.CONTINUE_TXN)
    b10_ack_reuse = gen(B, 10, F.ACK_TXN)
    assert queue(seq, b8_ack_reset, b9_reuse, b10_ack_reuse) == [
        Q.ACK_ROLLBACK,
        Q.CONTINUE_BEGIN_SPAN,
        Q.ACK_COMMIT_RING,
    ]
    await expect_deque(seq, b9_reuse, b10_ack_reuse)
    assert not seq.has_pending()


async def test_transactions_without_a_ring_buffer() -> None:
    gen = Generator()
    seq = message.Sequencer({}, [], 0)  # Made a ring of one: every span is replayed.
    a1, a2 = gen(A, 1, F.CONTINUE_TXN), gen(A, 2, F.CONTINUE_TXN)
    b1 = gen(B, 1, F.CONTINUE_TXN)
    a1_dup, a2_dup = gen(A, 1, F.CONTINUE_TXN), gen(A, 2, F.CONTINUE_TXN)
    a3_ack = gen(A, 3, F.ACK_TXN)
    b2, b3_ack = gen(B, 2, F.CONTINUE_TXN), gen(B, 3, F.ACK_TXN)

    assert queue(seq, a1, a2, b1, a1_dup, a2_dup, a3_ack) == [
        Q.CONTINUE_BEGIN_SPAN,
        Q.CONTINUE_EXTEND_SPAN,
        Q.CONTINUE_BEGIN_SPAN,
        Q.CONTINUE_TXN_CLOCK_LARGER,
        Q.CONTINUE_TXN_CLOCK_LARGER,
        Q.ACK_COMMIT_REPLAY,
    ]
    expect_replay(seq, a1.begin, a3_ack.begin, a1, a2, b1, a1_dup, a2_dup)
    await expect_deque(seq, a1, a2, a3_ack)
    assert seq.has_pending()  # B is still open.

    assert queue(seq, b2, b3_ack) == [Q.CONTINUE_EXTEND_SPAN, Q.ACK_COMMIT_REPLAY]
    expect_replay(seq, b1.begin, b3_ack.begin, b1, a1_dup, a2_dup, a3_ack, b2)
    await expect_deque(seq, b1, b2, b3_ack)
    assert not seq.has_pending()


async def test_outside_transaction_cases() -> None:
    gen = Generator()
    seq = message.Sequencer({}, [], 0)

    # OUTSIDE_TXN messages dequeue at once.
    a1, a2 = gen(A, 1, F.OUTSIDE_TXN), gen(A, 2, F.OUTSIDE_TXN)
    assert queue(seq, a1) == [Q.OUTSIDE_COMMIT]
    await expect_deque(seq, a1)
    assert queue(seq, a2) == [Q.OUTSIDE_COMMIT]
    await expect_deque(seq, a2)
    assert not seq.has_pending()
    assert seq.offsets == {JOURNAL: a2.end}

    # Duplicates are ignored, and move the offset.
    a1_dup, a2_dup = gen(A, 1, F.OUTSIDE_TXN), gen(A, 2, F.OUTSIDE_TXN)
    assert queue(seq, a1_dup, a2_dup) == [Q.OUTSIDE_ALREADY_ACKED] * 2
    assert seq._emit is None
    assert seq.offsets == {JOURNAL: a2_dup.end}

    # An OUTSIDE_TXN message drops its producer's open span.
    a3_discard, a4_discard = gen(A, 3, F.CONTINUE_TXN), gen(A, 4, F.CONTINUE_TXN)
    a5 = gen(A, 5, F.OUTSIDE_TXN)
    assert queue(seq, a3_discard, a4_discard, a5) == [
        Q.CONTINUE_BEGIN_SPAN,
        Q.CONTINUE_EXTEND_SPAN,
        Q.OUTSIDE_COMMIT,
    ]
    await expect_deque(seq, a5)
    assert not seq.has_pending()
    assert seq.offsets == {JOURNAL: a5.end}

    # Unknown flags are taken as OUTSIDE_TXN.
    a6_discard = gen(A, 6, F.CONTINUE_TXN)
    a7_bad_bits, a7_bad_bits_dup = gen(A, 7, 0x100), gen(A, 7, 0x100)
    assert queue(seq, a6_discard, a7_bad_bits) == [Q.CONTINUE_BEGIN_SPAN, Q.OUTSIDE_COMMIT]
    await expect_deque(seq, a7_bad_bits)
    assert queue(seq, a7_bad_bits_dup) == [Q.OUTSIDE_ALREADY_ACKED]
    assert seq._emit is None

    # Messages with the zero UUID always dequeue, untracked.
    z1, z2 = zero_env(gen), zero_env(gen)
    assert queue(seq, z1) == [Q.OUTSIDE_COMMIT]
    await expect_deque(seq, z1)
    assert queue(seq, z2) == [Q.OUTSIDE_COMMIT]
    await expect_deque(seq, z2)
    assert not seq.has_pending()
    assert partials(seq) == {A: (-1, -1, -1, 7, 7)}
    assert seq.offsets == {JOURNAL: z2.end}


async def test_producer_states_round_trip() -> None:
    gen = Generator()
    seq1 = message.Sequencer({}, [], 12)
    a1, a2 = gen(A, 1, F.CONTINUE_TXN), gen(A, 2, F.CONTINUE_TXN)
    b1, b2 = gen(B, 1, F.CONTINUE_TXN), gen(B, 2, F.CONTINUE_TXN)
    c1_ack = gen(C, 1, F.ACK_TXN)
    b3_ack = gen(B, 3, F.ACK_TXN)
    c2 = gen(C, 2, F.CONTINUE_TXN)
    c1_rollback = gen(C, 1, F.ACK_TXN)
    a3_ack = gen(A, 3, F.ACK_TXN)
    z1 = zero_env(gen)

    assert queue(seq1, a1, a2, b1, b2, c1_ack) == [
        Q.CONTINUE_BEGIN_SPAN,
        Q.CONTINUE_EXTEND_SPAN,
        Q.CONTINUE_BEGIN_SPAN,
        Q.CONTINUE_EXTEND_SPAN,
        Q.ACK_EMPTY,
    ]
    await expect_deque(seq1, c1_ack)
    assert seq1.has_pending()
    assert queue(seq1, z1) == [Q.OUTSIDE_COMMIT]
    await expect_deque(seq1, z1)

    # A checkpoint ends pending-ness: only spans moved since it are pending.
    assert seq1.has_pending()
    offsets, states = seq1.checkpoint(0)
    assert not seq1.has_pending()

    seq2 = message.Sequencer(offsets, states, 12)
    _, states2 = seq2.checkpoint(0)
    assert not seq2.has_pending()

    expect = [
        message.ProducerState(JOURNAL, A, 0, a1.begin),
        message.ProducerState(JOURNAL, B, 0, b1.begin),
        message.ProducerState(JOURNAL, C, 1, -1),
    ]
    for got in (states, states2):
        assert sorted(got, key=lambda s: s.producer) == expect
    assert offsets == {JOURNAL: z1.end}

    # Both sequencers yield the same from here, though seq2 needs replays.
    assert queue(seq1, b3_ack) == [Q.ACK_COMMIT_RING]
    assert queue(seq2, b3_ack) == [Q.ACK_COMMIT_REPLAY]
    expect_replay(seq2, b1.begin, b3_ack.begin, b1, b2, c1_ack)
    await expect_deque(seq1, b1, b2, b3_ack)
    await expect_deque(seq2, b1, b2, b3_ack)

    for seq in (seq1, seq2):
        assert queue(seq, c2, c1_rollback) == [Q.CONTINUE_BEGIN_SPAN, Q.ACK_ROLLBACK]
        assert seq._emit is None

    assert queue(seq1, a3_ack) == [Q.ACK_COMMIT_RING]
    assert queue(seq2, a3_ack) == [Q.ACK_COMMIT_REPLAY]
    expect_replay(seq2, a1.begin, a3_ack.begin, a1, a2, b1, b2, c1_ack)
    await expect_deque(seq1, a1, a2, a3_ack)
    await expect_deque(seq2, a1, a2, a3_ack)


async def test_producer_states_round_trip_during_dequeue() -> None:
    gen = Generator()
    seq1 = message.Sequencer({}, [], 12)
    a1, a2, a3_ack = gen(A, 1, F.CONTINUE_TXN), gen(A, 2, F.CONTINUE_TXN), gen(A, 3, F.ACK_TXN)
    a4, a5, a6_ack = gen(A, 4, F.CONTINUE_TXN), gen(A, 5, F.CONTINUE_TXN), gen(A, 6, F.ACK_TXN)

    assert queue(seq1, a1, a2, a3_ack) == [
        Q.CONTINUE_BEGIN_SPAN,
        Q.CONTINUE_EXTEND_SPAN,
        Q.ACK_COMMIT_RING,
    ]
    assert await seq1.step()  # At a1; suppose we crash before processing it.
    offsets, states = seq1.checkpoint(0)

    # Round-trip the states through new sequencers, twice.
    seq2 = message.Sequencer(offsets, states, 12)
    offsets, states = seq2.checkpoint(0)
    seq2 = message.Sequencer(offsets, states, 12)

    # Both stand just before a3_ack.
    for seq in (seq1, seq2):
        offsets, states = seq.checkpoint(0)
        assert offsets == {JOURNAL: a2.end}
        assert states == [message.ProducerState(JOURNAL, A, 0, a1.begin)]

    # seq2 reads a3_ack again.
    assert queue(seq2, a3_ack) == [Q.ACK_COMMIT_REPLAY]
    expect_replay(seq2, a1.begin, a3_ack.begin, a1, a2)
    assert await seq1.step()  # a2.
    assert await seq1.step()  # a3_ack.
    assert not await seq1.step()
    await expect_deque(seq2, a1, a2, a3_ack)

    # seq1 checkpoints part way through the next span.
    assert queue(seq1, a4, a5, a6_ack) == [
        Q.CONTINUE_BEGIN_SPAN,
        Q.CONTINUE_EXTEND_SPAN,
        Q.ACK_COMMIT_RING,
    ]
    assert await seq1.step()  # a4.
    assert await seq1.step()  # a5; crash.

    offsets, states = seq1.checkpoint(0)
    seq2 = message.Sequencer(offsets, states, 12)
    offsets, states = seq2.checkpoint(0)
    seq2 = message.Sequencer(offsets, states, 12)

    # Both stand before a6_ack, with bounds tightened past a4.
    for seq in (seq1, seq2):
        offsets, states = seq.checkpoint(0)
        assert offsets == {JOURNAL: a5.end}
        assert states == [message.ProducerState(JOURNAL, A, 4, a5.begin)]

    # seq2 reads a6_ack again and dequeues from a5 (not a4).
    assert queue(seq2, a6_ack) == [Q.ACK_COMMIT_REPLAY]
    expect_replay(seq2, a5.begin, a6_ack.begin, a5)
    await expect_deque(seq2, a5, a6_ack)


async def test_producer_states_straddle_a_duplicate() -> None:
    gen = Generator()
    seq1 = message.Sequencer({}, [], 12)
    a1, a2, a3 = (gen(A, c, F.CONTINUE_TXN) for c in (1, 2, 3))
    a1_dup, a2_dup, a3_dup = (gen(A, c, F.CONTINUE_TXN) for c in (1, 2, 3))
    a4_ack = gen(A, 4, F.ACK_TXN)

    assert queue(seq1, a1, a2, a3) == [Q.CONTINUE_BEGIN_SPAN] + [Q.CONTINUE_EXTEND_SPAN] * 2
    assert seq1._emit is None

    offsets, states = seq1.checkpoint(0)
    seq2 = message.Sequencer(offsets, states, 12)

    assert queue(seq1, a1_dup, a2_dup, a3_dup, a4_ack) == [Q.CONTINUE_TXN_CLOCK_LARGER] * 3 + [
        Q.ACK_COMMIT_RING
    ]
    # The restored sequencer knows the span's begin but not its clocks: it keeps
    # the duplicates, and drops them when dequeuing.
    assert queue(seq2, a1_dup, a2_dup, a3_dup, a4_ack) == [Q.CONTINUE_EXTEND_SPAN] * 3 + [
        Q.ACK_COMMIT_REPLAY
    ]
    expect_replay(seq2, a1.begin, a1_dup.begin, a1, a2, a3)
    await expect_deque(seq1, a1, a2, a3, a4_ack)
    await expect_deque(seq2, a1, a2, a3, a4_ack)


async def test_producer_pruning() -> None:
    gen = Generator()
    seq = message.Sequencer({}, [], 12)
    # Clock units are 100 ns above 4 bits of sequence counter.
    a_cont = gen(A, 10 << 4, F.CONTINUE_TXN)
    b_cont = gen(B, 19 << 4, F.CONTINUE_TXN)
    b_ack = gen(B, 20 << 4, F.ACK_TXN)
    c_cont = gen(C, 30 << 4, F.CONTINUE_TXN)
    assert queue(seq, a_cont, b_cont, b_ack) == [
        Q.CONTINUE_BEGIN_SPAN,
        Q.CONTINUE_BEGIN_SPAN,
        Q.ACK_COMMIT_RING,
    ]
    await expect_deque(seq, b_cont, b_ack)
    assert queue(seq, c_cont) == [Q.CONTINUE_BEGIN_SPAN]

    def states_of(horizon_ns: int) -> list[message.ProducerState]:
        return sorted(seq.checkpoint(horizon_ns)[1], key=lambda s: s.producer)

    sa = message.ProducerState(JOURNAL, A, (10 << 4) - 1, a_cont.begin)
    sb = message.ProducerState(JOURNAL, B, 20 << 4, -1)
    sc = message.ProducerState(JOURNAL, C, (30 << 4) - 1, c_cont.begin)

    assert states_of(20 * 100) == [sa, sb, sc]  # Nothing is old enough.
    assert len(seq._partials) == 3
    assert states_of(19 * 100) == [sb, sc]  # A is pruned.
    assert len(seq._partials) == 2
    assert states_of(1) == [sc]  # B is pruned.
    assert len(seq._partials) == 1
    assert states_of(0) == [sc]  # Zero prunes nothing.


@pytest.mark.parametrize(
    ("case", "expect"),
    [
        ("ok", ""),
        ("reader error", "replay reader: boom"),
        ("wrong journal", "replay of wrong journal (wrong/journal; expected test/journal)"),
        ("early begin", "replay has wrong Begin (101; expected >= 102)"),
        ("late end", "replay has wrong End (302; expected <= 204)"),
    ],
)
async def test_replay_reader_errors(case: str, expect: str) -> None:
    gen = Generator()
    seq = message.Sequencer({}, [], 0)
    b1 = gen(B, 1, F.CONTINUE_TXN)
    a2 = gen(A, 2, F.CONTINUE_TXN)
    a3_ack = gen(A, 3, F.ACK_TXN)
    assert queue(seq, b1, a2, a3_ack) == [
        Q.CONTINUE_BEGIN_SPAN,
        Q.CONTINUE_BEGIN_SPAN,
        Q.ACK_COMMIT_REPLAY,
    ]
    assert seq.replay_range() == (JOURNAL, a2.begin, a3_ack.begin)
    closed: list[bool] = []

    class It:
        def __aiter__(self) -> It:
            return self

        async def __anext__(self) -> message.Envelope:
            env = a2
            if case == "reader error":
                raise RuntimeError("boom")
            if case == "wrong journal":
                wrong = pb.JournalSpec(name="wrong/journal")
                env = message.Envelope(wrong, env.begin, env.end, env.message)
            elif case == "early begin":
                env = message.Envelope(env.journal, env.begin - 1, env.end, env.message)
            elif case == "late end":
                env = message.Envelope(env.journal, env.begin, env.end + 100, env.message)
            return env

        async def aclose(self) -> None:
            closed.append(True)

    seq.start_replay(It())
    if not expect:
        assert await seq.step()
        assert seq.dequeued is a2
        return
    with pytest.raises(errors.ReplayError) as exc:
        await seq.step()
    assert str(exc.value) == expect
    assert closed == [True]  # A failed replay is closed.


async def test_misuse_is_refused() -> None:
    gen = Generator()
    seq = message.Sequencer({}, [], 0)
    with pytest.raises(RuntimeError, match="no committed span"):
        seq.replay_range()
    with pytest.raises(RuntimeError, match="no committed span"):
        seq.start_replay(aiter_of([]))
    assert not await seq.step()

    a1, a2_ack = gen(A, 1, F.CONTINUE_TXN), gen(A, 2, F.ACK_TXN)
    assert queue(seq, a1, a2_ack) == [Q.CONTINUE_BEGIN_SPAN, Q.ACK_COMMIT_REPLAY]
    with pytest.raises(RuntimeError, match="committed messages remain"):
        seq.queue_uncommitted(gen(A, 3, F.OUTSIDE_TXN))
    with pytest.raises(RuntimeError, match="start_replay"):
        await seq.step()


async def test_dequeue_keeps_the_clock_seen_when_queued() -> None:
    # An application may publish a dequeued message, which gives it a new UUID:
    # the sequencer tightens to the clock it queued, not the new one.
    gen = Generator()
    seq = message.Sequencer({}, [], 8)
    a1, a2, a3_ack = gen(A, 1, F.CONTINUE_TXN), gen(A, 2, F.CONTINUE_TXN), gen(A, 3, F.ACK_TXN)
    queue(seq, a1, a2, a3_ack)
    assert await seq.step()
    assert seq.dequeued is not None
    seq.dequeued.message.set_uuid(message.build_uuid(C, 1000, F.OUTSIDE_TXN))
    assert await seq.step()
    assert seq.dequeued is a2
    assert seq._emit is not None and seq._emit.min_clock == 1


async def test_outcome_labels_are_gazettes() -> None:
    assert [o.label for o in message.QueueOutcome] == [
        "outsideAlreadyAcked",
        "outsideCommit",
        "continueAlreadyAcked",
        "continueRingClockLarger",
        "continueBeginSpan",
        "continueExtendSpan",
        "ackRollback",
        "ackEmpty",
        "ackCommitRing",
        "ackCommitReplay",
    ]
