"""Quarantined tails that their journal went on from are stored when no store holds them."""

from __future__ import annotations

import hashlib
import os
import time
import urllib.parse
from pathlib import Path

import pytest

from gazette.broker import protocol as pb
from gazette.broker.fragment import cover_set, index, reader, spool, stores
from gazette.broker.server import mend

JOURNAL = "a/journal"


class FakeReplica:
    def __init__(self, listed: list[tuple[int, int]], listed_ago: float) -> None:
        self.index = index.Index()
        self.index.replace_remote(
            cover_set.CoverSet(
                cover_set.Fragment(pb.Fragment(journal=JOURNAL, begin=b, end=e)) for b, e in listed
            )
        )
        self.listed_at = time.monotonic() - listed_ago
        self.refreshes = 0

    def refresh_now(self) -> None:
        self.refreshes += 1


class FakeHost:
    def __init__(self, root: Path, rep: FakeReplica | None) -> None:
        self.registry = stores.StoreRegistry(stores.StoresConfig(file_root=str(root)))
        self.rep = rep

    def lookup_spec(self, journal: str) -> pb.JournalSpec | None:
        spec = pb.JournalSpec(name=JOURNAL, replication=1)
        spec.fragment.stores.append("file:///s/")
        spec.fragment.compression_codec = pb.SNAPPY
        return spec if journal == JOURNAL else None

    def local_replica(self, journal: str) -> FakeReplica | None:
        return self.rep if journal == JOURNAL else None


def _tail(spools: Path, begin: int, data: bytes, kept_ago: float) -> Path:
    d = spools / "quarantine" / urllib.parse.quote(JOURNAL, safe="")
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{begin:016x}-{begin + len(data):016x}"
    path.write_bytes(data)
    t = time.time() - kept_ago
    os.utime(path, (t, t))
    return path


@pytest.mark.parametrize(
    ("case", "listed", "kept_ago", "stored"),
    [
        ("went on from its end, nobody stored it", [(0, 10), (21, 30)], 100, True),
        ("not gone on from its end (yet)", [(0, 10), (25, 30)], 100, False),
        ("a store holds other content there", [(0, 10), (5, 21), (21, 30)], 100, False),
        ("kept aside too recently for the listing", [(0, 10), (21, 30)], 1, False),
        ("older than the window: an operator's", [(0, 10), (21, 30)], mend.WINDOW + 60, False),
    ],
)
async def test_a_quarantined_tail_is_stored_only_if_the_journal_went_on_from_its_end(
    tmp_path: Path, case: str, listed: list[tuple[int, int]], kept_ago: float, stored: bool
) -> None:
    (tmp_path / "s").mkdir()
    spools = tmp_path / "spools"
    path = _tail(spools, 10, b"unconfirmed", kept_ago)
    rep = FakeReplica(listed, listed_ago=0.5)
    host = FakeHost(tmp_path, rep)
    config = spool.SpoolConfig(directory=str(spools))

    done = await mend.Mender(str(spools), host, config).sweep()  # type: ignore[arg-type]

    assert [(t.begin, t.end) for t in done] == ([(10, 21)] if stored else []), case
    found = list((tmp_path / "s").rglob("*-*-*"))
    assert path.exists() != stored, case
    if not stored:
        assert found == [], case
        return
    (frag_path,) = found
    frag = pb.parse_fragment_path(str(frag_path.relative_to(tmp_path / "s")))
    frag.backing_store = "file:///s/"
    assert (frag.begin, frag.end) == (10, 21)
    assert b"".join([c async for c in reader.read_fragment(host.registry, frag)]) == b"unconfirmed"
    assert rep.refreshes == 1  # Readers learn of it now.


async def test_a_stale_listing_is_refreshed_rather_than_trusted(tmp_path: Path) -> None:
    (tmp_path / "s").mkdir()
    spools = tmp_path / "spools"
    path = _tail(spools, 10, b"unconfirmed", 100)
    # Listed before the tail was kept aside: it cannot tell.
    rep = FakeReplica([(0, 10), (21, 30)], listed_ago=200)
    host = FakeHost(tmp_path, rep)
    config = spool.SpoolConfig(directory=str(spools))
    assert await mend.Mender(str(spools), host, config).sweep() == []  # type: ignore[arg-type]
    assert rep.refreshes == 1 and path.exists()


async def test_a_journal_served_elsewhere_is_listed_directly(tmp_path: Path) -> None:
    store = tmp_path / "s" / JOURNAL
    store.mkdir(parents=True)
    for begin, data in ((0, b"0123456789"), (21, b"went on")):
        sha = hashlib.sha1(data).hexdigest()
        (store / f"{begin:016x}-{begin + len(data):016x}-{sha}.raw").write_bytes(data)
    spools = tmp_path / "spools"
    path = _tail(spools, 10, b"unconfirmed", 100)
    host = FakeHost(tmp_path, None)  # No local replica of the journal here.
    config = spool.SpoolConfig(directory=str(spools))
    done = await mend.Mender(str(spools), host, config).sweep()  # type: ignore[arg-type]
    assert [(t.begin, t.end) for t in done] == [(10, 21)] and not path.exists()
