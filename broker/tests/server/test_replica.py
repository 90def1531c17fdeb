"""Replica daemons and rules that need no broker: flushes and head recovery."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

from gazette.broker import protocol as pb
from gazette.broker.fragment import cover_set, spool
from gazette.broker.server import replica

JOURNAL = "a/journal"


class FakeRegistry:
    def sign_get_url(self, *_: Any) -> str:
        return ""


class FakeHost:
    def __init__(self) -> None:
        self.registry: Any = FakeRegistry()
        self.completed: list[tuple[int, int, bool]] = []
        # Spools handed over while still held back: (begin, confirmed end, end).
        self.held: list[tuple[int, int, int]] = []
        self.spec = pb.JournalSpec(name=JOURNAL, replication=1)
        self.completion = asyncio.Event()
        self.checkpoints: list[int] = []

    def lookup_spec(self, journal: str) -> pb.JournalSpec | None:
        return self.spec

    def spool_complete(self, sp: spool.Spool, primary: bool, *, held: bool = False) -> None:
        if held:
            self.held.append((sp.begin, sp.confirmed_end, sp.end))
        elif sp.confirmed:
            self.completed.append((sp.begin, sp.end, primary))
        else:  # The persister stores its confirmed part and quarantines the rest.
            self.completed.append((sp.begin, max(sp.begin, sp.confirmed_end), primary))
        self.completion.set()

    async def pulse(self, rep: replica.Replica, stable_ticks: int) -> asyncio.Event | None:
        return None

    async def checkpoint_head(self, rep: replica.Replica, offset: int) -> None:
        self.checkpoints.append(offset)

    def new_fence(self, journal: str) -> None:
        return None

    async def skipped_ranges(self, journal: str) -> tuple[tuple[int, int], ...]:
        return ()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def _commit(sp: spool.Spool, data: bytes, *, confirm: bool = True) -> None:
    await sp.apply(pb.ReplicateRequest(content=data, content_delta=0))
    resp = await sp.apply(pb.ReplicateRequest(proposal=sp.next(), registers=sp.registers))
    assert resp.status == pb.OK
    if confirm:  # Every member of the route committed it too.
        sp.confirm(sp.end)


async def test_request_flush_rolls_the_spool_once_it_is_free() -> None:
    host = FakeHost()
    rep = replica.Replica(JOURNAL, host, primary=False, create_revision=1, pulse_interval=3600)
    async with asyncio.TaskGroup() as tg:
        tg.create_task(rep.serve())
        sp = await rep.spool_slot.get()  # A Replicate stream holds the spool.
        await _commit(sp, b"hello")
        rep.request_flush()
        await asyncio.sleep(0.05)
        assert host.completed == []  # Not while the stream holds it.
        await rep.return_spool(sp, broken=False)
        await asyncio.wait_for(host.completion.wait(), 5)
        assert host.completed == [(0, 5, True)]  # A flush stores at once.
        sp = await rep.spool_slot.get()
        assert (sp.begin, sp.end) == (5, 5)  # Rolled to an empty fragment at its end.
        rep.spool_slot.put_nowait(sp)
        rep.stop()


async def test_a_broken_replicate_stream_persists_what_the_replica_committed() -> None:
    host = FakeHost()
    rep = replica.Replica(JOURNAL, host, primary=False, create_revision=1, pulse_interval=3600)
    async with asyncio.TaskGroup() as tg:
        tg.create_task(rep.serve())
        sp = await rep.spool_slot.get()
        await _commit(sp, b"acked")
        await sp.apply(pb.ReplicateRequest(content=b"never committed", content_delta=0))
        await rep.return_spool(sp, broken=True)  # The primary died mid-append.
        await asyncio.wait_for(host.completion.wait(), 5)
        assert host.completed == [(0, 5, True)]  # Only the committed content, stored at once.
        rep.stop()


async def _broken_with_an_unconfirmed_tail(host: FakeHost, rep: replica.Replica) -> None:
    sp = await rep.spool_slot.get()
    await _commit(sp, b"confirmed")
    await _commit(sp, b"+tail", confirm=False)  # Did every member commit it? Unknown.
    await rep.return_spool(sp, broken=True)
    await asyncio.wait_for(host.completion.wait(), 5)
    # The confirmed part goes to the store now; the tail is held back.
    assert host.held == [(0, 9, 14)] and host.completed == []
    host.completion.clear()


async def test_a_held_tail_is_stored_whole_once_the_route_goes_on_from_it() -> None:
    # The primary died; the next one took its head from this replica (see api._replicate).
    host = FakeHost()
    rep = replica.Replica(JOURNAL, host, primary=False, create_revision=1, pulse_interval=3600)
    async with asyncio.TaskGroup() as tg:
        tg.create_task(rep.serve())
        await _broken_with_an_unconfirmed_tail(host, rep)
        rep.settle_held(14, adopt=True)
        assert host.completed == [(0, 14, True)]
        rep.stop()


async def test_a_held_tail_the_route_did_not_go_on_from_is_never_stored() -> None:
    # A member cut off from its route: the route went on from another offset.
    host = FakeHost()
    rep = replica.Replica(JOURNAL, host, primary=False, create_revision=1, pulse_interval=3600)
    async with asyncio.TaskGroup() as tg:
        tg.create_task(rep.serve())
        await _broken_with_an_unconfirmed_tail(host, rep)
        rep.settle_held(20, adopt=False)
        assert host.completed == [(0, 9, True)]
        rep.stop()


@pytest.mark.parametrize("stored_elsewhere", [False, True])
async def test_a_held_tail_the_route_went_on_from_without_us_is_decided_by_a_listing(
    monkeypatch: pytest.MonkeyPatch, stored_elsewhere: bool
) -> None:
    # The primary rolled us to the end of our held tail on its own knowledge: from
    # another holder of the same bytes (nobody stored them: ours must be, or the
    # journal keeps a hole), or from other content ending there (stored by its
    # members: ours must not be).
    monkeypatch.setattr(replica, "DOUBT_DELAY", 0.05)
    listings: list[int] = []

    async def walk_all_stores(*_: Any) -> cover_set.CoverSet:
        listings.append(1)
        out = cover_set.CoverSet()
        if stored_elsewhere:
            out.add(cover_set.Fragment(pb.Fragment(journal=JOURNAL, begin=0, end=14)))
        return out

    monkeypatch.setattr(replica.index, "walk_all_stores", walk_all_stores)
    host = FakeHost()
    rep = replica.Replica(JOURNAL, host, primary=False, create_revision=1, pulse_interval=3600)
    async with asyncio.TaskGroup() as tg:
        tg.create_task(rep.serve())
        await _broken_with_an_unconfirmed_tail(host, rep)
        before = len(listings)
        rep.settle_held(14, adopt=False)
        assert host.completed == []  # Not yet: a listing decides.
        await asyncio.wait_for(host.completion.wait(), 5)
        assert len(listings) > before  # A listing asked for after the delay.
        assert host.completed == [(0, 9 if stored_elsewhere else 14, True)]
        rep.stop()


async def test_a_stopping_replica_releases_a_held_tail_still_in_doubt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(replica, "DOUBT_DELAY", 3600)
    host = FakeHost()
    rep = replica.Replica(JOURNAL, host, primary=False, create_revision=1, pulse_interval=3600)
    async with asyncio.TaskGroup() as tg:
        tg.create_task(rep.serve())
        await _broken_with_an_unconfirmed_tail(host, rep)
        rep.settle_held(14, adopt=False)
        rep.stop()
    assert host.completed[0] == (0, 9, True)  # Only what was confirmed.


async def test_a_stopping_replica_releases_what_it_holds_back() -> None:
    host = FakeHost()
    rep = replica.Replica(JOURNAL, host, primary=True, create_revision=1, pulse_interval=3600)
    async with asyncio.TaskGroup() as tg:
        tg.create_task(rep.serve())
        sp = await rep.spool_slot.get()
        await _commit(sp, b"confirmed")
        await _commit(sp, b"+tail", confirm=False)  # Its acknowledgements never came.
        rep.spool_slot.put_nowait(sp)
        rep.stop()  # Deposed: the journal is no longer ours.
    # Rolled at its end on the way out (held), then released: only what was confirmed.
    assert host.held == [(0, 9, 14)] and host.completed == [(0, 9, True)]


async def test_a_spool_rolled_forward_past_an_unconfirmed_tail_releases_it() -> None:
    # The route went on from a later offset than ours: our tail is not the journal's.
    host = FakeHost()
    sp = spool.Spool(JOURNAL, replica.Replica(JOURNAL, host, primary=False, create_revision=1))
    await _commit(sp, b"confirmed")
    await _commit(sp, b"+tail", confirm=False)
    resp = await sp.apply(
        pb.ReplicateRequest(proposal=pb.Fragment(journal=JOURNAL, begin=20, end=20))
    )
    assert resp.status == pb.OK
    assert host.held == [] and host.completed == [(0, 9, False)]


async def test_head_recovery_waits_for_the_delay_and_a_later_listing() -> None:
    clock = Clock()
    rep = replica.Replica(
        JOURNAL,
        FakeHost(),
        primary=True,
        create_revision=1,
        recovery_delay=10.0,
        clock=clock,
        resume_head_gaps=True,
    )
    rep.listed_at = clock.now
    assert not rep.head_recovery_ready(0, 500)  # First seen: wait.
    assert rep.head_recovery_due() == 1010.0
    clock.now = 1009.0
    assert not rep.head_recovery_ready(0, 500)
    clock.now = 1011.0
    assert not rep.head_recovery_ready(0, 500)  # No listing started after the delay yet.
    rep.listed_at = 1010.5
    assert rep.head_recovery_ready(0, 500)
    assert rep.head_recovery_due() is None


async def test_a_moving_head_gap_starts_the_wait_again() -> None:
    clock = Clock()
    rep = replica.Replica(
        JOURNAL,
        FakeHost(),
        primary=True,
        create_revision=1,
        recovery_delay=10.0,
        clock=clock,
        resume_head_gaps=True,
    )
    assert not rep.head_recovery_ready(0, 500)
    clock.now += 11
    rep.listed_at = clock.now
    # Another broker stored more meanwhile: someone holding the tail is alive.
    assert not rep.head_recovery_ready(0, 800)
    assert rep.head_recovery_due() == clock.now + 10


class FakePipeline:
    def __init__(self, rep: replica.Replica, sp: spool.Spool) -> None:
        self.rep, self.sp, self.closed = rep, sp, False
        self.confirmed = asyncio.Event()

    async def confirm_replicas(self) -> None:
        self.confirmed.set()

    async def shutdown(self, expect_err: bool) -> None:
        self.closed = True
        self.rep.spool_slot.put_nowait(self.sp)


async def test_a_primary_flush_closes_its_idle_pipeline_to_reach_the_spool() -> None:
    # A primary whose lease is in doubt serves no appends, but its idle pipeline
    # holds the spool: the flush closes it (ending the replicas' streams too).
    host = FakeHost()
    rep = replica.Replica(JOURNAL, host, primary=True, create_revision=1, pulse_interval=3600)
    async with asyncio.TaskGroup() as tg:
        tg.create_task(rep.serve())
        sp = await rep.spool_slot.get()
        await _commit(sp, b"held by the pipeline")
        assert await rep.pipeline_slot.get() is None
        pln = FakePipeline(rep, sp)
        rep.pipeline_slot.put_nowait(pln)
        rep.request_flush()
        await asyncio.wait_for(host.completion.wait(), 5)
        assert pln.closed and host.completed == [(0, 20, True)]
        assert await rep.pipeline_slot.get() is None  # The next append builds a new one.
        rep.pipeline_slot.put_nowait(None)
        rep.stop()


async def test_a_closed_head_gap_is_forgotten() -> None:
    clock = Clock()
    rep = replica.Replica(
        JOURNAL,
        FakeHost(),
        primary=True,
        create_revision=1,
        recovery_delay=10.0,
        clock=clock,
        resume_head_gaps=True,
    )
    assert not rep.head_recovery_ready(0, 500)
    rep.head_gap_closed()  # A peer's sync rolled the spools to the index end.
    assert rep.head_recovery_due() is None


async def test_reads_of_a_hole_ask_for_listings_with_back_off() -> None:
    clock = Clock()
    host = FakeHost()
    host.spec.fragment.refresh_interval.seconds = 4
    rep = replica.Replica(JOURNAL, host, primary=False, create_revision=1, clock=clock)
    asked_at = []
    for _ in range(40):  # 10 s of reads of one hole, every 0.25 s.
        if rep._on_hole(0):
            assert rep._refresh_now.is_set()  # The refresh daemon lists at once.
            rep._refresh_now.clear()
            asked_at.append(clock.now)
        clock.now += 0.25
    # 0.5 s, then doubling up to the refresh interval (4 s).
    assert [b - a for a, b in itertools.pairwise(asked_at)] == [0.5, 1.0, 2.0, 4.0]
    # Another hole starts over.
    assert rep._on_hole(7)
    assert not rep._on_hole(7)


async def test_a_head_gap_is_refused_unless_resuming_is_asked_for() -> None:
    # Every broker that held the tail may be gone with acknowledged offsets nobody
    # stored: resuming at the stored end could hand them out again.
    clock = Clock()
    rep = replica.Replica(
        JOURNAL, FakeHost(), primary=True, create_revision=1, clock=clock, resume_head_gaps=False
    )
    rep.listed_at = clock.now
    for _ in range(3):
        assert not rep.head_recovery_ready(0, 500)
        assert rep.head_recovery_due() is None  # Nothing to wake up for.
        clock.now += 3600
        rep.listed_at = clock.now


async def test_a_stopping_primary_records_its_head() -> None:
    # Where what it publishes ends: an unconfirmed tail is quarantined, and a journal
    # going on past it would have a hole there (the chaos suite's make down/up).
    for primary in (True, False):
        host = FakeHost()
        rep = replica.Replica(
            JOURNAL, host, primary=primary, create_revision=1, pulse_interval=3600
        )
        async with asyncio.TaskGroup() as tg:
            tg.create_task(rep.serve())
            sp = await rep.spool_slot.get()
            await _commit(sp, b"0123456789")
            await _commit(sp, b"+tail", confirm=False)  # Its acknowledgements never came.
            rep.spool_slot.put_nowait(sp)
            rep.stop()
        assert host.checkpoints == ([10] if primary else [])


async def test_replicas_of_an_idle_pipeline_are_told_of_a_confirmation() -> None:
    # After an append is answered, its pipeline, if no append holds it, repeats its
    # fragment to the replicas; one an append holds is left alone.
    host = FakeHost()
    rep = replica.Replica(JOURNAL, host, primary=True, create_revision=1, pulse_interval=3600)
    async with asyncio.TaskGroup() as tg:
        tg.create_task(rep.serve())
        sp = await rep.spool_slot.get()
        assert await rep.pipeline_slot.get() is None
        pln = FakePipeline(rep, sp)
        rep.tell_confirmed_soon()  # Held by an append: nothing is sent.
        await asyncio.sleep(0.05)
        assert not pln.confirmed.is_set()
        rep.pipeline_slot.put_nowait(pln)
        rep.tell_confirmed_soon()
        await asyncio.wait_for(pln.confirmed.wait(), 5)
        assert await rep.pipeline_slot.get() is pln  # Given back.
        rep.pipeline_slot.put_nowait(None)
        rep.spool_slot.put_nowait(sp)
        rep.stop()
