"""Spools found on disk after a crash: their confirmed part is stored, the rest kept aside."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from fragment_helpers import JOURNAL, RecordingObserver, commit, proposal

from gazette.broker import protocol as pb
from gazette.broker.fragment import files, persister, reader, recovery, spool, stores


def _exists(path: str | Path) -> bool:
    return Path(path).exists()


def _bytes(path: str | Path) -> bytes:
    return Path(path).read_bytes()


def _spec() -> pb.JournalSpec:
    spec = pb.JournalSpec(name=JOURNAL, replication=1)
    spec.fragment.stores.append("file:///s/")
    return spec


async def _crashed_spool(spools: Path, codec: int) -> spool.Spool:
    """A primary's spool as a SIGKILL leaves it: [0, 10) confirmed, [10, 21) not."""
    config = spool.SpoolConfig(directory=str(spools), recoverable=True)
    sp = spool.Spool(JOURNAL, RecordingObserver(), config=config)
    await sp.apply(proposal(pb.Fragment(journal=JOURNAL, compression_codec=codec)), primary=True)
    await commit(sp, b"confirmed,", pb.LabelSet(), primary=True)
    sp.confirm(sp.end)
    await sp.record_confirmed()
    await commit(sp, b"unconfirmed", pb.LabelSet(), primary=True)
    return sp  # Never completed: the process died here.


@pytest.mark.parametrize("codec", [pb.NONE, pb.GZIP])
async def test_a_crashed_spool_is_stored_up_to_its_confirmed_end(
    tmp_path: Path, codec: int
) -> None:
    (tmp_path / "s").mkdir()
    spools = tmp_path / "spools"
    sp = await _crashed_spool(spools, codec)
    assert sp.file is not None and sp.file.path is not None
    assert _exists(sp.file.path) and _exists(sp.file.path + files.RECORD_SUFFIX)

    reg = stores.StoreRegistry(stores.StoresConfig(file_root=str(tmp_path)))

    async def spec_of(journal: str) -> pb.JournalSpec | None:
        return _spec() if journal == JOURNAL else None

    (found,) = await recovery.recover(
        str(spools), reg, spec_of, config=spool.SpoolConfig(directory=str(spools))
    )
    assert (found.begin, found.confirmed, found.end, found.stored) == (0, 10, 21, True)
    (stored,) = (tmp_path / "s").rglob("*-*-*")
    frag = pb.parse_fragment_path(str(stored.relative_to(tmp_path / "s")))
    frag.backing_store = "file:///s/"
    assert (frag.begin, frag.end) == (0, 10)
    assert b"".join([c async for c in reader.read_fragment(reg, frag)]) == b"confirmed,"
    assert found.quarantined is not None and _bytes(found.quarantined) == b"unconfirmed"
    # Stored: nothing is left to recover at the next start.
    assert not _exists(sp.file.path)
    assert await recovery.recover(str(spools), reg, spec_of, config=spool.SpoolConfig()) == []


async def test_a_spool_whose_store_is_down_stays_for_the_next_start(tmp_path: Path) -> None:
    spools = tmp_path / "spools"
    sp = await _crashed_spool(spools, pb.NONE)
    reg = stores.StoreRegistry(stores.StoresConfig(file_root=str(tmp_path)))  # No "s/".

    async def spec_of(journal: str) -> pb.JournalSpec | None:
        return _spec()

    (found,) = await recovery.recover(
        str(spools), reg, spec_of, config=spool.SpoolConfig(), within=0.5
    )
    assert not found.stored
    assert sp.file is not None and sp.file.path is not None and _exists(sp.file.path)


async def test_a_stored_spool_forgets_its_files(tmp_path: Path) -> None:
    # The persister removes a recoverable spool's names once its content is stored.
    (tmp_path / "s").mkdir()
    spools = tmp_path / "spools"
    sp = await _crashed_spool(spools, pb.NONE)
    sp.confirm(sp.end)
    obv = sp.observer
    assert isinstance(obv, RecordingObserver)
    await sp.apply(proposal(pb.Fragment(journal=JOURNAL, begin=21, end=21)), primary=True)
    ((done, _),) = obv.completes
    assert done.file is not None and done.file.path is not None
    path = Path(done.file.path)
    reg = stores.StoreRegistry(stores.StoresConfig(file_root=str(tmp_path)))
    p = persister.Persister(reg, lambda _: _spec())
    async with asyncio.TaskGroup() as tg:
        tg.create_task(p.serve())
        p.spool_complete(done, True)
        p.stop()
    assert not _exists(path) and not _exists(str(path) + files.RECORD_SUFFIX)
    assert [f.name.split("-")[:2] for f in (tmp_path / "s").rglob("*-*-*")] == [
        ["0" * 16, f"{21:016x}"]
    ]
