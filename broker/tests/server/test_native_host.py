"""NativeHost: the Python side of the native data plane, against a fake plane.

The plane itself (Rust) is tested by ``cargo test`` (its ``bridge`` module) and, in a
running broker, by every broker suite; here, what
the host does with what the plane hands it: commits into the index, completed
fragments to the persister, asks answered.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from typing import Any

import pytest

from gazette.broker import protocol as pb
from gazette.broker.fragment import index, spool, stores
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
        self.wake_fd = wake_fd
        self.outbox: list[tuple[Any, ...]] = []
        self.answers: dict[int, tuple[int | None, str | None]] = {}
        self.indexes: dict[str, tuple[bool, int, int, int]] = {}
        self.served = self.closed = False
        self.health: dict[str, str | None] = {}

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

    def answer(self, id: int, value: int | None = None, error: str | None = None) -> None:
        self.answers[id] = (value, error)

    def set_index(self, journal: str, done: bool, begin: int, end: int, mod_time: int) -> None:
        self.indexes[journal] = (done, begin, end, mod_time)

    def set_store_health(self, url: str, failure: str | None = None) -> None:
        self.health[url] = failure

    def set_lease(self, valid_for: float | None, cut_off: str | None = None) -> None:
        pass

    def flush_all(self) -> None:
        pass

    def stop(self, timeout: float) -> None:
        pass

    def close(self) -> None:
        self.closed = True


class FakeHost:
    def __init__(self) -> None:
        self.registry = stores.StoreRegistry()
        self.idx = index.Index()
        self.completed: list[tuple[spool.Spool, bool, bool]] = []
        self.asked: list[tuple[str, str, int, int, Any]] = []
        self.leases = 0

    def publish_lease(self) -> None:
        self.leases += 1

    def served_stores(self) -> set[str]:
        return {"file:///"}

    def local_index(self, journal: str) -> index.Index | None:
        return self.idx if journal == "a/journal" else None

    def primary_here(self, journal: str) -> bool:
        return journal == "a/journal"

    def spool_complete(self, sp: spool.Spool, primary: bool, *, held: bool = False) -> None:
        self.completed.append((sp, primary, held))

    async def answer_ask(self, kind: str, journal: str, a: int, b: int, extra: Any) -> int | None:
        self.asked.append((kind, journal, a, b, extra))
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
async def hosted() -> Any:
    host = FakeHost()
    planes: list[FakePlane] = []

    def make(fd: int) -> FakePlane:
        planes.append(FakePlane(fd))
        return planes[0]

    nh = native.NativeHost(make, host, spool.SpoolConfig())
    nh.start()
    yield nh, planes[0], host
    nh.close()


async def test_commits_reach_the_index_through_one_descriptor_per_file(hosted: Any) -> None:
    _, plane, host = hosted
    assert plane.served
    h = FakeHandle(b"hello world")
    plane.send(("commit", "a/journal", fragment(0, 5), h))
    await settle(lambda: host.idx.end_offset() == 5)
    plane.send(("commit", "a/journal", fragment(0, 11), h))
    await settle(lambda: host.idx.end_offset() == 11)
    assert h.dups == 1  # The same file: the descriptor is reused.
    # The primary's write head, as Gazette's gauge has it.
    assert metrics.write_head.labels("a/journal")._value.get() == 11
    _, f = await host.idx.query(pb.ReadRequest(journal="a/journal", offset=6))
    assert f is not None and f.pread(5, 6) == b"world"
    # Commits of journals no longer here are dropped.
    plane.send(("commit", "other/journal", fragment(0, 3), FakeHandle(b"abc")))
    await asyncio.sleep(0.05)
    assert host.local_index("other/journal") is None
    h.close()


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
    # The index has the fragment too (commits coalesce; its last may be missing), and
    # the plane learns what the index now says.
    assert host.idx.end_offset() == 5
    assert plane.indexes["a/journal"][2] == 5
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
