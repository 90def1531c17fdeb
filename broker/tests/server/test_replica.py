"""The control plane's replica: its refresh daemon and the listings reads ask for.

(The data plane's replica rules, flushes, held tails and head recovery, are tested
in Rust: broker/dataplane/core/src/replica/tests.rs; the back-off between listings
its reads of a hole ask for, in bridge/reads/tests.rs.)
"""

from __future__ import annotations

import asyncio
from typing import Any

from gazette.broker import protocol as pb
from gazette.broker.fragment import cover_set, index
from gazette.broker.server import replica

JOURNAL = "a/journal"


class FakeRegistry:
    def sign_get_url(self, *_: Any) -> str:
        return ""


class FakeHost:
    def __init__(self) -> None:
        self.registry: Any = FakeRegistry()
        self.spec = pb.JournalSpec(name=JOURNAL, replication=1)
        self.changed = asyncio.Event()

    def lookup_spec(self, journal: str) -> pb.JournalSpec | None:
        return self.spec

    def new_fence(self, journal: str) -> None:
        return None

    async def skipped_ranges(self, journal: str) -> tuple[tuple[int, int], ...]:
        return ((10, 20),)

    def index_changed(self, rep: replica.Replica) -> None:
        self.changed.set()


async def test_each_listing_is_applied_and_published_to_the_data_plane(
    monkeypatch: Any,
) -> None:
    listed = [pb.Fragment(journal=JOURNAL, begin=0, end=100)]

    async def walk_all_stores(*_: Any) -> cover_set.CoverSet:
        listing = cover_set.CoverSet()
        for f in listed:
            listing.add(cover_set.Fragment(f))
        return listing

    monkeypatch.setattr(index, "walk_all_stores", walk_all_stores)
    host = FakeHost()
    rep = replica.Replica(JOURNAL, host, primary=True, create_revision=1)
    serving = asyncio.ensure_future(rep.serve())
    async with asyncio.timeout(5):
        await host.changed.wait()
    assert rep.index.summary()[:2] == (0, 100)
    assert rep.listed_at > 0
    # Asked for, the next listing comes at once (not after the refresh interval).
    host.changed.clear()
    listed.append(pb.Fragment(journal=JOURNAL, begin=100, end=150))
    rep.refresh_now()
    async with asyncio.timeout(5):
        await host.changed.wait()
    assert rep.index.summary()[:2] == (0, 150)
    rep.stop()
    async with asyncio.timeout(5):
        await serving


async def test_a_hole_also_looks_up_the_ranges_the_journal_skipped() -> None:
    host = FakeHost()
    rep = replica.Replica(JOURNAL, host, primary=False, create_revision=1)
    rep.list_for_hole()
    assert rep._skipped_lookup is not None
    await rep._skipped_lookup
    assert rep._refresh_now.is_set()  # Reads jump them only after a fresh listing.
