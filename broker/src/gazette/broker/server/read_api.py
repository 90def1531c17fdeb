"""Serving a local Read: fragment metadata, then content (Gazette `broker/read_api.go` serveRead).

:func:`serve_read` answers a Read that resolved to this broker: for each
fragment the index offers at the request's offset it sends the metadata
response, then the fragment's content from the spool file (a fragment still
local) or from its store (a persisted one), and moves on to the next fragment
until the request's end offset, a non-OK status, or a persisted fragment the
client asked to fetch itself (``do_not_proxy``: the metadata carries its URL).

Content goes out in responses of up to :data:`READ_CHUNK_SIZE` bytes. Gazette
sends just under 32 KiB per response to suit Go gRPC's buffer pool; in Python
each message costs tens of microseconds on both ends, whatever its size, so
responses here are 256 KiB, well under gRPC's default 4 MiB receive limit,
which Gazette's clients and ours keep. (Measured on loopback, whole-journal
reads by either gazctl: 256 KiB about doubles 32 KiB; 512 KiB and 1 MiB were
slower than 256 KiB, as each message then outgrows HTTP/2's flow-control
window.) Reading a chunk (``pread`` of the spool file, or a store read and its
decoding) runs in a worker thread, one chunk ahead of the response being
sent, so a read's disk, decompression and network work overlap; a chunk that
fits a response is sent without a copy.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable

from gazette.broker import protocol as pb
from gazette.broker.fragment import errors as frag_errors
from gazette.broker.fragment import files, index, reader, stores
from gazette.broker.server import errors

__all__ = ["READ_CHUNK_SIZE", "serve_read"]

# Content bytes per ReadResponse (see the module docstring).
READ_CHUNK_SIZE = 1 << 18

Write = Callable[[pb.ReadResponse], Awaitable[None]]


async def serve_read(
    req: pb.ReadRequest,
    header: pb.Header,
    index_: index.Index,
    registry: stores.StoreRegistry,
    write: Write,
) -> None:
    """Stream ``req`` from ``index_`` through ``write``; ``header`` goes on the first response.

    ``req.offset`` advances as content is sent.
    """
    first = True
    end_offset = req.end_offset
    while True:
        try:
            resp, file = await index_.query(req)
        except frag_errors.IndexClosedError:
            return  # The replica stopped: end cleanly, the client retries elsewhere.
        if first:
            resp.header.CopyFrom(header)
            first = False
        await write(resp)
        if (
            resp.status != pb.OK
            or req.metadata_only
            or (file is None and req.do_not_proxy)
            or (end_offset != 0 and resp.offset >= end_offset)
        ):
            return
        frag = resp.fragment
        offset = resp.offset
        limit = frag.end if end_offset == 0 else min(frag.end, end_offset)

        chunks = (
            _spool_chunks(file, frag, offset, limit)
            if file is not None
            else reader.read_fragment(registry, frag, offset, block_size=READ_CHUNK_SIZE)
        )
        async with contextlib.aclosing(_read_ahead(chunks)) as ahead:
            async for chunk in ahead:
                for piece in _pieces(chunk, limit - offset):
                    await write(pb.ReadResponse(offset=offset, content=piece))
                    offset += len(piece)
                if offset >= limit:
                    break
        if file is not None and offset < limit:
            raise errors.BrokerServerError(
                f"spool file of {frag.journal} ended at {offset}, before {limit}"
            )
        if end_offset != 0 and offset >= end_offset:
            return
        req.offset = offset


async def _spool_chunks(
    file: files.SpoolFile, frag: pb.Fragment, offset: int, limit: int
) -> AsyncIterator[bytes]:
    """The spool file's content of ``[offset, limit)``, a response's worth at a time."""
    while offset < limit:
        # A worker thread: the spool file may have been paged out of the cache.
        data = await asyncio.to_thread(
            file.pread, min(READ_CHUNK_SIZE, limit - offset), offset - frag.begin
        )
        if not data:
            return  # The caller reports the short file.
        yield data
        offset += len(data)


def _pieces(chunk: bytes, room: int) -> list[bytes]:
    """``chunk`` cut to at most ``room`` bytes, in responses of READ_CHUNK_SIZE at most."""
    if len(chunk) <= min(room, READ_CHUNK_SIZE):
        return [chunk]  # The common case: sent as it is, no copy.
    view = memoryview(chunk)[:room]
    return [bytes(view[i : i + READ_CHUNK_SIZE]) for i in range(0, len(view), READ_CHUNK_SIZE)]


async def _read_ahead(chunks: AsyncIterator[bytes]) -> AsyncGenerator[bytes, None]:
    """The items of ``chunks``, the next fetched while the caller handles the current one.

    The fetch is a task of this generator alone: it is awaited on every step,
    and cancelled and awaited when the generator closes, so none outlives it.
    """
    it = aiter(chunks)
    pending: asyncio.Future[bytes] | None = asyncio.ensure_future(anext(it, b""))
    try:
        while pending is not None:
            chunk = await pending
            pending = None
            if not chunk:
                return
            pending = asyncio.ensure_future(anext(it, b""))
            yield chunk
    finally:
        if pending is not None:
            pending.cancel()
            # wait() rather than await: our own cancellation, if any, still propagates.
            await asyncio.wait([pending])
            if not pending.cancelled():
                pending.exception()  # Retrieved (and dropped): the read is abandoned.
        aclose = getattr(it, "aclose", None)
        if aclose is not None:
            await aclose()
