"""One atomic append: an Append RPC streaming content of any size, and retries.

An :class:`Appender` is a single Append RPC: the first message names the
journal (and any offset / register conditions), content follows in chunks,
and an empty message commits. Either all of it lands in the journal as one
contiguous span, or none of it does (Gazette `broker/append_fsm.go`).

The RPC goes through the native data plane where it is installed (see
:meth:`JournalClient.native_append`): messages are queued for its runtime
thread without waiting, and the outcome settles one future, so an append costs
the event loop one wake-up. Otherwise, and for ``unix://`` endpoints, through
grpc.aio. Both give the same responses and the same errors.

:func:`append` wraps that with the retry policy of Gazette's `client.Append`: a
broker that is unreachable (``UNAVAILABLE``) or not (yet) the journal's
primary is retried after a backoff; any other failure is raised. Content that
can only be read once (an iterator, a pipe) is kept in a spooled temporary
file as it is sent, so a retry replays it and the iterator is read only once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import tempfile
import typing
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable
from typing import IO, TYPE_CHECKING, Union

import grpc

from gazette.broker import protocol as pb
from gazette.broker.client import errors, journal_client, metrics
from gazette.broker.protocol import auth, dial

if TYPE_CHECKING:
    from gazette import dataplane

__all__ = ["CHUNK_SIZE", "Appender", "Content", "append"]

log = logging.getLogger(__name__)

#: Bytes of content per AppendRequest message.
CHUNK_SIZE = 1 << 17
#: One-shot content beyond this many bytes spills from memory to a temporary file.
SPOOL_MEMORY = 8 << 20

_Chunks = Iterable[bytes] | AsyncIterable[bytes]
#: What :func:`append` accepts: bytes; a path; a seekable binary file; a callable
#: returning a fresh (async) iterable of chunks each time; or a one-shot (async) iterable.
Content = Union[
    bytes, bytearray, memoryview, "os.PathLike[str]", IO[bytes], Callable[[], _Chunks], _Chunks
]


class Appender:
    """One Append RPC. Write content with :meth:`write`, then :meth:`close` (or :meth:`abort`).

    The RPC starts lazily on the first write (or close). ``response`` holds the
    broker's answer once closed.
    """

    def __init__(
        self,
        client: journal_client.JournalClient,
        request: pb.AppendRequest,
    ) -> None:
        self.client = client
        self.request = request
        self.response = pb.AppendResponse()
        # Exactly one of them once started: the native call, or grpc.aio's.
        self._native: dataplane.AppendCall | None = None
        self._call: grpc.aio.StreamUnaryCall | None = None
        self._dispatch: journal_client.Dispatch | None = None
        self._counter = metrics.APPEND_BYTES.labels(request.journal)

    async def _start(self) -> None:
        if self._dispatch is not None:
            return
        if not self.request.journal:
            raise pb.ValidationError("expected Request.Journal")
        try:
            pb.validate(self.request)
        except pb.ValidationError as e:
            raise e.within("Request") from None
        dispatch = self.client.dispatch(self.request.journal, primary=True)
        metadata = self.client.authorize(
            auth.journal_claims(auth.Capability.APPEND, self.request.journal)
        )
        self._native = self.client.native_append(
            dispatch.endpoint, self.request.SerializeToString(), metadata
        )
        if self._native is None:
            self._call = dispatch.stub.Append(metadata=metadata)
        self._dispatch = dispatch
        if self._call is not None:
            await self._write_call(self.request)

    async def _send(self, content: bytes) -> None:
        """Send a message of ``content`` (b"": the commit). If the RPC already ended,
        its outcome (read by close) says why."""
        if self._native is None:
            await self._write_call(pb.AppendRequest(content=content) if content else _COMMIT)
            return
        while not self._native.write(content):
            if self._native.done():
                return
            # The native queue is full: the broker reads slower than we write.
            loop = asyncio.get_running_loop()
            ready: asyncio.Future[None] = loop.create_future()
            self._native.writable(loop, ready)
            await ready

    async def _write_call(self, msg: pb.AppendRequest) -> None:
        assert self._call is not None
        with contextlib.suppress(grpc.aio.AioRpcError, asyncio.InvalidStateError):
            await self._call.write(msg)

    def _ended(self) -> bool:
        if self._native is not None:
            return self._native.done()
        return self._call is not None and self._call.done()

    async def write(self, data: bytes | bytearray | memoryview) -> None:
        """Send ``data`` (split into messages of at most :data:`CHUNK_SIZE`)."""
        if not data:
            return  # An empty message would commit.
        await self._start()
        view = memoryview(data)
        for i in range(0, len(view), CHUNK_SIZE):
            chunk = bytes(view[i : i + CHUNK_SIZE])
            await self._send(chunk)
            if self._ended():
                await self._outcome()  # Raises the RPC's failure.
            self._counter.inc(len(chunk))

    async def close(self) -> pb.AppendResponse:
        """Commit: send the empty message, half-close, and check the broker's response."""
        await self._start()
        await self._send(b"")
        if self._native is not None:
            self._native.finish()
        else:
            assert self._call is not None
            with contextlib.suppress(grpc.aio.AioRpcError, asyncio.InvalidStateError):
                await self._call.done_writing()
        return await self._outcome()

    def abort(self) -> None:
        """Cancel the RPC: nothing written so far is committed."""
        if self._native is not None:
            self._native.cancel()
        if self._call is not None:
            self._call.cancel()

    async def _outcome(self) -> pb.AppendResponse:
        assert self._dispatch is not None
        address = self._dispatch.endpoint or self.client.config.address
        if self._native is not None:
            loop = asyncio.get_running_loop()
            settled: asyncio.Future[bytes | str | tuple[int, str]] = loop.create_future()
            self._native.outcome(loop, settled)
            outcome = await settled
            if isinstance(outcome, tuple):
                code, details = outcome
                raise self._failed(
                    errors.TransportError(
                        dial.code_of(code, details), details, method="Append", address=address
                    )
                )
            if isinstance(outcome, str):
                # The data plane validated the response as pb.validate does, word for word.
                raise errors.ProtocolViolation(
                    "validating broker AppendResponse", pb.ValidationError(outcome)
                )
            self.response = pb.AppendResponse.FromString(outcome)
        else:
            assert self._call is not None
            try:
                self.response = await self._call
            except grpc.aio.AioRpcError as e:
                raise self._failed(
                    errors.transport_error(e, method="Append", address=address)
                ) from e
            try:
                pb.validate(self.response)
            except pb.ValidationError as e:
                raise errors.ProtocolViolation("validating broker AppendResponse", e) from e
        self.client.update_route(self.request.journal, self.response.header.route)
        status = self.response.status
        if status == pb.OK:
            return self.response
        detail = ""
        if status == pb.REGISTER_MISMATCH:
            detail = (
                f"selector {pb.format_selector(self.request.check_registers)} doesn't match "
                f"registers {[f'{lb.name}={lb.value}' for lb in self.response.registers.labels]}"
            )
        elif status == pb.FRAGMENT_STORE_UNHEALTHY:
            detail = self.response.store_health_error
        raise errors.status_error(
            status, journal=self.request.journal, header=self.response.header, detail=detail
        )

    def _failed(self, err: errors.TransportError) -> errors.TransportError:
        """``err``, once a broker that is UNAVAILABLE is avoided for a while."""
        assert self._dispatch is not None
        return self.client.failed(self._dispatch.endpoint, self.request.journal, err)


#: The empty message that commits an append.
_COMMIT = pb.AppendRequest()


# --- Content sources -----------------------------------------------------------


class _Source:
    """Content that can be sent again on a retry, even if its origin is one-shot."""

    def __init__(self, content: Content) -> None:
        self._content = content
        self._spool: tempfile.SpooledTemporaryFile[bytes] | None = None
        self._iter: AsyncIterator[bytes] | None = None
        self._exhausted = False
        self._start_pos: int | None = None

    async def chunks(self) -> AsyncIterator[bytes]:
        c = self._content
        if isinstance(c, bytes | bytearray | memoryview):
            yield bytes(c)
        elif isinstance(c, str):
            raise TypeError("append content is bytes (or a pathlib.Path to read a file), not str")
        elif isinstance(c, os.PathLike):
            with open(c, "rb") as f:  # noqa: ASYNC230 (chunks are read off the loop below)
                while chunk := await asyncio.to_thread(f.read, CHUNK_SIZE):
                    yield chunk
        elif hasattr(c, "read") and hasattr(c, "seek"):
            file = typing.cast(IO[bytes], c)
            # A seekable file: every attempt starts where the file was first seen.
            if self._start_pos is None:
                self._start_pos = file.tell()
            file.seek(self._start_pos)
            while chunk := await asyncio.to_thread(file.read, CHUNK_SIZE):
                yield chunk
        elif callable(c):
            async for chunk in _aiter(c()):
                yield chunk
        else:
            async for chunk in self._replay_one_shot(c):
                yield chunk

    async def _replay_one_shot(self, it: _Chunks) -> AsyncIterator[bytes]:
        if self._spool is None:
            self._spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY)  # noqa: SIM115
            self._iter = _aiter(it).__aiter__()
        spool = self._spool
        spool.seek(0)
        while chunk := spool.read(CHUNK_SIZE):
            yield chunk
        if self._exhausted:
            return
        assert self._iter is not None
        async for chunk in self._iter:
            if not chunk:
                continue
            spool.seek(0, os.SEEK_END)
            spool.write(chunk)
            yield chunk
        self._exhausted = True

    def close(self) -> None:
        if self._spool is not None:
            self._spool.close()


async def _aiter(it: _Chunks) -> AsyncIterator[bytes]:
    if isinstance(it, AsyncIterable):
        async for chunk in it:
            yield chunk
    else:
        for chunk in it:
            yield chunk


async def append(
    client: journal_client.JournalClient,
    request: pb.AppendRequest | str,
    content: Content,
    *,
    through_head_gaps: bool = False,
) -> pb.AppendResponse:
    """Append ``content`` to a journal as one atomic write, retrying as Gazette does.

    ``request`` is a journal name or a full first ``pb.AppendRequest``.
    Raises a :class:`~gazette.broker.client.errors.StatusError` for a final
    non-OK status, and :class:`~gazette.broker.client.errors.TransportError`
    for RPC failures other than ``UNAVAILABLE`` (which is retried).
    ``through_head_gaps`` retries ``INDEX_HAS_GREATER_OFFSET`` too, with a
    warning each time: our brokers resume such a journal by themselves (see
    :class:`~gazette.broker.client.errors.IndexHasGreaterOffset`), and a caller
    that can only fail otherwise, such as a consumer shard's recovery, waits.
    """
    if isinstance(request, str):
        request = pb.AppendRequest(journal=request)
    source = _Source(content)
    try:
        attempt = 0
        while True:
            appender = Appender(client, request)
            try:
                async for chunk in source.chunks():
                    await appender.write(chunk)
                return await appender.close()
            except errors.ClientError as err:
                appender.abort()
                gap = through_head_gaps and isinstance(err, errors.IndexHasGreaterOffset)
                if not (gap or errors.is_transient(err)):
                    raise
                # Routing statuses are expected while a journal's assignment settles.
                if gap or not (attempt == 0 and isinstance(err, errors.StatusError)):
                    log.warning(
                        "append to %s failed (attempt %d, will retry): %s",
                        request.journal,
                        attempt,
                        err,
                    )
            except BaseException:
                appender.abort()
                raise
            await client.clock.sleep(client.config.backoff.delay(attempt))
            attempt += 1
    finally:
        source.close()
