"""Read iterators: the messages of a journal, as envelopes with exact offsets.

Gazette `message/reader.go`.

:class:`ReadUncommittedIter` reads every message of a journal: the framing
comes from the journal's ``content-type`` label (the spec is fetched on the
first read), and each frame becomes an :class:`~gazette.message.Envelope`
holding the message and its byte range ``[begin, end)``. It reads the
journal in large chunks (whatever each read returns) and splits many frames
out of each chunk; a frame cut across chunks is completed from the next.
When the broker skips content (an offset jump: deleted fragments), it logs
a warning and goes on from the new offset. Iteration ends at the request's
``end_offset``, or at the write head for a non-blocking read; a blocking
read waits for more. Every other failure is a
:class:`~gazette.message.errors.ReadError` naming the journal and offset;
a frame that does not decode is a :class:`~gazette.message.errors.DecodeError`.

:class:`ReadCommittedIter` puts a :class:`~gazette.message.Sequencer` behind
it and yields only committed messages, each once, replaying ranges of the
journal when an acknowledged span has left the sequencer's ring.

Usage::

    request = pb.ReadRequest(journal="examples/foo", offset=0, block=True)
    async with message.ReadUncommittedIter(jc, request, lambda spec: message.JSONMessage()) as it:
        async for env in it:
            print(env.begin, env.end, env.message.doc)
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from types import TracebackType
from typing import Protocol

from gazette.broker import client
from gazette.broker import protocol as pb
from gazette.message import errors, framing, interfaces, registry
from gazette.message import sequencer as sequencing

__all__ = ["ChunkReader", "ReadCommittedIter", "ReadUncommittedIter"]

log = logging.getLogger(__name__)


class ChunkReader(Protocol):
    """What the iterator reads from: a :class:`~gazette.broker.client.RetryReader`, or a test's fake.

    ``read()`` returns the next content (``b""`` once ``end_offset`` is
    reached) and advances ``offset`` past it; it may raise
    ``client.errors.OffsetJump`` (then ``offset`` is the new position) and,
    for non-blocking reads, ``client.errors.OffsetNotYetAvailable``.
    """

    @property
    def offset(self) -> int: ...

    async def read(self) -> bytes: ...

    async def close(self) -> None: ...


class ReadUncommittedIter:
    """All messages of ``request.journal`` from ``request.offset``; see the module docstring.

    ``new_message(spec)`` makes the message each frame decodes into. ``spec``
    and ``reader`` are seams: a known JournalSpec (no fetch) and a
    :class:`ChunkReader` to read instead of a new RetryReader.
    """

    def __init__(
        self,
        jc: client.JournalClient | None,
        request: pb.ReadRequest,
        new_message: interfaces.NewMessageFunc,
        *,
        spec: pb.JournalSpec | None = None,
        reader: ChunkReader | None = None,
    ) -> None:
        self._jc = jc
        self.request = pb.ReadRequest()
        self.request.CopyFrom(request)
        self.journal: str = request.journal
        self._new_message = new_message
        self._given_spec = spec
        self._reader = reader
        #: The journal's spec (its name is exactly the journal read), once the first read began.
        self.spec: pb.JournalSpec | None = None
        self._decoder: framing.Decoder | None = None
        self._buf = b""
        self._pos = 0
        self._base = request.offset  # Journal offset of _buf[0].
        self._final = False
        self._closed = False
        # A message made for a frame that needed more bytes.
        self._msg: interfaces.Message | None = None

    @property
    def offset(self) -> int:
        """Offset of the next frame (the end of the last returned one)."""
        return self._base + self._pos

    @property
    def write_head(self) -> int:
        """The journal's write head as of the last read response (0 before any)."""
        response = getattr(self._reader, "response", None)
        return int(response.write_head) if response is not None else 0

    def __aiter__(self) -> ReadUncommittedIter:
        return self

    async def __aenter__(self) -> ReadUncommittedIter:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop reading (iteration then ends)."""
        self._final = self._closed = True
        self._base += self._pos
        self._buf, self._pos = b"", 0
        reader, self._reader = self._reader, None
        if reader is not None:
            await reader.close()

    async def next(self) -> interfaces.Envelope:
        """The next envelope; raises StopAsyncIteration at the end of the read."""
        return await self.__anext__()

    async def __anext__(self) -> interfaces.Envelope:
        decoder = self._decoder
        if decoder is None:
            if self._closed:
                raise StopAsyncIteration
            decoder = await self._init()
        while True:
            buf, pos, final = self._buf, self._pos, self._final
            if pos < len(buf):
                msg = self._msg
                if msg is None:
                    msg = self._new(pos)
                try:
                    end = decoder.decode(buf, pos, final, msg)
                except errors.FramingError as e:
                    self._msg = None
                    resume = e.resume
                    self._pos = resume if pos < resume <= len(buf) else len(buf)
                    raise errors.DecodeError(self.journal, self._base + pos, str(e)) from e
                if end >= 0:
                    self._pos = end
                    self._msg = None
                    base = self._base
                    assert self.spec is not None
                    return interfaces.Envelope(self.spec, base + pos, base + end, msg)
                self._msg = msg
                if end == framing.CLEAN_END:
                    self._pos = len(buf)
                    await self.aclose()
                    raise StopAsyncIteration
                if final:
                    self._msg = None
                    self._pos = len(buf)
                    raise errors.DecodeError(self.journal, self._base + pos, "unexpected EOF")
            if final:
                await self.aclose()
                raise StopAsyncIteration
            await self._fill()

    def _new(self, pos: int) -> interfaces.Message:
        assert self.spec is not None
        try:
            return self._new_message(self.spec)
        except Exception as e:
            raise errors.ReadError(self.journal, self._base + pos, f"new_message: {e}") from e

    async def _init(self) -> framing.Decoder:
        spec = self._given_spec
        if spec is None:
            if self._jc is None:
                raise errors.ReadError(
                    self.journal, self.offset, "no journal client to fetch its spec"
                )
            try:
                spec = await client.get_journal(self._jc, self.journal)
            except client.errors.ClientError as e:
                raise errors.ReadError(
                    self.journal, self.offset, f"fetching journal spec: {e}"
                ) from e
        # The fetched spec names the journal without a ;meta suffix: give it the
        # exact name read, so envelopes of reads of one journal can be told apart.
        own = pb.JournalSpec()
        own.CopyFrom(spec)
        own.name = self.journal
        content_type = pb.value_of(own.labels, pb.LABEL_CONTENT_TYPE)
        try:
            f = registry.framing_for(content_type)
        except errors.UnknownContentType as e:
            raise errors.ReadError(self.journal, self.offset, f"determining framing: {e}") from e
        if self._reader is None:
            assert self._jc is not None
            self._reader = client.RetryReader(self._jc, self.request)
        self.spec = own
        self._decoder = decoder = f.new_decoder()
        return decoder

    async def _fill(self) -> None:
        """Read the next chunk into the buffer (or mark the end of the content)."""
        reader = self._reader
        assert reader is not None
        while True:
            try:
                chunk = await reader.read()
            except client.errors.OffsetJump as jump:
                if jump.from_offset != -1:  # -1: a read from the write head learning where it is.
                    log.warning(
                        "source journal offset jump (journal %s, from %d, to %d)",
                        self.journal,
                        jump.from_offset,
                        jump.to_offset,
                        extra={
                            "journal": self.journal,
                            "from": jump.from_offset,
                            "to": jump.to_offset,
                        },
                    )
                continue
            except client.errors.OffsetNotYetAvailable:
                chunk = b""  # A non-blocking read reached the write head.
            except Exception as e:
                raise errors.ReadError(self.journal, self.offset, str(e)) from e
            break
        if not chunk:
            self._final = True
            return
        begin = reader.offset - len(chunk)
        buf, pos = self._buf, self._pos
        if pos >= len(buf):
            self._buf, self._pos, self._base = chunk, 0, begin
            return
        if begin != self._base + len(buf):
            # Content was skipped after a partial frame: its rest is gone.
            cut = self._base + pos
            self._buf, self._pos, self._base, self._msg = chunk, 0, begin, None
            raise errors.DecodeError(
                self.journal, cut, f"frame cut short by an offset jump (to {begin})"
            )
        self._buf = buf[pos:] + chunk
        self._base += pos
        self._pos = 0


class ReadCommittedIter:
    """The committed messages of ``request.journal``, each once (a reader plus a Sequencer).

    A committed span which left the sequencer's ring is replayed through a
    new :class:`ReadUncommittedIter` of the same journal and request options
    over the range the sequencer names. ``open_reader(request)`` is a seam:
    it opens the :class:`ChunkReader` of the read and of each replay (a
    RetryReader of ``jc`` by default).
    """

    def __init__(
        self,
        jc: client.JournalClient | None,
        request: pb.ReadRequest,
        new_message: interfaces.NewMessageFunc,
        sequencer: sequencing.Sequencer,
        *,
        spec: pb.JournalSpec | None = None,
        open_reader: Callable[[pb.ReadRequest], ChunkReader] | None = None,
    ) -> None:
        self._jc = jc
        self._new_message = new_message
        self._open_reader = open_reader
        self.sequencer = sequencer
        self.uncommitted = ReadUncommittedIter(
            jc, request, new_message, spec=spec, reader=self._open(request)
        )

    def _open(self, request: pb.ReadRequest) -> ChunkReader | None:
        return None if self._open_reader is None else self._open_reader(request)

    def __aiter__(self) -> ReadCommittedIter:
        return self

    async def __aenter__(self) -> ReadCommittedIter:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.uncommitted.aclose()

    async def next(self) -> interfaces.Envelope:
        """The next committed envelope; raises StopAsyncIteration at the end of the read."""
        return await self.__anext__()

    async def __anext__(self) -> interfaces.Envelope:
        seq = self.sequencer
        while True:
            if await seq.step():
                assert seq.dequeued is not None
                return seq.dequeued
            env = await self.uncommitted.__anext__()
            if seq.queue_uncommitted(env) is sequencing.QueueOutcome.ACK_COMMIT_REPLAY:
                journal, begin, end = seq.replay_range()
                req = pb.ReadRequest()
                req.CopyFrom(self.uncommitted.request)
                req.journal, req.offset, req.end_offset = journal, begin, end
                # The replay reads the same journal: its spec is known already.
                seq.start_replay(
                    ReadUncommittedIter(
                        self._jc,
                        req,
                        self._new_message,
                        spec=self.uncommitted.spec,
                        reader=self._open(req),
                    )
                )
