"""A small blocking facade over the async client, for scripts and notebooks.

Usage::

    from gazette.broker.client import sync

    with sync.Client("http://localhost:8080") as c:
        c.append("examples/foo", b"hello\\n")
        print(c.read("examples/foo"))             # b"hello\\n": everything up to the write head
        for j in c.list("topic=logs"):
            print(j.spec.name)

Each Client runs its own event loop (``asyncio.Runner``) in the calling
thread; don't use it from inside a running event loop.
"""

from __future__ import annotations

import asyncio
import builtins
import dataclasses
from collections.abc import AsyncIterator, Iterator
from types import TracebackType
from typing import Any

from gazette.broker import protocol as pb
from gazette.broker.client import appender, config, journal_client, listing, retry_reader

__all__ = ["Client"]


#: How long closing a Client waits for its loop's calls to end (cancelled ones end at once).
CLOSE_DRAIN_TIMEOUT = 5.0


async def _next(it: AsyncIterator[bytes]) -> bytes:
    return await anext(it)


async def _drain() -> None:
    """Wait for the other tasks of the running loop to end (at most CLOSE_DRAIN_TIMEOUT).

    A cancelled grpc.aio call is done at once for its caller, but a task of grpc's
    own on the call's loop still awaits the call's last event from the core. grpc's
    poller thread hands each event to whichever loop of the process polls first,
    which passes it on to the call's loop with ``call_soon_threadsafe``: were that
    loop closed by then, the other loop would log "RuntimeError: Event loop is
    closed" (found with a blocking read left unfinished before a Spark read in the
    same process). So a loop is closed only once those tasks have their event.
    """
    me = asyncio.current_task()
    pending = [t for t in asyncio.all_tasks() if t is not me]
    if pending:
        await asyncio.wait(pending, timeout=CLOSE_DRAIN_TIMEOUT)


class Client:
    """Blocking List / Apply / Append / Read / ListFragments against a broker."""

    def __init__(self, address: str = config.DEFAULT_BROKER_ADDRESS, **options: Any) -> None:
        cfg = dataclasses.replace(config.ClientConfig(), address=address, **options)
        self._runner = asyncio.Runner()
        self._client = journal_client.JournalClient(cfg)
        #: Reads of unfinished :meth:`read_chunks` iterators, closed by :meth:`close`.
        self._reads: set[retry_reader.RetryReader] = set()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close unfinished reads and the channels, on the Client's loop; then the loop."""
        try:
            while self._reads:
                self._runner.run(self._reads.pop().close())
            self._runner.run(self._client.close())
            self._runner.run(_drain())
        finally:
            self._runner.close()

    def append(self, journal: str, content: appender.Content) -> pb.AppendResponse:
        """Append ``content`` (bytes, a path, a file, chunks) atomically; returns the response."""
        return self._runner.run(appender.append(self._client, journal, content))

    def read_chunks(
        self, journal: str, offset: int = 0, *, block: bool = False, end_offset: int = 0
    ) -> Iterator[bytes]:
        """Chunks of ``journal`` from ``offset``: to the write head, or forever with ``block``."""
        rr = retry_reader.RetryReader(
            self._client,
            pb.ReadRequest(journal=journal, offset=offset, block=block, end_offset=end_offset),
        )
        it = aiter(rr)
        # An iterator left unfinished keeps its RPC open: close() ends it on this loop.
        self._reads.add(rr)
        try:
            while True:
                try:
                    yield self._runner.run(_next(it))
                except StopAsyncIteration:
                    return
        finally:
            if rr in self._reads:  # Else close() has closed it already.
                self._reads.discard(rr)
                self._runner.run(rr.close())

    def read(self, journal: str, offset: int = 0, end_offset: int = 0) -> bytes:
        """All content of ``journal`` from ``offset`` up to the write head (or ``end_offset``)."""
        return b"".join(self.read_chunks(journal, offset, end_offset=end_offset))

    def list(self, selector: pb.LabelSelector | str | None = None) -> builtins.list[Any]:
        """Journals matching ``selector``."""
        resp = self._runner.run(listing.list_journals(self._client, selector))
        return [*resp.journals]

    def apply(self, request: pb.ApplyRequest, *, max_txn_size: int = 0) -> pb.ApplyResponse:
        return self._runner.run(
            listing.apply_journals(self._client, request, max_txn_size=max_txn_size)
        )

    def fragments(
        self,
        journal: str,
        *,
        begin_mod_time: int = 0,
        end_mod_time: int = 0,
        signature_ttl: float = 0,
    ) -> builtins.list[Any]:
        req = pb.FragmentsRequest(
            journal=journal, begin_mod_time=begin_mod_time, end_mod_time=end_mod_time
        )
        if signature_ttl:
            req.signatureTTL.CopyFrom(pb.duration_from_seconds(signature_ttl))

        async def collect() -> builtins.list[Any]:
            return [f async for f in listing.list_all_fragments(self._client, req)]

        return self._runner.run(collect())
