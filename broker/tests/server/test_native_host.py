"""NativeHost: the Python side of the native data plane, against a fake plane.

The plane itself (Rust) is tested by ``cargo test`` (its ``bridge`` module) and, in a
running broker, by every broker suite; here, what
the host does with what the plane hands it: completed fragments to the persister,
asks answered, stored fragments read for the plane's reads under their credit, and
store listings published into the plane's index.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest

from gazette.broker import protocol as pb
from gazette.broker.fragment import cover_set, index, spool, stores
from gazette.broker.server import metrics, native


class FakeHandle:
    """A spool file as the plane lends it."""

    _serials = 0

    def __init__(self, content: bytes, *, recoverable: bool = False) -> None:
        FakeHandle._serials += 1
        self.serial = FakeHandle._serials
        fd, path = tempfile.mkstemp(prefix="spool")
        os.write(fd, content)
        self._fd = fd
        self.path: str | None = path if recoverable else None
        self.record_path: str | None = None
        if recoverable:
            self.record_path = path + ".record"
            with open(self.record_path, "wb") as f:
                f.write(b"{}")
        else:
            os.unlink(path)
        self.dups = 0

    def dup(self) -> int:
        self.dups += 1
        return os.dup(self._fd)

    def close(self) -> None:
        os.close(self._fd)


class FakePlane:
    def __init__(self, wake_fd: int) -> None:
        self.heads: list[tuple[str, int]] = []
        self.wake_fd = wake_fd
        self.outbox: list[tuple[Any, ...]] = []
        self.answers: dict[int, tuple[int | str | None, str | None]] = {}
        self.served = self.closed = False
        self.health: dict[str, str | None] = {}
        self.chunks: dict[int, list[bytes]] = {}
        self.ends: dict[int, str | None] = {}
        self.wants = True
        self.published: list[tuple[str, str, Any]] = []

    def send(self, *events: tuple[Any, ...]) -> None:
        self.outbox.extend(events)
        os.write(self.wake_fd, b"x")

    def serve(self) -> None:
        self.served = True

    def update_local(self, assignments: list[Any]) -> list[str]:
        return []

    def drain(self) -> list[tuple[Any, ...]]:
        out, self.outbox = self.outbox, []
        return out

    def answer(
        self, id: int, value: int | None = None, error: str | None = None, text: str | None = None
    ) -> None:
        self.answers[id] = (text if text is not None else value, error)

    def stored_chunk(self, id: int, data: bytes) -> bool:
        self.chunks.setdefault(id, []).append(data)
        return self.wants

    def stored_end(self, id: int, error: str | None = None) -> None:
        self.ends[id] = error

    def replace_stored(self, journal: str, fragments: list[bytes]) -> bool:
        self.published.append(("listing", journal, fragments))
        return True

    def mark_skipped(self, journal: str, ranges: list[tuple[int, int]]) -> bool:
        self.published.append(("skipped", journal, ranges))
        return True

    def fragments(self, journal: str) -> list[bytes] | None:
        return [fragment(0, 5), fragment(5, 9)] if journal == "a/journal" else None

    def set_store_health(self, url: str, failure: str | None = None) -> None:
        self.health[url] = failure

    def set_lease(self, valid_for: float | None, cut_off: str | None = None) -> None:
        pass

    def write_heads(self) -> list[tuple[str, int]]:
        return list(self.heads)

    def flush_all(self) -> None:
        pass

    def stop(self, timeout: float) -> None:
        pass

    def close(self) -> None:
        self.closed = True


class FakeHost:
    def __init__(self, registry: stores.StoreRegistry | None = None) -> None:
        self.registry = registry or stores.StoreRegistry()
        self.listed: list[str] = []
        self.completed: list[tuple[spool.Spool, bool, bool]] = []
        self.asked: list[tuple[str, str, int, int, Any]] = []
        self.leases = 0

    def publish_lease(self) -> None:
        self.leases += 1

    def served_stores(self) -> set[str]:
        return {"file:///"}

    def spool_complete(self, sp: spool.Spool, primary: bool, *, held: bool = False) -> None:
        self.completed.append((sp, primary, held))

    def list_now(self, journal: str) -> None:
        self.listed.append(journal)

    async def answer_ask(
        self, kind: str, journal: str, a: int, b: int, extra: Any
    ) -> int | str | None:
        self.asked.append((kind, journal, a, b, extra))
        if kind == "sign_url":
            return f"signed:{pb.Fragment.FromString(extra).end}:{a}"
        if kind == "cover_fence":
            raise RuntimeError("etcd: permission denied")
        return a + b


def fragment(begin: int, end: int) -> bytes:
    return pb.Fragment(journal="a/journal", begin=begin, end=end).SerializeToString()


async def settle(cond: Any) -> None:
    """Wait (polling: the host runs on this loop) until ``cond()`` holds."""
    async with asyncio.timeout(5):
        while not cond():  # noqa: ASYNC110
            await asyncio.sleep(0.01)


@pytest.fixture
async def hosted(tmp_path: Path) -> Any:
    (tmp_path / "s").mkdir()
    host = FakeHost(stores.StoreRegistry(stores.StoresConfig(file_root=str(tmp_path))))
    planes: list[FakePlane] = []

    def make(fd: int) -> FakePlane:
        planes.append(FakePlane(fd))
        return planes[0]

    nh = native.NativeHost(make, host, spool.SpoolConfig())
    nh.start()
    yield nh, planes[0], host
    nh.close()


async def test_a_completed_fragment_goes_to_the_persister_as_a_spool(hosted: Any) -> None:
    _, plane, host = hosted
    h = FakeHandle(b"hello", recoverable=True)
    registers = pb.LabelSet(labels=[pb.Label(name="reg", value="1")]).SerializeToString()
    plane.send(
        (
            "complete",
            "a/journal",
            fragment(0, 5),
            h,
            None,
            0,
            3,  # Confirmed through 3 of 5.
            True,
            False,  # Not at once: a replica's copy.
            True,  # Held.
            registers,
            1_700_000_000.5,
        )
    )
    await settle(lambda: host.completed)
    sp, at_once, held = host.completed[0]
    assert (at_once, held) == (False, True)
    assert (sp.journal, sp.begin, sp.end, sp.confirmed_end, sp.continued) == (
        "a/journal",
        0,
        5,
        3,
        True,
    )
    assert sp.registers.labels[0].name == "reg"
    assert sp.first_append_time is not None and sp.first_append_time.year == 2023
    assert sp.file is not None and sp.file.pread(5, 0) == b"hello"
    # The persister removes a stored recoverable file's names, as it does its own.
    assert sp.file.path == h.path and sp.file.record is not None
    await sp.forget_file()
    assert h.path is not None and h.record_path is not None
    assert not any(map(os.path.exists, (h.path, h.record_path)))
    h.close()


async def test_asks_are_answered_with_a_value_or_the_error(hosted: Any) -> None:
    _, plane, host = hosted
    plane.send(
        ("ask", 7, "head_resumes_at", "a/journal", 40, 2, None),
        ("ask", 8, "cover_fence", "a/journal", 100, 0, None),
    )
    await settle(lambda: len(plane.answers) == 2)
    assert plane.answers[7] == (42, None)
    assert plane.answers[8] == (None, "etcd: permission denied")
    assert host.asked[0] == ("head_resumes_at", "a/journal", 40, 2, None)


async def test_the_lease_and_store_health_are_published_while_it_runs(hosted: Any) -> None:
    nh, plane, host = hosted
    publishing = asyncio.get_running_loop().create_task(nh.publish())
    try:
        await settle(lambda: host.leases >= 2 and "file:///" in plane.health)
    finally:
        publishing.cancel()
    _, err = host.registry.get("file:///").health_status()
    assert plane.health["file:///"] == (None if err is None else str(err))


async def test_close_stops_serving_and_draining(hosted: Any) -> None:
    nh, plane, _ = hosted
    nh.close()
    assert plane.closed
    nh.close()  # Idempotent.


async def test_asks_for_a_text_are_answered_with_it(hosted: Any) -> None:
    _, plane, _ = hosted
    plane.send(("ask", 9, "sign_url", "a/journal", 60, 0, fragment(0, 5)))
    await settle(lambda: 9 in plane.answers)
    assert plane.answers[9] == ("signed:5:60", None)


def stored_fragment(tmp_path: Path, content: bytes, *, short_by: int = 0) -> pb.Fragment:
    """A fragment of ``content`` in the store file:///s/ (rooted at ``tmp_path``), whose
    object ends ``short_by`` bytes before the fragment does."""
    frag = pb.Fragment(
        journal="a/journal",
        begin=1000,
        end=1000 + len(content) + short_by,
        compression_codec=pb.NONE,
        backing_store="file:///s/",
    )
    path = tmp_path / "s" / pb.fragment_path(frag)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return frag


async def test_a_stored_fragment_is_read_for_the_plane_within_its_credit(
    hosted: Any, tmp_path: Path
) -> None:
    _, plane, _ = hosted
    chunk = native.READ_CHUNK_SIZE
    content = bytes(range(256)) * (3 * chunk // 256)
    frag = stored_fragment(tmp_path, content)
    plane.send(("read_stored", 1, "a/journal", frag.SerializeToString(), 1010, 1))
    await settle(lambda: len(plane.chunks.get(1, [])) == 1)
    await asyncio.sleep(0.05)
    assert len(plane.chunks[1]) == 1, "no more than its credit"
    plane.send(("read_credit", 1), ("read_credit", 1), ("read_credit", 1))
    await settle(lambda: 1 in plane.ends)
    assert plane.ends[1] is None
    assert b"".join(plane.chunks[1]) == content[10:]


async def test_a_failing_store_read_ends_the_plane_s_read_with_its_words(
    hosted: Any, tmp_path: Path
) -> None:
    _, plane, _ = hosted
    frag = stored_fragment(tmp_path, b"short", short_by=10)
    plane.send(("read_stored", 2, "a/journal", frag.SerializeToString(), 1000, 2))
    await settle(lambda: 2 in plane.ends)
    assert b"".join(plane.chunks[2]) == b"short"
    assert "unexpected EOF reading fragment" in (plane.ends[2] or "")


async def test_a_cancelled_stored_read_stops(hosted: Any, tmp_path: Path) -> None:
    nh, plane, _ = hosted
    frag = stored_fragment(tmp_path, b"x" * (3 * native.READ_CHUNK_SIZE))
    plane.send(("read_stored", 3, "a/journal", frag.SerializeToString(), 1000, 1))
    await settle(lambda: 3 in plane.chunks)
    plane.send(("read_cancel", 3))
    await settle(lambda: not nh._stored)
    await asyncio.sleep(0.05)
    assert 3 not in plane.ends and len(plane.chunks[3]) == 1
    # A read the plane says is over stops at its next chunk too.
    plane.wants = False
    plane.send(("read_stored", 4, "a/journal", frag.SerializeToString(), 1000, 5))
    await settle(lambda: not nh._stored and 4 in plane.chunks)
    assert 4 not in plane.ends and len(plane.chunks[4]) == 1


async def test_holes_and_listings_pass_between_the_plane_and_the_index(hosted: Any) -> None:
    nh, plane, host = hosted
    plane.send(("list_now", "a/journal"))
    await settle(lambda: host.listed == ["a/journal"])
    idx = index.Index()
    idx.mark_skipped([(10, 20)])
    listing = cover_set.CoverSet()
    listing.add(cover_set.Fragment(pb.Fragment.FromString(fragment(20, 30))))
    idx.replace_remote(listing)
    nh.publish_listing("a/journal", idx)
    assert plane.published == [
        ("skipped", "a/journal", [(10, 20)]),
        ("listing", "a/journal", [fragment(20, 30)]),
    ]
    # ListFragments reads the plane's index.
    listed = nh.fragments("a/journal")
    assert [(f.begin, f.end) for f in listed] == [(0, 5), (5, 9)]
    assert nh.fragments("other/journal") is None


async def test_the_write_heads_of_our_primaries_are_gauged(hosted: Any) -> None:
    nh, plane, _ = hosted
    plane.heads = [("a/journal", 11), ("b/journal", 3)]
    heads = nh._gauge_write_heads(set())
    assert heads == {"a/journal", "b/journal"}
    assert metrics.write_head.labels("a/journal")._value.get() == 11
    # No longer our primary: its gauge goes, as Gazette's primaries keep only theirs.
    plane.heads = [("a/journal", 12)]
    assert nh._gauge_write_heads(heads) == {"a/journal"}
    assert metrics.write_head.labels("a/journal")._value.get() == 12
    assert ("b/journal",) not in metrics.write_head._metrics
