"""RetryReader: a journal read that survives broker failures and route changes.

It wraps a :class:`~gazette.broker.client.reader.Reader` and, when the read
fails for a reason that may pass (a broker died or shut down, the journal's
route moved, the journal has no brokers yet), opens a new Reader at exactly
the offset reached so far: the caller sees neither a gap nor a duplicate.
A restarted read goes to a member of the route the last response named (so
it follows the journal), avoiding brokers whose calls just failed.

What it surfaces (Gazette's ``retry_reader.go`` rules):

- ``OffsetNotYetAvailable`` of a non-blocking read: the write head was
  reached (iteration simply stops there, with a warning if the broker's write
  head is further on: a hole it has no fragment for yet);
- ``JournalNotFound`` after a few attempts, or at once for proxied reads;
- ``Suspended``, and cancellation;
- a refusal of the client's credentials (``UNAUTHENTICATED``);
- :class:`~gazette.broker.client.errors.OffsetJump` from :meth:`read` (the
  reader goes on from the new offset; iteration logs and continues).

Usage::

    rr = client.RetryReader(jc, pb.ReadRequest(journal="examples/foo", offset=0))
    async with rr:
        async for chunk in rr:        # ends at the write head (block=False)
            out.write(chunk)
    print(rr.offset)                  # where to resume next time
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from types import TracebackType

from gazette.broker import protocol as pb
from gazette.broker.client import errors, journal_client, reader

__all__ = ["RetryReader"]

log = logging.getLogger(__name__)

# Non-OK statuses (and transports) retried silently on the first attempt: they
# are the normal state of a journal whose assignment is still settling.
_QUIET_FIRST = (errors.InsufficientJournalBrokers, errors.NotJournalBroker)


class RetryReader:
    """Reads ``request.journal`` from ``request.offset``, retrying transient failures."""

    def __init__(
        self,
        client: journal_client.JournalClient,
        request: pb.ReadRequest,
    ) -> None:
        self.client = client
        copy = pb.ReadRequest()
        copy.CopyFrom(request)
        self.reader = reader.Reader(client, copy)
        self.jumps: list[errors.OffsetJump] = []

    @property
    def journal(self) -> str:
        return self.reader.request.journal

    @property
    def offset(self) -> int:
        """The next offset to be read (-1 until a tail read learns the write head)."""
        return self.reader.request.offset

    @property
    def response(self) -> pb.ReadResponse:
        return self.reader.response

    async def __aenter__(self) -> RetryReader:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        await self.reader.close()

    def _restart(self, route_from_last: bool = True) -> None:
        """A fresh Reader at the current offset, aimed at the last known route."""
        old = self.reader
        route = None
        if route_from_last and old.response.HasField("header"):
            route = old.response.header.route
        fresh = reader.Reader(self.client, old.request, route=route)
        # Keep the last metadata (fragment, write head) visible to callers.
        fresh.response = old.response
        self.reader = fresh

    async def seek(self, offset: int) -> None:
        """Continue the read from ``offset`` (a new RPC)."""
        await self.reader.close()
        self.reader.request.offset = offset
        self._restart()

    async def read(self) -> bytes:
        """The next content of the journal.

        Returns ``b""`` only when a requested ``end_offset`` was reached.
        """
        attempt = 0
        while True:
            try:
                data = await self.reader.read()
            except errors.OffsetJump:
                raise
            except asyncio.CancelledError:
                # grpc.aio cancels the RPC along with a cancelled read: a later
                # read() starts a new one, at the same offset (it moves only with
                # content returned, so nothing is skipped).
                try:
                    await self.reader.close()
                finally:
                    self._restart()
                raise
            except errors.ClientError as err:
                await self.reader.close()
                self._restart(route_from_last=not isinstance(err, errors.TransportError))
                quiet = False
                if isinstance(err, errors.OffsetNotYetAvailable):
                    if not self.reader.request.block:
                        raise
                    quiet = True
                elif isinstance(err, _QUIET_FIRST):
                    quiet = attempt == 0
                elif isinstance(err, errors.JournalNotFound):
                    if self.reader.request.HasField("header") or attempt > 3:
                        raise
                elif isinstance(err, errors.Suspended | errors.ProtocolViolation):
                    raise
                elif errors.is_refused(err):
                    raise  # The same credentials would be refused again.
                if not quiet:
                    log.warning(
                        "read of %s at offset %d failed (attempt %d, will retry): %s",
                        self.journal,
                        self.offset,
                        attempt,
                        err,
                    )
            else:
                if data:
                    return data
                request = self.reader.request
                if request.end_offset and request.offset >= request.end_offset:
                    return b""
                # A clean close of the stream (the broker is shutting down, or a
                # fragment read by URL ended): carry on at once.
                await self.reader.close()
                self._restart()
                attempt = -1
            if _cancel_requested():
                # Our task was cancelled but the stream ended as if closed or failed
                # (grpc.aio may end a cancelled call that way): stop, don't retry.
                raise asyncio.CancelledError
            await self.client.clock.sleep(self.client.config.backoff.delay(attempt))
            attempt += 1

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[bytes]:
        """Content until the write head (non-blocking reads) or ``end_offset``.

        Offset jumps are recorded in ``jumps`` and logged, and reading goes on.
        """
        while True:
            try:
                data = await self.read()
            except errors.OffsetJump as jump:
                if jump.from_offset != -1:  # -1 is a tail read learning the write head.
                    self.jumps.append(jump)
                    log.warning("%s", jump)
                continue
            except errors.OffsetNotYetAvailable:
                head = self.response.write_head
                if head > self.offset:
                    # Not the journal's end: no fragment the broker knows of covers
                    # this offset yet. Ending silently read as "nothing more".
                    log.warning(
                        "read of %s stopped at offset %d, below the broker's write head %d:"
                        " no fragment there is known to the broker yet (content other"
                        " brokers have yet to persist, or a hole); read again, or block",
                        self.journal,
                        self.offset,
                        head,
                    )
                return
            if not data:
                return
            yield data


def _cancel_requested() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
