"""The append FSM, driven one transition at a time against in-process fakes."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
from typing import Any

import pytest

from gazette.broker import protocol as pb
from gazette.broker.protocol import protocol_pb2 as pb2
from gazette.broker.server import errors, flow_control
from gazette.broker.server.append_fsm import AppendFSM, State

LOCAL = pb2.ProcessSpec.ID(zone="a", suffix="local")
PEER = pb2.ProcessSpec.ID(zone="b", suffix="peer")
OK = pb2.Status.OK


class FakeSpool:
    def __init__(self, journal: str = "a/journal") -> None:
        self.spec = pb2.Fragment(journal=journal, compression_codec=pb2.NONE)
        self.registers = pb2.LabelSet()
        self.delta = b""
        self.confirmed_end = 0
        self.file = None

    async def record_confirmed(self, file: Any = None, end: int | None = None) -> None:
        pass

    def confirm(self, end: int) -> None:
        if self.spec.begin <= end <= self.spec.end:
            self.confirmed_end = max(self.confirmed_end, end)

    def next(self) -> pb2.Fragment:
        f = pb2.Fragment()
        f.CopyFrom(self.spec)
        f.end += len(self.delta)
        return f


class FakePipeline:
    def __init__(self, header: pb2.Header, spool: FakeSpool) -> None:
        self.header, self.spool = header, spool
        self.sent: list[pb2.ReplicateRequest] = []
        self.sync_result: tuple[int, Any, int] = (0, None, 0)
        self._send_err: BaseException | None = None
        self._recv_err: BaseException | None = None
        # A peer whose stream ends (failed) before the commit is sent.
        self.peer_ended: BaseException | None = None
        self._barrier: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._barrier.set_result(None)
        self.shut = False

    async def scatter(self, req: pb2.ReplicateRequest) -> None:
        self.sent.append(req)
        if req.content:
            self.spool.delta += req.content
        elif req.HasField("proposal"):
            if req.proposal.end > self.spool.spec.end + len(self.spool.delta) or (
                req.proposal.begin == req.proposal.end == self.spool.spec.end
            ):
                self.spool.spec = req.proposal
            elif req.proposal == self.spool.next() and self.spool.delta:
                self.spool.spec = req.proposal
                self.spool.registers = req.registers
            self.spool.delta = b""

    async def acknowledged(self):
        await self._barrier
        return self.failure()

    def failure(self):
        return self._send_err or self._recv_err

    async def note_ended_peers(self) -> None:
        if self.peer_ended is not None:
            self._recv_err = self.peer_ended

    def idle(self) -> bool:
        return self._barrier.done() and self._send_err is None and self._recv_err is None

    def break_off(self, err: BaseException) -> None:
        self.broken = err
        self._send_err = err

    def send_err(self):
        return self._send_err

    def recv_err(self):
        return self._recv_err

    async def gather_sync(self):
        return self.sync_result

    async def gather_ok(self) -> None:
        pass

    async def gather_eof(self) -> None:
        pass

    def barrier(self):
        wait_for = self._barrier
        self._barrier = asyncio.get_running_loop().create_future()
        return wait_for, self._barrier

    async def close_send(self) -> None:
        pass

    async def shutdown(self, expect_err: bool) -> None:
        self.shut = True


class FakeIndex:
    def __init__(self) -> None:
        self.summary_value = (0, 0, 0)

    first_refresh_done = True

    async def wait_first_refresh(self) -> None:
        pass

    def summary(self):
        return self.summary_value


@dataclasses.dataclass
class FakeReplica:
    index: FakeIndex = dataclasses.field(default_factory=FakeIndex)
    spool_slot: asyncio.Queue[Any] = dataclasses.field(default_factory=lambda: asyncio.Queue(1))
    pipeline_slot: asyncio.Queue[Any] = dataclasses.field(default_factory=lambda: asyncio.Queue(1))
    flow: Any = dataclasses.field(default_factory=flow_control.FlowState)
    journal: str = "a/journal"
    flushes: int = 0
    # Answers of head_recovery_ready, and the (spool end, index end) it was asked about.
    recovery_ready: bool = False
    recovery_asks: list[tuple[int, int]] = dataclasses.field(default_factory=list)
    gap_closed: int = 0
    # settle_held calls: (head, adopt).
    settled: list[tuple[int, bool]] = dataclasses.field(default_factory=list)
    confirmations: int = 0
    unknowable: list[tuple[int, int]] = dataclasses.field(default_factory=list)
    fence: Any = None

    def tell_confirmed_soon(self) -> None:
        self.confirmations += 1

    def settle_held(self, head: int, *, adopt: bool) -> None:
        self.settled.append((head, adopt))

    def request_flush(self) -> None:
        self.flushes += 1

    def head_recovery_ready(self, spool_end: int, index_end: int) -> bool:
        self.recovery_asks.append((spool_end, index_end))
        return self.recovery_ready

    def head_gap_closed(self) -> None:
        self.gap_closed += 1

    def refuse_head_gap(self, spool_end: int, index_end: int, why: str) -> None:
        self.unknowable.append((spool_end, index_end))


@dataclasses.dataclass
class FakeResolution:
    status: int
    header: pb2.Header
    local_id: pb2.ProcessSpec.ID
    journal_spec: pb2.JournalSpec | None
    replica: FakeReplica | None
    invalidated: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    assignments_consistent: bool = True


class FakeDeps:
    def __init__(self, *, primary: pb2.ProcessSpec.ID = LOCAL, replication: int = 2) -> None:
        self.spec = pb2.JournalSpec(name="a/journal", replication=replication)
        self.spec.fragment.length = 1 << 20
        self.spec.fragment.compression_codec = pb2.NONE
        self.replica = FakeReplica()
        self.spool = FakeSpool()
        self.replica.spool_slot.put_nowait(self.spool)
        self.replica.pipeline_slot.put_nowait(None)
        self.primary = primary
        self.status = OK
        self.consistent = True
        self.resolves: list[dict[str, Any]] = []
        self.assignment_updates = 0
        self.spec_updates: list[pb2.JournalSpec] = []
        self.health_err: str | None = None
        self.flow_limits = flow_control.FlowLimits()
        # The journal's acknowledgement fence (None: it has none).
        self.fence: int | None = 0

    async def resolve(self, journal, **kw):
        self.resolves.append(kw)
        hdr = pb2.Header(process_id=self.primary)
        hdr.route.members.extend(sorted([LOCAL, PEER], key=lambda i: (i.zone, i.suffix)))
        hdr.route.primary = list(hdr.route.members).index(self.primary)
        hdr.etcd.revision = 10
        return FakeResolution(
            self.status, hdr, LOCAL, self.spec, self.replica, assignments_consistent=self.consistent
        )

    async def head_resumes_at(self, journal, index_end):
        return None if self.fence is None else max(index_end, self.fence)

    def new_pipeline(self, res, spool):
        self.pln = FakePipeline(res.header, spool)
        return self.pln

    async def update_assignments(self, res):
        self.assignment_updates += 1
        return 11

    async def update_journal_spec(self, res, spec):
        self.spec_updates.append(spec)
        self.spec = spec
        return 12

    def maybe_roll(self, spool, roll_to, spec):
        if spool.spec.end == spool.spec.begin or (roll_to and roll_to != spool.spec.begin):
            f = pb2.Fragment()
            f.CopyFrom(spool.spec)
            f.end = max(f.end, roll_to)
            f.begin = f.end
            f.compression_codec = spec.fragment.compression_codec
            return f
        return spool.spec

    async def await_store_health(self, res):
        return self.health_err

    def store_healthy(self, res):
        return self.health_err is None

    def desired_replication(self, spec):
        return spec.replication


def fsm_for(deps: FakeDeps, **req: Any) -> AppendFSM:
    return AppendFSM(deps, pb2.AppendRequest(journal="a/journal", **req), clock=lambda: 1e9)


async def step_expect(fsm: AppendFSM, *states: State) -> None:
    for s in states:
        await fsm.step()
        assert fsm.state == s, (fsm.state, s)


async def to_stream_content(fsm: AppendFSM) -> None:
    await step_expect(
        fsm,
        State.ACQUIRE_PIPELINE,
        State.START_PIPELINE,
        State.SEND_PIPELINE_SYNC,
        State.RECV_PIPELINE_SYNC,
        State.UPDATE_ASSIGNMENTS,
        State.AWAIT_DESIRED_REPLICAS,
        State.VALIDATE_PRECONDITIONS,
        State.STREAM_CONTENT,
    )


async def test_resolve_to_acquire_to_start_to_sync() -> None:
    deps = FakeDeps()
    fsm = fsm_for(deps)
    await step_expect(fsm, State.ACQUIRE_PIPELINE, State.START_PIPELINE, State.SEND_PIPELINE_SYNC)
    assert fsm.pln_owned and fsm.pln_header
    assert deps.replica.spool_slot.empty()  # The pipeline owns the spool now.
    await fsm.step()
    assert fsm.state == State.RECV_PIPELINE_SYNC
    sync = deps.pln.sent[0]
    assert sync.acknowledge and sync.HasField("header") and sync.deprecated_journal == "a/journal"
    await step_expect(
        fsm, State.UPDATE_ASSIGNMENTS, State.AWAIT_DESIRED_REPLICAS, State.VALIDATE_PRECONDITIONS
    )


async def test_resolve_non_ok_is_error() -> None:
    deps = FakeDeps()
    deps.status = pb2.Status.JOURNAL_NOT_FOUND
    fsm = fsm_for(deps)
    await step_expect(fsm, State.ERROR)
    assert fsm.status == pb2.Status.JOURNAL_NOT_FOUND


async def test_non_primary_proxies() -> None:
    deps = FakeDeps(primary=PEER)
    fsm = fsm_for(deps)
    await step_expect(fsm, State.AWAIT_DESIRED_REPLICAS, State.PROXY)


async def test_suspended_with_resume_updates_suspension() -> None:
    deps = FakeDeps()
    deps.status = pb2.Status.SUSPENDED
    deps.spec.suspend.level = pb2.JournalSpec.Suspend.FULL
    deps.spec.suspend.offset = 123
    fsm = fsm_for(deps)
    await step_expect(fsm, State.UPDATE_SUSPEND, State.RESOLVE)
    assert deps.spec_updates[0].suspend.level == pb2.JournalSpec.Suspend.NONE
    assert deps.spec_updates[0].suspend.offset == 123
    assert fsm.read_through_rev == 12


async def test_acquire_is_abandoned_on_invalidation() -> None:
    deps = FakeDeps()
    deps.replica.pipeline_slot.get_nowait()  # Another append holds it.
    fsm = fsm_for(deps)
    await step_expect(fsm, State.ACQUIRE_PIPELINE)
    assert fsm.resolved is not None
    fsm.resolved.invalidated.set()
    await step_expect(fsm, State.RESOLVE)
    assert not fsm.pln_owned


async def test_recv_sync_rolls_forward_to_peer_offset() -> None:
    deps = FakeDeps()
    fsm = fsm_for(deps)
    await step_expect(
        fsm,
        State.ACQUIRE_PIPELINE,
        State.START_PIPELINE,
        State.SEND_PIPELINE_SYNC,
        State.RECV_PIPELINE_SYNC,
    )
    regs = pb2.LabelSet(labels=[pb2.Label(name="peer", value="wins")])
    deps.pln.sync_result = (500, regs, 0)
    await step_expect(fsm, State.SEND_PIPELINE_SYNC)
    assert fsm.roll_to_offset == 500 and fsm.registers == regs
    await step_expect(fsm, State.RECV_PIPELINE_SYNC)
    assert deps.pln.sent[-1].proposal.begin == 500 and deps.pln.sent[-1].proposal.end == 500


async def test_recv_sync_wrong_route_re_resolves() -> None:
    deps = FakeDeps()
    fsm = fsm_for(deps)
    await step_expect(
        fsm,
        State.ACQUIRE_PIPELINE,
        State.START_PIPELINE,
        State.SEND_PIPELINE_SYNC,
        State.RECV_PIPELINE_SYNC,
    )
    deps.pln.sync_result = (0, None, 99)
    pln = deps.pln
    await step_expect(fsm, State.RESOLVE)
    assert pln.shut and fsm.pln is None
    await fsm.step()
    assert deps.resolves[-1]["min_etcd_revision"] == 99


async def test_update_assignments_when_inconsistent() -> None:
    deps = FakeDeps()
    deps.consistent = False
    fsm = fsm_for(deps)
    await step_expect(
        fsm,
        State.ACQUIRE_PIPELINE,
        State.START_PIPELINE,
        State.SEND_PIPELINE_SYNC,
        State.RECV_PIPELINE_SYNC,
        State.UPDATE_ASSIGNMENTS,
        State.RESOLVE,
    )
    assert deps.assignment_updates == 1 and fsm.read_through_rev == 11
    deps.consistent = True
    # The pipeline is held and its route unchanged: it is reused without a new sync.
    await step_expect(fsm, State.START_PIPELINE, State.UPDATE_ASSIGNMENTS)


@pytest.mark.parametrize(
    ("replication", "expect"),
    [(1, State.RESOLVE), (3, State.ERROR), (2, State.VALIDATE_PRECONDITIONS)],
)
async def test_await_desired_replicas(replication: int, expect: State) -> None:
    deps = FakeDeps(replication=replication)
    fsm = fsm_for(deps)
    await step_expect(
        fsm,
        State.ACQUIRE_PIPELINE,
        State.START_PIPELINE,
        State.SEND_PIPELINE_SYNC,
        State.RECV_PIPELINE_SYNC,
        State.UPDATE_ASSIGNMENTS,
        State.AWAIT_DESIRED_REPLICAS,
        expect,
    )
    if expect == State.RESOLVE:
        assert fsm.read_through_rev == 11  # Revision + 1: wait for the allocator.
    if expect == State.ERROR:
        assert fsm.status == pb2.Status.INSUFFICIENT_JOURNAL_BROKERS


async def _at_preconditions(deps: FakeDeps, **req: Any) -> AppendFSM:
    fsm = fsm_for(deps, **req)
    await step_expect(
        fsm,
        State.ACQUIRE_PIPELINE,
        State.START_PIPELINE,
        State.SEND_PIPELINE_SYNC,
        State.RECV_PIPELINE_SYNC,
        State.UPDATE_ASSIGNMENTS,
        State.AWAIT_DESIRED_REPLICAS,
        State.VALIDATE_PRECONDITIONS,
    )
    return fsm


async def test_register_mismatch() -> None:
    deps = FakeDeps()
    deps.spool.registers = pb2.LabelSet(labels=[pb2.Label(name="k", value="v")])
    sel = pb2.LabelSelector(include=pb2.LabelSet(labels=[pb2.Label(name="k", value="other")]))
    fsm = await _at_preconditions(deps, check_registers=sel)
    await step_expect(fsm, State.ERROR)
    assert fsm.status == pb2.Status.REGISTER_MISMATCH


async def test_index_has_greater_offset_and_explicit_offsets() -> None:
    deps = FakeDeps()
    deps.replica.index.summary_value = (0, 1000, 5)
    fsm = await _at_preconditions(deps)
    await step_expect(fsm, State.ERROR)
    assert fsm.status == pb2.Status.INDEX_HAS_GREATER_OFFSET
    assert deps.replica.recovery_asks == [(0, 1000)]

    # Once the replica says the gap is safe to pass, the journal resumes at the
    # index end, as an explicit-offset append would.
    deps = FakeDeps()
    deps.replica.index.summary_value = (0, 1000, 5)
    deps.replica.recovery_ready = True
    fsm = await _at_preconditions(deps)
    await step_expect(fsm, State.SEND_PIPELINE_SYNC)
    assert fsm.roll_to_offset == 1000

    # Appends may have been acknowledged past the index end, up to the journal's
    # fence: it goes on past them, not over them.
    deps = FakeDeps()
    deps.replica.index.summary_value = (0, 1000, 5)
    deps.replica.recovery_ready = True
    deps.fence = 1500
    fsm = await _at_preconditions(deps)
    await step_expect(fsm, State.SEND_PIPELINE_SYNC)
    assert fsm.roll_to_offset == 1500

    # The fence is unreadable (etcd denies it): nothing tells how far appends were
    # acknowledged; refused, as Gazette does.
    deps = FakeDeps()
    deps.replica.index.summary_value = (0, 1000, 5)
    deps.replica.recovery_ready = True
    deps.fence = None
    fsm = await _at_preconditions(deps)
    await step_expect(fsm, State.ERROR)
    assert fsm.status == pb2.Status.INDEX_HAS_GREATER_OFFSET
    assert deps.replica.unknowable == [(0, 1000)]

    deps = FakeDeps()
    deps.replica.index.summary_value = (0, 1000, 5)
    fsm = await _at_preconditions(deps, offset=999)
    await step_expect(fsm, State.ERROR)
    assert fsm.status == pb2.Status.WRONG_APPEND_OFFSET

    deps = FakeDeps()
    deps.replica.index.summary_value = (0, 1000, 5)
    fsm = await _at_preconditions(deps, offset=1000)
    await step_expect(fsm, State.SEND_PIPELINE_SYNC)  # Reset-head: roll to the index end.
    assert fsm.roll_to_offset == 1000
    await step_expect(
        fsm,
        State.RECV_PIPELINE_SYNC,
        State.UPDATE_ASSIGNMENTS,
        State.AWAIT_DESIRED_REPLICAS,
        State.VALIDATE_PRECONDITIONS,
        State.STREAM_CONTENT,
    )


async def test_store_unhealthy() -> None:
    deps = FakeDeps()
    deps.spec.fragment.stores.append("file:///root/")
    deps.health_err = "fragment store file:///root/ unhealthy: boom"
    fsm = await _at_preconditions(deps)
    await step_expect(fsm, State.ERROR)
    assert fsm.status == pb2.Status.FRAGMENT_STORE_UNHEALTHY
    assert "boom" in str(fsm.err)


async def test_no_resume_of_suspended_journal() -> None:
    deps = FakeDeps()
    deps.spec.suspend.level = pb2.JournalSpec.Suspend.PARTIAL
    fsm = await _at_preconditions(deps, suspend=pb2.AppendRequest.SUSPEND_NO_RESUME)
    await step_expect(fsm, State.ERROR)
    assert fsm.status == pb2.Status.SUSPENDED


async def test_suspend_now_of_empty_journal_is_full() -> None:
    deps = FakeDeps()
    fsm = await _at_preconditions(deps, suspend=pb2.AppendRequest.SUSPEND_NOW)
    await step_expect(fsm, State.UPDATE_SUSPEND, State.RESOLVE)
    assert deps.spec_updates[0].suspend.level == pb2.JournalSpec.Suspend.FULL


async def test_stream_commit() -> None:
    deps = FakeDeps()
    fsm = fsm_for(deps, union_registers=pb2.LabelSet(labels=[pb2.Label(name="r", value="1")]))
    await to_stream_content(fsm)
    await fsm.on_stream_content(pb2.AppendRequest(content=b"foo"), None)
    await fsm.on_stream_content(pb2.AppendRequest(content=b"bar"), None)
    await fsm.on_stream_content(pb2.AppendRequest(), None)
    assert fsm.state == State.STREAM_CONTENT
    await fsm.on_stream_content(None, None)
    assert fsm.state == State.READ_ACKNOWLEDGEMENTS
    commit = deps.pln.sent[-1]
    assert commit.acknowledge and commit.proposal.end == 6
    assert [(lbl.name, lbl.value) for lbl in commit.registers.labels] == [("r", "1")]
    frag = fsm.client_fragment
    assert (frag.begin, frag.end) == (0, 6)
    assert frag.sum == pb.sha1sum_from_digest(hashlib.sha1(b"foobar").digest())
    await step_expect(fsm, State.FINISHED)
    await fsm.release_pipeline()
    assert deps.replica.pipeline_slot.qsize() == 1


async def test_stream_eof_without_commit_rolls_back() -> None:
    deps = FakeDeps()
    fsm = fsm_for(deps)
    await to_stream_content(fsm)
    await fsm.on_stream_content(pb2.AppendRequest(content=b"foo"), None)
    await fsm.on_stream_content(None, None)
    rollback = deps.pln.sent[-1]
    assert rollback.proposal.end == 0 and rollback.acknowledge
    await step_expect(fsm, State.ERROR)
    assert isinstance(fsm.err, errors.StreamError)
    assert "unexpected EOF" in str(fsm.err)


async def test_stream_message_after_commit_chunk() -> None:
    deps = FakeDeps()
    fsm = fsm_for(deps)
    await to_stream_content(fsm)
    await fsm.on_stream_content(pb2.AppendRequest(), None)
    await fsm.on_stream_content(pb2.AppendRequest(content=b"late"), None)
    await step_expect(fsm, State.ERROR)
    assert "expected EOF after empty Content chunk" in str(fsm.err)


async def test_stream_to_read_only_journal_is_not_allowed() -> None:
    deps = FakeDeps()
    deps.spec.flags = pb2.JournalSpec.O_RDONLY
    fsm = fsm_for(deps)
    await to_stream_content(fsm)
    await fsm.on_stream_content(pb2.AppendRequest(content=b"x"), None)
    await step_expect(fsm, State.ERROR)
    assert fsm.status == pb2.Status.NOT_ALLOWED


async def test_register_update_needs_content() -> None:
    deps = FakeDeps()
    fsm = fsm_for(deps, union_registers=pb2.LabelSet(labels=[pb2.Label(name="r", value="1")]))
    await to_stream_content(fsm)
    await fsm.on_stream_content(pb2.AppendRequest(), None)
    await fsm.on_stream_content(None, None)
    await step_expect(fsm, State.ERROR)
    assert "register modification requires non-empty Append" in str(fsm.err)


async def test_stream_coalesces_content_chunks() -> None:
    deps = FakeDeps()
    fsm = fsm_for(deps)
    await to_stream_content(fsm)
    fsm.replicate_content_bytes = 8
    sent_before = len(deps.pln.sent)
    for chunk in (b"abc", b"def", b"gh", b"ijklmnopqrs", b"tu"):
        await fsm.on_stream_content(pb2.AppendRequest(content=chunk), None)
    # "abc"+"def" wait; "gh" fills the 8 bytes; the long chunk goes alone; "tu" waits.
    content = [(r.content, r.content_delta) for r in deps.pln.sent[sent_before:] if r.content]
    assert content == [(b"abcdefgh", 0), (b"ijklmnopqrs", 8)]
    await fsm.on_stream_content(pb2.AppendRequest(), None)  # The commit marker flushes.
    content = [(r.content, r.content_delta) for r in deps.pln.sent[sent_before:] if r.content]
    assert content[-1] == (b"tu", 19)
    await fsm.on_stream_content(None, None)
    commit = deps.pln.sent[-1]
    assert commit.acknowledge and commit.proposal.end == 21
    frag = fsm.client_fragment
    assert frag is not None and (frag.begin, frag.end) == (0, 21)
    digest = hashlib.sha1(b"abcdefghijklmnopqrstu").digest()
    assert frag.sum == pb.sha1sum_from_digest(digest)
    await step_expect(fsm, State.FINISHED)


async def test_stream_error_drops_pending_content() -> None:
    deps = FakeDeps()
    fsm = fsm_for(deps)
    await to_stream_content(fsm)
    sent_before = len(deps.pln.sent)
    await fsm.on_stream_content(pb2.AppendRequest(content=b"foo"), None)
    await fsm.on_stream_content(None, None)  # EOF without a commit marker.
    assert not any(r.content for r in deps.pln.sent[sent_before:])
    rollback = deps.pln.sent[-1]
    assert rollback.proposal.end == 0 and rollback.acknowledge
    await step_expect(fsm, State.ERROR)


async def test_a_new_pipeline_rolls_a_spool_that_holds_content() -> None:
    # A pipeline is rebuilt after a route change or a failure. Its sync first proposes
    # the spool's own fragment: members that accept it hold the same content (its
    # SHA-1), which becomes confirmed; then it rolls every member's spool, which hands
    # what they hold to their persisters now.
    deps = FakeDeps()
    deps.spool.spec.begin, deps.spool.spec.end = 100, 250
    fsm = fsm_for(deps)
    await step_expect(
        fsm,
        State.ACQUIRE_PIPELINE,
        State.START_PIPELINE,
        State.SEND_PIPELINE_SYNC,
        State.RECV_PIPELINE_SYNC,
    )
    sync = deps.pln.sent[0].proposal
    assert (sync.begin, sync.end) == (100, 250)
    await step_expect(fsm, State.SEND_PIPELINE_SYNC)
    assert deps.spool.confirmed_end == 250
    assert deps.replica.settled == [(100, True)]
    assert fsm.roll_to_offset == 250
    await step_expect(fsm, State.RECV_PIPELINE_SYNC)
    roll = deps.pln.sent[1].proposal
    assert (roll.begin, roll.end) == (250, 250)
    await step_expect(fsm, State.UPDATE_ASSIGNMENTS)
    assert deps.replica.settled == [(100, True), (250, True)]


async def test_a_proposal_waits_for_the_acknowledgements_of_the_one_before() -> None:
    # Replicas read each proposal as confirming the previous one: a sync proposal
    # of a pipeline whose earlier append still awaits acknowledgements waits for them,
    # and is not sent at all when one of them failed.
    deps = FakeDeps()
    fsm = fsm_for(deps)
    await step_expect(fsm, State.ACQUIRE_PIPELINE, State.START_PIPELINE, State.SEND_PIPELINE_SYNC)
    _, close_after = deps.pln.barrier()  # An earlier append reading its acknowledgements.
    step = asyncio.ensure_future(fsm.step())
    await asyncio.sleep(0.01)
    assert not step.done() and deps.pln.sent == []
    deps.pln._recv_err = RuntimeError("peer failed")
    close_after.set_result(None)
    await step
    assert fsm.state == State.ERROR and deps.pln.sent == [] and deps.pln.shut
    assert deps.replica.flushes == 1


async def test_a_new_pipeline_of_an_empty_spool_does_not_roll() -> None:
    deps = FakeDeps()
    deps.spool.spec.begin = deps.spool.spec.end = 250
    fsm = fsm_for(deps)
    await step_expect(
        fsm,
        State.ACQUIRE_PIPELINE,
        State.START_PIPELINE,
        State.SEND_PIPELINE_SYNC,
    )
    assert fsm.roll_to_offset == 0


async def test_a_failed_sync_asks_the_replica_to_persist_now() -> None:
    deps = FakeDeps()
    fsm = fsm_for(deps)
    await step_expect(
        fsm,
        State.ACQUIRE_PIPELINE,
        State.START_PIPELINE,
        State.SEND_PIPELINE_SYNC,
        State.RECV_PIPELINE_SYNC,
    )
    deps.pln._recv_err = RuntimeError("peer gone")
    await step_expect(fsm, State.ERROR)
    assert deps.replica.flushes == 1


async def test_a_failed_acknowledgement_asks_the_replica_to_persist_now() -> None:
    deps = FakeDeps()
    fsm = await _at_preconditions(deps)
    await step_expect(fsm, State.STREAM_CONTENT)
    await fsm.on_stream_content(pb2.AppendRequest(content=b"abc"), None)
    await fsm.on_stream_content(pb2.AppendRequest(), None)
    await fsm.on_stream_content(None, None)
    assert fsm.state == State.READ_ACKNOWLEDGEMENTS
    deps.pln._recv_err = RuntimeError("peer gone")
    await step_expect(fsm, State.ERROR)
    assert deps.replica.flushes == 1 and "peer gone" in str(fsm.err)


async def _commit_sent(deps: FakeDeps) -> AppendFSM:
    """An FSM whose append of b"abc" streamed and whose commit went out."""
    fsm = await _at_preconditions(deps)
    await step_expect(fsm, State.STREAM_CONTENT)
    for req in (pb2.AppendRequest(content=b"abc"), pb2.AppendRequest(), None):
        await fsm.on_stream_content(req, None)
    assert fsm.commit_sent
    return fsm


async def test_a_failure_after_the_commit_went_out_says_the_outcome_is_unknown() -> None:
    # A member may have committed it, and the next pipeline goes on from its content.
    deps = FakeDeps()
    fsm = await _commit_sent(deps)
    deps.pln._recv_err = RuntimeError("peer gone")
    await step_expect(fsm, State.ERROR)
    assert str(fsm.err).endswith(errors.OUTCOME_UNKNOWN), fsm.err


async def test_no_commit_goes_out_to_a_peer_that_already_failed() -> None:
    # A replica whose spool disk is stalled fails its content at once: the append
    # fails knowing it is not in the journal, rather than committing at the primary.
    deps = FakeDeps()
    fsm = await _at_preconditions(deps)
    await step_expect(fsm, State.STREAM_CONTENT)
    await fsm.on_stream_content(pb2.AppendRequest(content=b"abc"), None)
    await fsm.on_stream_content(pb2.AppendRequest(), None)
    deps.pln.peer_ended = RuntimeError("UNAVAILABLE: spool directory /s is stalled")
    sent = len(deps.pln.sent)
    await fsm.on_stream_content(None, None)
    assert not fsm.commit_sent and len(deps.pln.sent) == sent  # Not even the rollback.
    await step_expect(fsm, State.ERROR)
    assert "stalled" in str(fsm.err) and errors.OUTCOME_UNKNOWN not in str(fsm.err), fsm.err
    assert str(fsm.err).endswith(errors.NOT_COMMITTED), fsm.err


async def test_a_commit_sent_before_a_peer_ended_never_says_it_was_not_sent() -> None:
    # Found by the chaos suite (spool-full): append A's commit went out, then its peer
    # failed on it (a full disk) and ended its stream; the next append, at its end,
    # noted the ended peer. A's answer read that note and said "(before the commit was
    # sent)" although A was in the journal.
    deps = FakeDeps()
    fsm = await _commit_sent(deps)
    deps.pln.peer_ended = RuntimeError("UNAVAILABLE: no space left on device")
    await deps.pln.note_ended_peers()  # As the next append does.
    await step_expect(fsm, State.ERROR)
    assert str(fsm.err).endswith(errors.OUTCOME_UNKNOWN), fsm.err
    assert errors.NOT_COMMITTED not in str(fsm.err), fsm.err


async def test_a_failure_before_the_commit_does_not_say_it_may_be_in_the_journal() -> None:
    # The spool failed while content streamed: the rollback, not the commit, goes out.
    deps = FakeDeps()
    fsm = await _at_preconditions(deps)
    await step_expect(fsm, State.STREAM_CONTENT)
    await fsm.on_stream_content(pb2.AppendRequest(content=b"abc"), None)
    deps.pln._send_err = RuntimeError("spool directory /spool is stalled")
    await fsm.on_stream_content(pb2.AppendRequest(), None)  # Fails at once: no commit.
    assert fsm.state == State.READ_ACKNOWLEDGEMENTS and not fsm.commit_sent
    # Peers then see the pipeline close; the primary's own failure is what is told.
    deps.pln._recv_err = RuntimeError("unexpected EOF")
    await step_expect(fsm, State.ERROR)
    assert "stalled" in str(fsm.err) and errors.OUTCOME_UNKNOWN not in str(fsm.err), fsm.err


async def _client(*chunks: bytes, stall: asyncio.Event | None = None):
    for c in chunks:
        yield pb2.AppendRequest(content=c)
    if stall is not None:
        await stall.wait()


async def test_run_appends_a_client_stream_and_gives_the_pipeline_back() -> None:
    deps = FakeDeps()
    fsm = fsm_for(deps)
    total, delayed = await fsm.run(_client(b"hello, ", b"world", b""))
    assert fsm.state == State.FINISHED, fsm.err
    assert (fsm.client_fragment.begin, fsm.client_fragment.end) == (0, 12)
    assert total == 3 and delayed == 0
    assert deps.replica.pipeline_slot.get_nowait() is deps.pln  # Kept for the next append.


async def test_run_of_a_pulse_commits_nothing() -> None:
    deps = FakeDeps()
    fsm = fsm_for(deps)
    assert await fsm.run(None) == (0, 0)
    assert fsm.state == State.FINISHED
    assert fsm.client_fragment.begin == fsm.client_fragment.end


async def test_run_without_the_commit_chunk_fails_and_rolls_back() -> None:
    deps = FakeDeps()
    fsm = fsm_for(deps)
    await fsm.run(_client(b"partial"))
    assert fsm.state == State.ERROR and "unexpected EOF" in str(fsm.err)
    assert deps.spool.spec.end == 0 and deps.spool.delta == b""


async def test_run_cancelled_with_a_stalled_client_ends_in_error(monkeypatch) -> None:
    # The client went away mid-stream: the FSM aborts, rolls back and gives the
    # pipeline back within the grace period.
    from gazette.broker.server import append_fsm

    monkeypatch.setattr(append_fsm, "ABORT_GRACE", 5.0)
    deps = FakeDeps()
    fsm = fsm_for(deps)
    stall = asyncio.Event()
    task = asyncio.ensure_future(fsm.run(_client(b"partial", stall=stall)))
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert fsm.state == State.ERROR
    assert deps.spool.spec.end == 0
    assert not deps.replica.pipeline_slot.empty()


async def test_preconditions_without_a_head_gap_forget_a_pending_one() -> None:
    # Else the replica's pulse keeps waking for a recovery nobody needs.
    deps = FakeDeps()
    fsm = await _at_preconditions(deps)
    await step_expect(fsm, State.STREAM_CONTENT)
    assert deps.replica.gap_closed == 1 and deps.replica.recovery_asks == []


async def test_a_pulse_through_a_failed_pipeline_ends_in_error() -> None:
    # A pulse's intent to commit ends the content phase when the pipeline has failed
    # (a peer's earlier failure): it must not then try to commit (that crashed a
    # broker's pulse daemon, and the broker with it, in the chaos suite).
    deps = FakeDeps()
    fsm = fsm_for(deps)
    assert await fsm.run_to(State.STREAM_CONTENT)
    deps.pln._send_err = RuntimeError("peer failed")
    await fsm._run(None)
    assert fsm.state == State.ERROR, fsm.state
