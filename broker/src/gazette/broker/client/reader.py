"""Reader: one Read RPC, and fragments read straight from their store by signed URL.

A :class:`Reader` streams a journal from ``request.offset``. Each call of
:meth:`Reader.read` returns the next piece of content and advances
``request.offset`` past it; ``b""`` means the broker closed the stream cleanly
(a :class:`~gazette.broker.client.retry_reader.RetryReader` then simply opens
another). When the request sets ``do_not_proxy`` and the covering fragment is
persisted, the broker answers with the fragment's signed URL instead of its
content (Gazette `broker/fragments_api.go`); the reader then fetches the fragment itself:

- ``file://`` URLs name a file under the client's ``file_root`` (the broker's
  ``--broker.file-root`` as mounted here), read from disk;
- ``http(s)://`` URLs (S3 presigned GETs and the like) are fetched with
  aiohttp, asking for ``Accept-Encoding: gzip`` for GZIP fragments (so the
  stored bytes come back as they are) and ``identity`` for
  GZIP_OFFLOAD_DECOMPRESSION ones, which are gunzipped here only if the store
  still sent them gzip-encoded (Gazette's `OpenFragmentURL`).

Decoding uses the broker's own streaming codecs, in a worker thread (they
release the GIL, so decoding runs beside the event loop), and the decoded
length is checked against the fragment's span.

The RPC goes through the native data plane where it is installed (see
:meth:`JournalClient.native_read`): its runtime thread reads ahead, and the
reader takes every response that has come with one wake-up of the event loop.
Otherwise, and for ``unix://`` endpoints, through grpc.aio.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import urllib.parse
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf.message import DecodeError

from gazette.broker import protocol as pb
from gazette.broker.client import errors, journal_client, metrics
from gazette.broker.protocol import auth, dial

if TYPE_CHECKING:
    from gazette import dataplane
    from gazette.broker.fragment import codecs

__all__ = ["READ_CHUNK", "FragmentReader", "Reader", "open_fragment_url", "write_head"]

log = logging.getLogger(__name__)

#: Bytes read from a fragment file per :meth:`FragmentReader.read`: large, so
#: that the per-call costs (a worker thread for the read and one for decoding)
#: stay small beside the bytes moved.
READ_CHUNK = 1 << 20


class Reader:
    """One Read RPC of ``request.journal`` from ``request.offset``.

    ``route`` (e.g. from an earlier response's header) chooses the broker; the
    route cache (or the default address) is used without one. ``response`` is
    the last metadata response (its ``fragment`` and ``write_head`` describe
    what is being read).
    """

    def __init__(
        self,
        client: journal_client.JournalClient,
        request: pb.ReadRequest,
        *,
        route: pb.Route | None = None,
    ) -> None:
        self.client = client
        self.request = request
        self.response = pb.ReadResponse()
        self._route = route
        # Once started, one of them: the native call (and what it handed over that
        # is not read yet), or grpc.aio's.
        self._native: dataplane.ReadCall | None = None
        self._taken: collections.deque[bytes | tuple[int, str] | None] = collections.deque()
        self._call: Any = None
        self._cancelled = False
        self._dispatch: journal_client.Dispatch | None = None
        self._chunk = b""
        self._chunk_offset = 0
        self._direct: FragmentReader | None = None
        self._counter = metrics.READ_BYTES.labels(request.journal)

    @property
    def dispatched_to(self) -> str | None:
        """The endpoint the RPC went to ("" for the default address; None before it started)."""
        return None if self._dispatch is None else self._dispatch.endpoint

    async def close(self) -> None:
        self._cancelled = True
        if self._native is not None:
            self._native.cancel()
        if self._call is not None:
            self._call.cancel()
        if self._direct is not None:
            await self._direct.close()
            self._direct = None

    def _take(self, data: bytes) -> bytes:
        if self.request.end_offset:
            data = data[: max(0, self.request.end_offset - self.request.offset)]
        self.request.offset += len(data)
        self._counter.inc(len(data))
        return data

    async def read(self) -> bytes:
        """The next content; ``b""`` at the clean end of the stream.

        Raises :class:`~gazette.broker.client.errors.OffsetJump` (the reader stays
        usable), a :class:`~gazette.broker.client.errors.StatusError` for a final
        non-OK status, or a transport / protocol / fragment error.
        """
        if self.request.end_offset and self.request.offset >= self.request.end_offset:
            await self.close()
            return b""
        if self._direct is not None:
            data = await self._direct.read()
            if not data:
                await self._direct.close()
                self._direct = None
                return b""
            return self._take(data)

        delta = self.request.offset - self._chunk_offset
        if 0 <= delta < len(self._chunk):
            data = self._chunk[delta:]
            self._chunk = b""
            return self._take(data)

        if self._dispatch is None:
            self._start()

        while True:
            resp = await self._recv()
            if resp is None:
                break
            if resp.HasField("header"):
                self.client.update_route(self.request.journal, resp.header.route)
            jumped_from = self.request.offset
            if resp.content:
                resp_fragment, resp_head = self.response.fragment, self.response.write_head
                self.response = resp
                self.response.fragment.CopyFrom(resp_fragment)
                self.response.write_head = resp_head
                self._chunk, self._chunk_offset = resp.content, resp.offset
            else:
                self.response = resp
            if jumped_from < resp.offset:
                self.request.offset = resp.offset
                raise errors.OffsetJump(self.request.journal, jumped_from, resp.offset)
            if resp.content:
                return await self.read()

        # The broker closed the stream.
        status = self.response.status
        if status == pb.OK:
            if not self.request.metadata_only and self.response.fragment_url:
                self._direct = await open_fragment_url(
                    self.client,
                    self.response.fragment,
                    self.request.offset,
                    self.response.fragment_url,
                )
                return await self.read()
            return b""
        raise errors.status_error(
            status,
            journal=self.request.journal,
            header=self.response.header if self.response.HasField("header") else None,
        )

    def _start(self) -> None:
        self._dispatch = self.client.dispatch(
            self.request.journal, primary=False, route=self._route
        )
        self.response = pb.ReadResponse()
        metadata = self.client.authorize(
            auth.journal_claims(auth.Capability.READ, self.request.journal)
        )
        self._native = self.client.native_read(
            self._dispatch.endpoint, self.request.SerializeToString(), metadata
        )
        if self._native is None:
            self._call = self._dispatch.stub.Read(self.request, metadata=metadata)

    async def _recv(self) -> pb.ReadResponse | None:
        assert self._dispatch is not None
        address = self._dispatch.endpoint or self.client.config.address
        if self._native is not None:
            if not self._taken:
                loop = asyncio.get_running_loop()
                taken: asyncio.Future[list[bytes | tuple[int, str] | None]] = loop.create_future()
                self._native.take(loop, taken)
                try:
                    self._taken.extend(await taken)
                except asyncio.CancelledError:
                    # What the runtime hands over next would be lost with this future:
                    # the RPC ends with the read, as grpc.aio ends it.
                    self._cancelled = True
                    self._native.cancel()
                    raise
            item = self._taken.popleft()
            if item is None:
                self._taken.append(None)  # Read again, the end is still the end.
                return None
            if isinstance(item, tuple):
                if self._cancelled:
                    # As grpc.aio ends a call cancelled here.
                    raise asyncio.CancelledError
                code, details = item
                raise self._failed(
                    errors.TransportError(
                        dial.code_of(code, details), details, method="Read", address=address
                    )
                )
            try:
                resp = pb.ReadResponse.FromString(item)
            except DecodeError as e:
                raise errors.ProtocolViolation("decoding broker ReadResponse", e) from e
        else:
            try:
                got = await self._call.read()
            except grpc.aio.AioRpcError as e:
                raise self._failed(errors.transport_error(e, method="Read", address=address)) from e
            if got is grpc.aio.EOF:
                return None
            assert isinstance(got, pb.ReadResponse)
            resp = got
        try:
            pb.validate(resp)
        except pb.ValidationError as e:
            raise errors.ProtocolViolation("validating broker ReadResponse", e) from e
        if resp.status == pb.OK and resp.offset < self.request.offset:
            raise errors.ProtocolViolation(
                "validating broker ReadResponse",
                pb.ValidationError(
                    f"invalid ReadResponse offset ({resp.offset}; expected >= {self.request.offset})"
                ),
            )
        return resp

    def _failed(self, err: errors.TransportError) -> errors.TransportError:
        """``err``, once a broker that is UNAVAILABLE is avoided for a while."""
        assert self._dispatch is not None
        return self.client.failed(self._dispatch.endpoint, self.request.journal, err)


# --- Fragments by signed URL ---------------------------------------------------


async def write_head(jc: journal_client.JournalClient, journal: str) -> int:
    """``journal``'s write head: the offset its next append will be written at.

    A metadata-only read at offset -1, as Gazette's ``gazctl shards list --lag`` asks
    for it (``gazctl journals reset-head`` and the lag of shards use it).
    """
    reader = Reader(jc, pb.ReadRequest(journal=journal, offset=-1, metadata_only=True))
    try:
        await reader.read()
        return reader.request.offset
    except errors.OffsetJump as jump:
        return jump.to_offset
    except errors.OffsetNotYetAvailable:
        return reader.response.offset
    finally:
        await reader.close()


class FragmentReader:
    """Decoded content of one fragment file, from ``offset`` to ``fragment.end``."""

    def __init__(
        self,
        fragment: pb.Fragment,
        decompressor: codecs.Decompressor,
        raw: _RawSource,
        url: str,
    ) -> None:
        self.fragment = fragment
        self.offset = fragment.begin  # Next journal offset that read() returns.
        self.url = url
        self._decomp = decompressor
        self._raw = raw
        self._eof = False
        self._pending = b""
        codec = pb.enum_text(pb.CompressionCodec, fragment.compression_codec)
        self._read_counter = metrics.READ_FRAGMENT_BYTES.labels(fragment.journal, codec)
        self._discard_counter = metrics.DISCARD_FRAGMENT_BYTES.labels(fragment.journal, codec)

    async def _decoded(self) -> bytes:
        """The next decoded bytes (b"" once the file is exhausted and checked)."""
        while not self._eof:
            raw = await self._raw.read(READ_CHUNK)
            if not raw:
                self._eof = True
                try:
                    tail = self._decomp.finish()
                except Exception as e:
                    raise errors.FragmentReadError(
                        f"decoding fragment: {e}", url=self.url, fragment=self.fragment
                    ) from e
                return tail
            try:
                out = (
                    raw
                    if self.fragment.compression_codec == pb.NONE
                    else await asyncio.to_thread(self._decomp.decompress, raw)
                )
            except Exception as e:
                raise errors.FragmentReadError(
                    f"decoding fragment: {e}", url=self.url, fragment=self.fragment
                ) from e
            if out:
                return out
        return b""

    async def _next(self) -> bytes:
        data = await self._decoded()
        if not data:
            if self.offset != self.fragment.end:
                raise errors.FragmentLengthError(
                    f"unexpected EOF reading fragment at {self.offset} (expected end {self.fragment.end})",
                    url=self.url,
                    fragment=self.fragment,
                )
            return b""
        self.offset += len(data)
        if self.offset > self.fragment.end:
            raise errors.FragmentLengthError(
                "did not read EOF at expected Fragment.End", url=self.url, fragment=self.fragment
            )
        return data

    async def skip_to(self, offset: int) -> None:
        while self.offset < offset:
            data = await self._next()
            if not data:
                raise errors.FragmentLengthError(
                    f"fragment ended before offset {offset}", url=self.url, fragment=self.fragment
                )
            if self.offset > offset:
                keep = self.offset - offset
                self._pending = data[len(data) - keep :]
                self._discard_counter.inc(len(data) - keep)
                return
            self._discard_counter.inc(len(data))

    async def read(self) -> bytes:
        """The next decoded content; b"" at the fragment's end."""
        if self._pending:
            data, self._pending = self._pending, b""
        else:
            data = await self._next()
        self._read_counter.inc(len(data))
        return data

    async def close(self) -> None:
        await self._raw.close()


class _RawSource:
    async def read(self, n: int) -> bytes:
        raise NotImplementedError

    async def close(self) -> None:
        return None


class _FileSource(_RawSource):
    def __init__(self, path: str) -> None:
        self._file = open(path, "rb")  # noqa: SIM115 (closed by close())

    async def read(self, n: int) -> bytes:
        return await asyncio.to_thread(self._file.read, n)

    async def close(self) -> None:
        self._file.close()


class _HttpSource(_RawSource):
    def __init__(self, session: Any, response: Any) -> None:
        self._session = session
        self._response = response

    async def read(self, n: int) -> bytes:
        data: bytes = await self._response.content.read(n)
        return data

    async def close(self) -> None:
        self._response.release()
        await self._session.close()


def _file_path(file_root: str, url: str) -> str:
    parsed = urllib.parse.urlsplit(url)
    if parsed.netloc:
        raise errors.FragmentReadError(f"file:// fragment URL with a host: {url!r}", url=url)
    rel = urllib.parse.unquote(parsed.path).lstrip("/")
    root = os.path.abspath(file_root)
    path = os.path.abspath(os.path.join(root, rel))
    if path != root and not path.startswith(root + os.sep):
        raise errors.FragmentReadError(
            f"file:// fragment URL escapes the file root: {url!r}", url=url
        )
    return path


async def open_fragment_url(
    client: journal_client.JournalClient,
    fragment: pb.Fragment,
    offset: int,
    url: str,
) -> FragmentReader:
    """Open ``fragment``'s signed ``url`` and position the reader at ``offset``."""
    # Imported here: the codecs' package pulls in the stores (boto3), which a
    # client that never reads a signed URL shouldn't pay for at start-up.
    from gazette.broker.fragment import codecs

    codec = fragment.compression_codec
    scheme = urllib.parse.urlsplit(url).scheme
    raw: _RawSource
    content_length = -1
    if scheme == "file":
        if not client.config.file_root:
            raise errors.FragmentReadError(
                f"reading {url!r} needs the directory of the file:// store (file_root / --file-root)",
                url=url,
                fragment=fragment,
            )
        path = _file_path(client.config.file_root, url)
        try:
            raw = _FileSource(path)
        except OSError as e:
            raise errors.FragmentReadError(
                f"opening fragment file {path}: {e}", url=url, fragment=fragment
            ) from e
        # File stores keep GZIP_OFFLOAD objects gzipped: nobody decodes them on the way.
        encoding = "gzip" if codec == pb.GZIP_OFFLOAD_DECOMPRESSION else ""
    elif scheme in ("http", "https"):
        import aiohttp  # Only signed-URL readers need it.

        headers = {}
        if codec == pb.GZIP_OFFLOAD_DECOMPRESSION:
            headers["Accept-Encoding"] = "identity"
        elif codec == pb.GZIP:
            headers["Accept-Encoding"] = "gzip"
        session = aiohttp.ClientSession(auto_decompress=False)
        try:
            resp = await session.get(url, headers=headers)
        except (aiohttp.ClientError, OSError) as e:
            await session.close()
            raise errors.FragmentReadError(
                f"fetching fragment: {e}", url=url, fragment=fragment
            ) from e
        if resp.status != 200:
            reason = resp.reason or ""
            resp.release()
            await session.close()
            raise errors.FragmentURLError(url, resp.status, reason)
        encoding = resp.headers.get("Content-Encoding", "")
        content_length = resp.content_length if resp.content_length is not None else -1
        raw = _HttpSource(session, resp)
    else:
        raise errors.FragmentReadError(
            f"unsupported fragment URL scheme {scheme!r}", url=url, fragment=fragment
        )

    labels = (fragment.journal, pb.enum_text(pb.CompressionCodec, codec))
    metrics.FRAGMENT_OPEN.labels(*labels).inc()
    metrics.FRAGMENT_OPEN_BYTES.labels(*labels).inc(fragment.end - fragment.begin)
    if content_length >= 0:
        metrics.FRAGMENT_OPEN_CONTENT_LENGTH.labels(*labels).inc(content_length)

    reader = FragmentReader(
        fragment, codecs.new_decompressor(codec, content_encoding=encoding), raw, url
    )
    try:
        await reader.skip_to(offset)
    except BaseException:
        await reader.close()
        raise
    return reader
