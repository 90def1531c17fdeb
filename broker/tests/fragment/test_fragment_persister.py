"""Persister and read-back, against file:// stores."""

from __future__ import annotations

import asyncio
import datetime
import gc
from pathlib import Path

import prometheus_client
import pytest
from fragment_helpers import JOURNAL, FixedClock, RecordingObserver, commit, proposal

from gazette.broker import protocol as pb
from gazette.broker.fragment import errors, persister, reader, spool, stores

T0 = datetime.datetime(2019, 11, 19, 22, 30, tzinfo=datetime.UTC)
ALL_CODECS = [pb.NONE, pb.GZIP, pb.ZSTANDARD, pb.SNAPPY, pb.GZIP_OFFLOAD_DECOMPRESSION]


def journal_spec(*store_urls: str, template: str = "") -> pb.JournalSpec:
    spec = pb.JournalSpec(name=JOURNAL, replication=1)
    spec.fragment.stores.extend(store_urls)
    spec.fragment.path_postfix_template = template
    return spec


async def completed_spool(
    data: list[bytes], codec: int = pb.NONE, *, primary: bool = True, batch: int = 1 << 20
) -> spool.Spool:
    obv = RecordingObserver()
    sp = spool.Spool(
        JOURNAL, obv, config=spool.SpoolConfig(compression_batch_size=batch), now=FixedClock(T0)
    )
    await sp.apply(proposal(pb.Fragment(journal=JOURNAL, compression_codec=codec)), primary=primary)
    for d in data:
        await commit(sp, d, pb.label_set({"reg": "x"}), primary=primary)
    sp.confirm(sp.end)  # Every member of its route committed it.
    end = pb.Fragment(journal=JOURNAL, begin=sp.end, end=sp.end, compression_codec=codec)
    await sp.apply(proposal(end, sp.registers), primary=primary)
    ((done, _),) = obv.completes
    return done


async def read_back(
    reg: stores.StoreRegistry, frag: pb.Fragment, offset: int | None = None
) -> bytes:
    return b"".join([c async for c in reader.read_fragment(reg, frag, offset)])


def stored_fragment(sp: spool.Spool, url: str, postfix: str = "") -> pb.Fragment:
    f = pb.Fragment()
    f.CopyFrom(sp.spec)
    f.backing_store, f.path_postfix = url, postfix
    return f


@pytest.mark.parametrize("codec", ALL_CODECS)
async def test_persist_each_codec_and_read_back(tmp_path: Path, codec: int) -> None:
    (tmp_path / "s").mkdir()
    reg = stores.StoreRegistry(stores.StoresConfig(file_root=str(tmp_path)))
    data = [b"line %d\n" % i * 50 for i in range(300)]
    sp = await completed_spool(data, codec, batch=4096)
    await persister.persist(reg, sp, journal_spec("file:///s/"), False)
    frag = stored_fragment(sp, "file:///s/")
    path = tmp_path / "s" / pb.fragment_path(frag)
    assert path.exists()
    expected = b"".join(data)
    if codec != pb.NONE:
        assert path.stat().st_size == sp.compressed_length < len(expected)
    assert await read_back(reg, frag) == expected
    assert await read_back(reg, frag, frag.begin + 1234) == expected[1234:]
    assert await read_back(reg, frag, frag.end) == b""


async def test_persist_is_a_noop_when_the_file_exists(tmp_path: Path) -> None:
    (tmp_path / "s").mkdir()
    reg = stores.StoreRegistry(stores.StoresConfig(file_root=str(tmp_path)))
    sp = await completed_spool([b"hello"])
    path = tmp_path / "s" / pb.fragment_path(stored_fragment(sp, "file:///s/"))
    path.parent.mkdir(parents=True)
    path.write_bytes(b"already here")
    await persister.persist(reg, sp, journal_spec("file:///s/"), False)
    assert path.read_bytes() == b"already here"
    # No stores: nothing to do.
    await persister.persist(reg, sp, journal_spec(), False)


async def test_read_back_checks_the_span(tmp_path: Path) -> None:
    (tmp_path / "s").mkdir()
    reg = stores.StoreRegistry(stores.StoresConfig(file_root=str(tmp_path)))
    sp = await completed_spool([b"0123456789"])
    await persister.persist(reg, sp, journal_spec("file:///s/"), False)
    frag = stored_fragment(sp, "file:///s/")
    path = tmp_path / "s" / pb.fragment_path(frag)
    path.write_bytes(b"012345")
    with pytest.raises(errors.FragmentReadError, match="unexpected EOF"):
        await read_back(reg, frag)
    path.write_bytes(b"0123456789abc")
    with pytest.raises(
        errors.FragmentReadError, match=r"did not read EOF at expected Fragment\.End"
    ):
        await read_back(reg, frag)


async def test_postfix_template(tmp_path: Path) -> None:
    (tmp_path / "s").mkdir()
    reg = stores.StoreRegistry(stores.StoresConfig(file_root=str(tmp_path)))
    sp = await completed_spool([b"hello"])
    tpl = 'date={{ .Spool.FirstAppendTime.Format "2006-01-02" }}/hour={{ .Spool.FirstAppendTime.Format "15" }}'
    await persister.persist(reg, sp, journal_spec("file:///s/", template=tpl), False)
    frag = stored_fragment(sp, "file:///s/", "date=2019-11-19/hour=22")
    assert (tmp_path / "s" / pb.fragment_path(frag)).exists()
    assert "/date=2019-11-19/hour=22/" in pb.fragment_path(frag)


async def test_auth_errors_fall_back_only_while_exiting(tmp_path: Path) -> None:
    (tmp_path / "good").mkdir()
    reg = stores.StoreRegistry(stores.StoresConfig(file_root=str(tmp_path)))
    sp = await completed_spool([b"hello"])
    spec = journal_spec("file:///missing/", "file:///good/")
    with pytest.raises(errors.StoreError, match="invalid file store directory"):
        await persister.persist(reg, sp, spec, False)
    await persister.persist(reg, sp, spec, True)
    assert (tmp_path / "good" / pb.fragment_path(stored_fragment(sp, "file:///good/"))).exists()


class Uploads:
    """A persist_fn recording uploads, failing the first ``failures`` attempts."""

    def __init__(self, failures: int = 0) -> None:
        self.failures = failures
        self.done: list[tuple[int, int, bool]] = []
        self.attempts = 0
        self.changed = asyncio.Event()

    async def __call__(self, sp: spool.Spool, spec: pb.JournalSpec, exiting: bool) -> None:
        self.attempts += 1
        self.changed.set()
        if self.failures > 0:
            self.failures -= 1
            raise errors.StoreError("injected failure")
        self.done.append((sp.begin, sp.end, exiting))


def make_persister(
    uploads: Uploads, replica_delay: float, specs: dict[str, pb.JournalSpec]
) -> persister.Persister:
    return persister.Persister(
        stores.StoreRegistry(),
        specs.get,
        config=persister.PersisterConfig(
            replica_delay=replica_delay, retry_interval=0.01, max_retry_interval=0.02
        ),
        persist_fn=uploads,
    )


@pytest.mark.parametrize("codec", [pb.NONE, pb.GZIP])
async def test_only_the_confirmed_part_of_a_spool_is_stored(tmp_path: Path, codec: int) -> None:
    # A member cut off from its route holds a tail nobody confirmed: it stores what
    # every member committed, and keeps the rest aside in the spool directory.
    (tmp_path / "s").mkdir()
    reg = stores.StoreRegistry(stores.StoresConfig(file_root=str(tmp_path)))
    obv = RecordingObserver()
    quarantine = tmp_path / "spools"
    quarantine.mkdir()
    sp = spool.Spool(JOURNAL, obv, config=spool.SpoolConfig(directory=str(quarantine)))
    await sp.apply(proposal(pb.Fragment(journal=JOURNAL, compression_codec=codec)), primary=True)
    await commit(sp, b"confirmed,", pb.LabelSet(), primary=True)
    sp.confirm(sp.end)
    await commit(sp, b"unconfirmed", pb.LabelSet(), primary=True)
    end = pb.Fragment(journal=JOURNAL, begin=sp.end, end=sp.end, compression_codec=codec)
    await sp.apply(proposal(end, sp.registers), primary=True)
    ((done, _),) = obv.completes
    assert (done.confirmed_end, done.end) == (10, 21) and not done.confirmed

    p = persister.Persister(reg, lambda _: journal_spec("file:///s/"))
    async with asyncio.TaskGroup() as tg:
        tg.create_task(p.serve())
        p.spool_complete(done, True)
        p.stop()
    stored = sorted((tmp_path / "s").rglob("*-*-*"))
    assert [f.name.split(".")[0].split("-")[:2] for f in stored] == [["0" * 16, f"{10:016x}"]]
    frag = pb.parse_fragment_path(str(stored[0].relative_to(tmp_path / "s")))
    frag.backing_store = "file:///s/"
    assert await read_back(reg, frag) == b"confirmed,"
    (kept,) = [f for f in (quarantine / "quarantine").rglob("*") if f.is_file()]
    assert kept.name == f"{10:016x}-{21:016x}" and kept.read_bytes() == b"unconfirmed"


async def test_a_held_spool_stores_its_confirmed_part_and_keeps_its_tail(tmp_path: Path) -> None:
    uploads = Uploads()
    p = make_persister(uploads, 3600, {JOURNAL: journal_spec("file:///s/")})
    obv = RecordingObserver()
    sp = spool.Spool(JOURNAL, obv, config=spool.SpoolConfig(directory=str(tmp_path)))
    await sp.apply(proposal(pb.Fragment(journal=JOURNAL, compression_codec=pb.NONE)), primary=True)
    await commit(sp, b"abc", pb.LabelSet(), primary=True)
    sp.confirm(sp.end)
    await commit(sp, b"def", pb.LabelSet(), primary=True)
    roll = pb.Fragment(journal=JOURNAL, begin=6, end=6, compression_codec=pb.NONE)
    await sp.apply(proposal(roll), primary=True)
    ((done, _),) = obv.completes
    async with asyncio.TaskGroup() as tg:
        tg.create_task(p.serve())
        p.spool_complete(done, True, held=True)
        await asyncio.wait_for(uploads.changed.wait(), 5)
        assert uploads.done == [(0, 3, False)]
        assert not (tmp_path / "quarantine").exists()  # Its replica may adopt it yet.
        p.stop()


async def test_primary_spools_upload_at_once() -> None:
    uploads = Uploads()
    p = make_persister(uploads, 3600, {JOURNAL: journal_spec("file:///s/")})
    sp = await completed_spool([b"abc"])
    async with asyncio.TaskGroup() as tg:
        tg.create_task(p.serve())
        p.spool_complete(sp, True)
        await asyncio.wait_for(uploads.changed.wait(), 5)
        assert uploads.done == [(0, 3, False)]
        p.stop()


async def test_replica_spools_wait_the_replica_delay() -> None:
    uploads = Uploads()
    p = make_persister(uploads, 0.2, {JOURNAL: journal_spec("file:///s/")})
    sp = await completed_spool([b"abc"], primary=False)
    p.spool_complete(sp, False)
    assert p.queued == 1 and uploads.attempts == 0
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with asyncio.TaskGroup() as tg:
        tg.create_task(p.serve())
        await asyncio.wait_for(uploads.changed.wait(), 5)
        assert loop.time() - started >= 0.2
        assert uploads.done == [(0, 3, False)]
        p.stop()
    assert p.queued == 0


async def test_hurry_uploads_replica_spools_now() -> None:
    # A broker whose lease is in doubt stores every copy it holds without delay.
    uploads = Uploads()
    p = make_persister(uploads, 3600, {JOURNAL: journal_spec("file:///s/")})
    early = await completed_spool([b"abc"], primary=False)
    late = await completed_spool([b"abcdef"], primary=False)
    async with asyncio.TaskGroup() as tg:
        tg.create_task(p.serve())
        p.spool_complete(early, False)
        await asyncio.sleep(0.05)
        assert uploads.attempts == 0
        p.hurry()
        await asyncio.wait_for(uploads.changed.wait(), 5)
        uploads.changed.clear()
        p.spool_complete(late, False)  # After hurry(): at once.
        await asyncio.wait_for(uploads.changed.wait(), 5)
        p.stop()
    assert sorted(uploads.done) == [(0, 3, False), (0, 6, False)]


async def test_empty_spools_and_dropped_journals() -> None:
    uploads = Uploads()
    p = make_persister(uploads, 3600, {})
    empty = spool.Spool(JOURNAL, RecordingObserver())
    p.spool_complete(empty, False)
    assert p.queued == 0
    sp = await completed_spool([b"abc"])
    assert await p.attempt_persist(sp, exiting=False)  # No spec: dropped, not retried.
    assert uploads.attempts == 0 and p.queued == 0


async def test_failures_retry_and_stop_drains() -> None:
    uploads = Uploads(failures=2)
    p = make_persister(uploads, 3600, {JOURNAL: journal_spec("file:///s/")})
    primary_spool = await completed_spool([b"primary"])
    replica_spool = await completed_spool([b"replica!!"], primary=False)
    # The persist backlog the chart's alert reads counts both until they are stored.
    before = _pending_gauge()
    async with asyncio.TaskGroup() as tg:
        tg.create_task(p.serve())
        p.spool_complete(replica_spool, False)
        p.spool_complete(primary_spool, True)
        await asyncio.wait_for(uploads.changed.wait(), 5)
        assert _pending_gauge() == before + 2
        # The primary upload failed and is retried; stop uploads the replica's at once
        # and returns only once both are stored.
        p.stop()
    assert sorted(b - a for a, b, _ in uploads.done) == [7, 9]
    assert uploads.attempts >= 3
    assert p.queued == 0
    assert _pending_gauge() == before


def _pending_gauge() -> float:
    return prometheus_client.REGISTRY.get_sample_value("gazette_spool_persist_pending") or 0.0


async def test_a_spool_completed_as_the_persister_is_cancelled_is_dropped_cleanly() -> None:
    # A broker killed in-process cancels its persister; its replicas still roll their
    # spools on the way out. Nothing may be left as a never-awaited upload coroutine
    # (the tests' unraisable-warning check caught that once in CI).
    uploads = Uploads()
    p = make_persister(uploads, 3600, {JOURNAL: journal_spec("file:///s/")})
    serving = asyncio.create_task(p.serve())
    await asyncio.sleep(0)
    first = await completed_spool([b"abc"], primary=False)
    p.spool_complete(first, False)  # Waits out the replica delay, then is cancelled.
    serving.cancel()
    with pytest.raises(asyncio.CancelledError):
        await serving
    p.spool_complete(await completed_spool([b"abcdef"]), True)  # After: kept, never run.
    gc.collect()
    assert uploads.done == []
