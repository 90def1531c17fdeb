"""The blocking facade, against a fake broker served from a thread of its own."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest
from client_fakes import FakeBroker

from gazette.broker import protocol as pb
from gazette.broker import testing
from gazette.broker.client import sync


@pytest.fixture
def served() -> Iterator[FakeBroker]:
    broker = FakeBroker()
    loop = asyncio.new_event_loop()
    started = threading.Event()
    stop: asyncio.Event | None = None

    async def serve() -> None:
        nonlocal stop
        stop = asyncio.Event()
        await broker.start()
        started.set()
        await stop.wait()
        await broker.stop()

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),))
    thread.start()
    assert started.wait(10)
    try:
        yield broker
    finally:
        assert stop is not None
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)
        loop.close()


def test_sync_append_read_list_apply(served: FakeBroker) -> None:
    with sync.Client(served.endpoint) as c:
        spec = testing.journal_spec("a/journal", labels=[("topic", "logs")])
        req = pb.ApplyRequest()
        req.changes.add(upsert=spec)
        assert c.apply(req).status == pb.OK
        assert [j.spec.name for j in c.list("topic=logs")] == ["a/journal"]

        assert c.append("a/journal", b"hello\n").commit.end == 6
        assert c.append("a/journal", iter([b"wor", b"ld\n"])).commit.end == 12
        assert c.read("a/journal") == b"hello\nworld\n"
        assert c.read("a/journal", offset=6) == b"world\n"
        assert [f.spec.begin for f in c.fragments("a/journal", signature_ttl=60)] == [0]


def test_close_ends_unfinished_reads_on_the_clients_loop(
    served: FakeBroker, caplog: pytest.LogCaptureFixture
) -> None:
    with sync.Client(served.endpoint) as c:
        req = pb.ApplyRequest()
        req.changes.add(upsert=testing.journal_spec("a/journal"))
        assert c.apply(req).status == pb.OK
        c.append("a/journal", b"hello\n")
        chunks = c.read_chunks("a/journal", block=True)
        assert next(chunks) == b"hello\n"  # Then left waiting for more.
    # close() ended that read on the client's loop: closing the iterator now is a no-op
    # (it would have run a coroutine on the closed loop).
    chunks.close()
    # grpc hands the cancelled read's last event to any loop of the process (here the fake
    # broker's, which keeps running): it must not find the client's loop closed.
    with sync.Client(served.endpoint) as c:
        assert c.read("a/journal") == b"hello\n"
    time.sleep(0.2)
    closed = [r for r in caplog.records if "Event loop is closed" in str(r.exc_info or r.msg)]
    assert not closed
