"""The blocking facade, against a fake broker served from a thread of its own."""

from __future__ import annotations

import asyncio
import threading
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
