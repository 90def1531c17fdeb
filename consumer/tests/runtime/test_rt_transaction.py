"""The transaction state machine, one transition at a time (Gazette consumer/transaction_test.go).

Fakes stand in for the sequencer, publisher, store, timer and appends: each
test sets up one situation, takes one ``step()`` and checks what changed.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest
from google.protobuf import duration_pb2

from gazette import message
from gazette.broker import protocol as pb
from gazette.broker.client import AsyncOperation
from gazette.consumer import protocol as pc
from gazette.consumer.runtime import errors, interfaces, transaction

Q = message.QueueOutcome


def env(journal: str, begin: int, end: int, doc: Any = None) -> message.Envelope:
    return message.Envelope(pb.JournalSpec(name=journal), begin, end, doc)


class FakeSequencer:
    def __init__(self) -> None:
        self.outcomes: list[Any] = []
        self.queued: list[message.Envelope] = []
        self.dequeued: message.Envelope | None = None
        self.to_dequeue: list[message.Envelope] = []
        self.pending = False
        self.replays: list[tuple[str, int, int]] = []
        self.offsets: dict[str, int] = {}

    def queue_uncommitted(self, e: message.Envelope) -> Any:
        self.queued.append(e)
        outcome = self.outcomes.pop(0)
        if outcome in (Q.ACK_COMMIT_RING, Q.OUTSIDE_COMMIT, Q.ACK_EMPTY, Q.ACK_COMMIT_REPLAY):
            self.to_dequeue.append(e)
        return outcome

    async def step(self) -> bool:
        if self.to_dequeue:
            self.dequeued = self.to_dequeue.pop(0)
            self.offsets[self.dequeued.journal.name] = self.dequeued.end
            return True
        self.dequeued = None
        return False

    def replay_range(self) -> tuple[str, int, int]:
        return ("j", 0, 10)

    def start_replay(self, it: Any) -> None:
        self.replays.append(it)

    def has_pending(self) -> bool:
        return self.pending

    def checkpoint(self, _horizon: int) -> tuple[dict[str, int], list[message.ProducerState]]:
        return dict(self.offsets), []


class FakeClock:
    def __init__(self) -> None:
        self.updates: list[int] = []

    def update(self, t: int) -> None:
        self.updates.append(t)


class FakePublisher:
    def __init__(self) -> None:
        self.clock = FakeClock()
        self.intents: list[message.AckIntent] = []

    def build_ack_intents(self) -> list[message.AckIntent]:
        out, self.intents = self.intents, []
        return out


class FakeAppend(AsyncOperation):
    def __init__(self, journal: str, deps: Any) -> None:
        super().__init__()
        self.journal = journal
        self.dependencies = list(deps)
        self.written = b""
        self.response = pb.AppendResponse()

    def __enter__(self) -> FakeAppend:
        return self

    def __exit__(self, *_: Any) -> None:
        pass

    def write(self, data: bytes) -> None:
        self.written += data


class FakeAppends:
    def __init__(self) -> None:
        self.appends: list[FakeAppend] = []
        self.pending: frozenset[AsyncOperation] = frozenset()

    def start_append(self, journal: str, dependencies: Any = ()) -> FakeAppend:
        aa = FakeAppend(journal, dependencies)
        self.appends.append(aa)
        return aa

    def pending_except(self, _journal: str) -> frozenset[AsyncOperation]:
        return self.pending


class FakeShard:
    def __init__(self, spec: pc.ShardSpec) -> None:
        self.spec = spec
        self.fqn = "/app/items/" + spec.id
        self.id = spec.id
        self.append_service = FakeAppends()
        self.progress_signals: list[tuple[dict[str, int], dict[str, int]]] = []

    def signal_progress(self, rt: dict[str, int], pa: dict[str, int]) -> None:
        self.progress_signals.append((rt, pa))


class FakeStore:
    def __init__(self) -> None:
        self.commits: list[tuple[pc.Checkpoint, Any]] = []
        self.next_op: AsyncOperation | None = None

    def start_commit(self, _shard: Any, cp: pc.Checkpoint, wait_for: Any) -> AsyncOperation:
        op = self.next_op or AsyncOperation()
        self.next_op = None
        self.commits.append((cp, wait_for))
        return op

    async def destroy(self) -> None:
        pass


@dataclasses.dataclass
class FakeApp:
    consumed: list[message.Envelope] = dataclasses.field(default_factory=list)
    finalized: int = 0
    defer: bool = False

    async def new_store(self, shard: Any) -> Any:
        raise AssertionError

    def new_message(self, spec: pb.JournalSpec) -> Any:
        return None

    async def consume_message(
        self, shard: Any, store: Any, e: message.Envelope, pub: Any
    ) -> interfaces.Consumed | None:
        if self.defer:
            return interfaces.DEFER
        self.consumed.append(e)
        return None

    async def finalize_txn(self, shard: Any, store: Any, pub: Any) -> None:
        self.finalized += 1


class FakeTimer:
    def __init__(self) -> None:
        self.t = 100.0
        self.armed: float | None = None
        self.fired: float | None = None

    def now(self) -> float:
        return self.t

    def reset(self, delay: float) -> None:
        self.armed = self.t + delay
        self.fired = None

    def stop(self) -> None:
        self.armed = None
        self.fired = None

    def poll(self) -> float | None:
        f, self.fired = self.fired, None
        return f

    def fire(self) -> None:
        assert self.armed is not None
        self.t = max(self.t, self.armed)
        self.fired = self.t
        self.armed = None


def spec(min_dur: float = 0.0, max_dur: float = 1.0, disable_wait_for_ack: bool = False) -> Any:
    s = pc.ShardSpec(id="shard-a", disable_wait_for_ack=disable_wait_for_ack)
    s.min_txn_duration.CopyFrom(duration_pb2.Duration(nanos=int(min_dur * 1e9)))
    s.max_txn_duration.CopyFrom(
        duration_pb2.Duration(seconds=int(max_dur), nanos=int((max_dur % 1) * 1e9))
    )
    return s


class Harness:
    def __init__(self, **kw: Any) -> None:
        self.wake = asyncio.Event()
        self.shard = FakeShard(spec(**kw))
        self.seq = FakeSequencer()
        self.pub = FakePublisher()
        self.store = FakeStore()
        self.app = FakeApp()
        self.timer = FakeTimer()
        self.channel = transaction.Channel(16, self.wake.set)
        self.loop = transaction.Transactions(
            self.shard,  # type: ignore[arg-type]
            self.app,
            self.store,  # type: ignore[arg-type]
            self.seq,  # type: ignore[arg-type]
            self.pub,  # type: ignore[arg-type]
            self.channel,
            self.timer,
            lambda j, b, e: ("replay", j, b, e),  # type: ignore[arg-type,return-value]
            self.wake,
        )
        # The first transaction's "previous": committed, its (no) ACKs done.
        self.loop.init_txn()

    async def put(self, e: message.Envelope, outcome: Any) -> None:
        self.seq.outcomes.append(outcome)
        await self.channel.put(e)


async def step_soon(h: Harness, within: float = 0.5) -> bool:
    async with asyncio.timeout(within):
        return await h.loop.step()


async def test_first_step_resolves_the_previous_barrier() -> None:
    h = Harness()
    assert h.loop.txn.barrier is not None
    assert not await step_soon(h)
    assert h.loop.txn.barrier is None
    # Nothing was committed before: progress is the (empty) recovered checkpoint.
    assert h.shard.progress_signals == [({}, {})]


async def test_read_of_a_committed_message_dequeues_it() -> None:
    h = Harness()
    await step_soon(h)  # barrier
    await h.put(env("j", 0, 10), Q.OUTSIDE_COMMIT)
    assert not await step_soon(h)
    assert h.seq.dequeued is not None and h.seq.dequeued.begin == 0
    assert h.app.consumed == []


async def test_consume_begins_the_transaction_and_arms_min_duration() -> None:
    h = Harness(min_dur=0.5)
    await step_soon(h)
    await h.put(env("j", 0, 10), Q.OUTSIDE_COMMIT)
    await step_soon(h)
    assert not await step_soon(h)  # consume
    assert [e.begin for e in h.app.consumed] == [0]
    assert h.loop.txn.consumed_count == 1 and h.loop.txn.consumed_bytes == 10
    assert h.loop.txn.began_at == h.timer.t
    assert h.timer.armed == pytest.approx(h.timer.t + 0.5)
    assert len(h.pub.clock.updates) == 1


async def test_uncommitted_message_is_held_and_blocks_a_fresh_transaction() -> None:
    h = Harness()
    await step_soon(h)
    await h.put(env("j", 0, 10), Q.CONTINUE_BEGIN_SPAN)
    assert not await step_soon(h)
    assert h.seq.dequeued is None and h.app.consumed == []
    # Nothing consumed yet: the transaction blocks (does not drain or commit).
    with pytest.raises(TimeoutError):
        await step_soon(h, within=0.05)


async def test_duplicate_outside_a_transaction_signals_progress() -> None:
    h = Harness()
    await step_soon(h)
    await h.put(env("j", 0, 10), Q.OUTSIDE_ALREADY_ACKED)
    await step_soon(h)
    assert h.shard.progress_signals[-1] == ({"j": 10}, {})


async def test_commit_once_nothing_is_ready() -> None:
    h = Harness()
    await step_soon(h)
    await h.put(env("j", 0, 10), Q.OUTSIDE_COMMIT)
    await step_soon(h)  # read
    await step_soon(h)  # consume (min_dur 0: the timer is armed at now)
    h.timer.fire()
    assert not await step_soon(h)  # tick: min_dur elapsed
    assert h.loop.txn.min_dur == -1
    h.pub.intents = [message.AckIntent("out", b"ack\n")]
    assert await step_soon(h)  # nothing ready, not blocked: commit
    assert h.loop.txn.phase is transaction.Phase.COMMITTING
    assert h.app.finalized == 1
    ((cp, _),) = h.store.commits
    assert cp.sources["j"].read_through == 10
    assert cp.ack_intents == {"out": b"ack\n"}
    (ack,) = h.shard.append_service.appends
    assert ack.journal == "out" and ack.written == b"ack\n"
    assert ack.dependencies == [h.loop.txn.commit_barrier]


async def test_commit_waits_for_pending_appends() -> None:
    h = Harness()
    pending = AsyncOperation()
    h.shard.append_service.pending = frozenset({pending})
    await step_soon(h)
    await h.put(env("j", 0, 10), Q.OUTSIDE_COMMIT)
    await step_soon(h)
    await step_soon(h)
    h.timer.fire()
    await step_soon(h)
    assert await step_soon(h)
    ((_, wait_for),) = h.store.commits
    assert pending in wait_for


async def test_wait_for_ack_keeps_the_transaction_open() -> None:
    h = Harness()
    await step_soon(h)
    await h.put(env("j", 0, 10), Q.OUTSIDE_COMMIT)
    await step_soon(h)
    await step_soon(h)
    h.timer.fire()
    await step_soon(h)
    h.seq.pending = True  # a span begun in this transaction awaits its ACK
    with pytest.raises(TimeoutError):
        await step_soon(h, within=0.05)
    assert h.store.commits == []


async def test_disable_wait_for_ack_commits_with_a_pending_span() -> None:
    h = Harness(disable_wait_for_ack=True)
    await step_soon(h)
    await h.put(env("j", 0, 10), Q.OUTSIDE_COMMIT)
    await step_soon(h)
    await step_soon(h)
    h.timer.fire()
    await step_soon(h)
    h.seq.pending = True
    assert await step_soon(h)
    assert len(h.store.commits) == 1


async def test_max_duration_stops_reading() -> None:
    h = Harness(max_dur=1.0)
    await step_soon(h)
    await h.put(env("j", 0, 10), Q.OUTSIDE_COMMIT)
    await step_soon(h)
    await step_soon(h)
    h.timer.fire()  # min_dur (0)
    await step_soon(h)
    assert h.timer.armed == pytest.approx(h.loop.txn.began_at + 1.0)
    h.timer.fire()  # max_dur
    await step_soon(h)
    assert h.loop.txn.max_dur == -1 and not h.loop.txn.reading
    await h.put(env("j", 10, 20), Q.OUTSIDE_COMMIT)
    assert await step_soon(h)  # commits without reading the new message
    assert len(h.channel) == 1


async def test_next_transaction_waits_for_the_previous_commit_then_its_acks() -> None:
    h = Harness()
    await step_soon(h)
    await h.put(env("j", 0, 10), Q.OUTSIDE_COMMIT)
    await step_soon(h)
    await step_soon(h)
    h.timer.fire()
    await step_soon(h)
    h.pub.intents = [message.AckIntent("out", b"ack\n")]
    assert await step_soon(h)
    commit = h.loop.txn.commit_barrier
    (ack,) = h.shard.append_service.appends
    # Next transaction.
    h.loop.prev, h.loop.txn = h.loop.txn, h.loop.prev
    h.loop.init_txn()
    with pytest.raises(TimeoutError):
        await step_soon(h, within=0.05)  # blocked on the commit
    commit.resolve()
    assert not await step_soon(h)
    assert h.loop.txn.barrier is ack  # now on the ACK
    assert h.loop.prev.committed_at
    ack.response.commit.end = 77
    ack.resolve()
    assert not await step_soon(h)
    assert h.loop.txn.barrier is None
    assert h.shard.progress_signals[-1] == ({"j": 10}, {"out": 77})


async def test_failed_commit_fails_the_next_transaction() -> None:
    h = Harness()
    await step_soon(h)
    await h.put(env("j", 0, 10), Q.OUTSIDE_COMMIT)
    await step_soon(h)
    await step_soon(h)
    h.timer.fire()
    await step_soon(h)
    assert await step_soon(h)
    h.loop.prev, h.loop.txn = h.loop.txn, h.loop.prev
    h.loop.init_txn()
    h.loop.prev.commit_barrier.resolve(RuntimeError("fenced"))
    with pytest.raises(errors.CommitError, match="fenced"):
        await step_soon(h)


async def test_commit_that_fails_at_once_is_an_error() -> None:
    h = Harness()
    h.store.next_op = AsyncOperation.finished(RuntimeError("db down"))
    await step_soon(h)
    await h.put(env("j", 0, 10), Q.OUTSIDE_COMMIT)
    await step_soon(h)
    await step_soon(h)
    h.timer.fire()
    await step_soon(h)
    with pytest.raises(errors.CommitError, match="db down"):
        await step_soon(h)


async def test_read_error_fails_the_shard() -> None:
    h = Harness()
    await step_soon(h)
    await h.channel.put(RuntimeError("examples/j@120: bad frame"))
    with pytest.raises(errors.ReadError, match="examples/j@120"):
        await step_soon(h)


async def test_deferring_the_first_message_is_an_error() -> None:
    h = Harness()
    h.app.defer = True
    await step_soon(h)
    await h.put(env("j", 0, 10), Q.OUTSIDE_COMMIT)
    await step_soon(h)
    with pytest.raises(errors.ConsumerError, match="deferred its first message"):
        await step_soon(h)


async def test_replay_starts_a_replay_read() -> None:
    h = Harness()
    await step_soon(h)
    await h.put(env("j", 20, 30), Q.ACK_COMMIT_REPLAY)
    await step_soon(h)
    assert h.seq.replays == [("replay", "j", 0, 10)]
    assert h.seq.dequeued is not None


async def test_closed_channel_with_nothing_consumed_drains() -> None:
    h = Harness()
    await step_soon(h)
    h.channel.close()
    assert not await step_soon(h)
    assert await step_soon(h)
    assert h.loop.txn.phase is transaction.Phase.DRAINED


async def test_recovered_ack_intents_are_appended_first() -> None:
    h = Harness()
    cp = pc.Checkpoint()
    cp.ack_intents["out"] = b"ack\n"
    h.loop.resend_ack_intents(cp)
    (aa,) = h.shard.append_service.appends
    assert aa.journal == "out" and aa.written == b"ack\n"
