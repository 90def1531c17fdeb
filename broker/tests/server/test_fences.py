"""Acknowledgement fences on a real etcd (see gazette.broker.server.fences)."""

from __future__ import annotations

import asyncio
import pathlib
from typing import Any

import aetcd
import pytest

from gazette import keyspace
from gazette.broker import protocol as pb
from gazette.broker import testing
from gazette.broker.protocol import protocol_pb2_grpc as pb2_grpc
from gazette.broker.server import fences
from gazette.keyspace import testing as ks_testing

pytestmark = pytest.mark.integration

JOURNAL = "a/journal"


async def test_a_fence_only_rises_and_changes_owner(etcd: aetcd.Client, etcd_root: str) -> None:
    f = fences.Fences(etcd, etcd_root)
    assert f.key(JOURNAL) == "/gazette-fences/gazette/cluster/a/journal"
    assert await f.read(JOURNAL) is None

    first = await f.raise_to(JOURNAL, 100, "zone/one#a")
    assert (first.offset, first.owner) == (100, "zone/one#a")
    # A new owner takes it over without lowering it.
    second = await f.raise_to(JOURNAL, 50, "zone/two#b")
    assert (second.offset, second.owner) == (100, "zone/two#b")
    third = await f.raise_to(JOURNAL, 300, "zone/two#b")
    read = await f.read(JOURNAL)
    assert read is not None and (read.offset, read.owner) == (300, "zone/two#b")
    assert read.mod_revision == third.mod_revision

    # Only its owner may lower it: an earlier owner can't speak for later acknowledgements.
    assert not await f.lower(JOURNAL, 10, "zone/one#a")
    assert await f.lower(JOURNAL, 120, "zone/two#b")
    read = await f.read(JOURNAL)
    assert read is not None and read.offset == 120
    assert not await f.lower(JOURNAL, 200, "zone/two#b")  # Lowering never raises.

    # Ranges skipped for good are remembered, whoever raises or lowers the fence next.
    skipped = await f.skip(JOURNAL, 40, 120)
    assert skipped.skipped == ((40, 120),)
    await f.raise_to(JOURNAL, 500, "zone/three#c")
    await f.skip(JOURNAL, 400, 500)
    read = await f.read(JOURNAL)
    assert read is not None and read.skipped == ((40, 120), (400, 500))
    assert (read.offset, read.owner) == (500, "zone/three#c")


async def test_a_journal_fence_raises_a_step_ahead_once_for_many_appends(
    etcd: aetcd.Client, etcd_root: str
) -> None:
    f = fences.Fences(etcd, etcd_root)
    jf = fences.JournalFence(f, JOURNAL, "zone/one")
    assert not jf.covers(0)  # Nothing is acknowledged before the fence is ours.
    # Many appends at once: one write covers them all.
    await asyncio.gather(*(jf.cover(end) for end in range(10, 1000, 10)))
    read = await f.read(JOURNAL)
    assert read is not None and read.owner == jf.owner
    assert read.offset == jf.covered == 10 + fences.FENCE_STEP  # The first append raised it.
    rev = read.mod_revision
    await jf.cover(fences.FENCE_STEP)
    read = await f.read(JOURNAL)
    assert read is not None and read.mod_revision == rev  # Within the fence: no write.

    # Another primary took the journal over: ours is no longer the owner, and a
    # later primary of ours takes it back without lowering it.
    await f.raise_to(JOURNAL, 5 * fences.FENCE_STEP, "zone/two#x")
    again = fences.JournalFence(f, JOURNAL, "zone/one")
    await again.cover(100)
    read = await f.read(JOURNAL)
    assert read is not None and read.owner == again.owner and read.offset == 5 * fences.FENCE_STEP


async def test_a_restarted_owner_lowers_its_fence_to_what_it_recovered(
    etcd: aetcd.Client, etcd_root: str, tmp_path: pathlib.Path
) -> None:
    f = fences.Fences(etcd, etcd_root, str(tmp_path))
    jf = fences.JournalFence(f, JOURNAL, "zone/one")
    await jf.cover(4096)
    other = fences.JournalFence(f, "b/journal", "zone/one")
    await other.cover(10)
    assert set(f.owners_on_disk()) == {JOURNAL, "b/journal"}
    # b/journal was taken over since (by a broker with its own disk): its fence
    # is another primary's to keep.
    await fences.Fences(etcd, etcd_root).raise_to("b/journal", 20, "zone/two#y")

    await fences.settle_recovered(f, {JOURNAL: 4096, "b/journal": 10})
    read = await f.read(JOURNAL)
    assert read is not None and read.offset == 4096
    read = await f.read("b/journal")
    assert read is not None and read.offset == 10 + fences.FENCE_STEP
    assert f.owners_on_disk() == {}  # Settled once.


async def test_an_owner_back_without_a_spool_lowers_its_fence_to_the_stored_end(
    etcd: aetcd.Client, etcd_root: str, tmp_path: pathlib.Path
) -> None:
    # Everything it held was stored before it stopped: a later head gap should skip
    # nothing. A journal with nothing stored (all of it expired, say) keeps its fence.
    f = fences.Fences(etcd, etcd_root, str(tmp_path))
    for journal in (JOURNAL, "b/journal", "c/journal"):
        await fences.JournalFence(f, journal, "zone/one").cover(4096)
    stored = {JOURNAL: 5000, "b/journal": None}

    async def stored_end(journal: str) -> int | None:
        if journal == "c/journal":
            raise OSError("store unreachable")
        return stored[journal]

    await fences.settle_recovered(f, {}, stored_end)
    read = await f.read(JOURNAL)
    assert read is not None and read.offset == 5000
    for kept in ("b/journal", "c/journal"):
        read = await f.read(kept)
        assert read is not None and read.offset == 4096 + fences.FENCE_STEP
    # Settled, or nothing to settle it with; a store that failed is tried next start.
    assert f.owners_on_disk() == {"c/journal": read.owner}


async def test_a_fence_that_cant_be_raised_fails_in_bounded_time(
    etcd: aetcd.Client, etcd_root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = fences.Fences(etcd, etcd_root)
    stuck = asyncio.Event()

    async def late(*_: object, **__: object) -> fences.Fence:
        await stuck.wait()
        return fences.Fence(10 + fences.FENCE_STEP, "zone/one#late")

    monkeypatch.setattr(f, "raise_to", late)
    monkeypatch.setattr(fences, "FENCE_TIMEOUT", 0.3)
    jf = fences.JournalFence(f, JOURNAL, "zone/one")
    with pytest.raises(TimeoutError):
        await jf.cover(10)
    assert not jf.covers(10)
    # The raise in flight is not started twice: once etcd answers, it counts.
    stuck.set()
    await jf.cover(10)
    assert jf.covers(10)


async def test_deleting_a_journal_drops_its_fence(
    etcd_server: ks_testing.EtcdServer, tmp_path: pathlib.Path, cluster_factory: Any
) -> None:
    name = "fences/deleted"
    with cluster_factory(etcd_server, tmp_path, brokers=1) as cluster:
        spec = testing.journal_spec(name, replication=1, stores=[cluster.store_url])
        client = await keyspace.connect(etcd_server.endpoint, call_timeout=10)
        async with cluster.channel(0) as ch, client:
            stub = pb2_grpc.JournalStub(ch)
            assert (await testing.apply_specs(stub, spec)).status == pb.OK
            await testing.wait_writable(stub, name)
            assert (await testing.append(stub, name, [b"x\n"], deadline=5)).status == pb.OK
            f = fences.Fences(client, cluster.etcd_prefix)
            assert await f.read(name) is not None

            req = pb.ApplyRequest()
            req.changes.add(delete=name, expect_mod_revision=-1)
            assert (await stub.Apply(req)).status == pb.OK
            assert await f.read(name) is None
