"""Streaming compressors and decompressors for fragment files (Gazette `broker/codecs/codecs.go`).

Each codec is a pair of push-style objects: a :class:`Compressor` turns
uncompressed content into encoded bytes as it is fed, and a
:class:`Decompressor` does the reverse for bytes read from a store. Both work
chunk by chunk in C (ISA-L, zstandard, cramjam), so no fragment is ever held
wholly in memory and no Python code runs per byte. All of them release the
GIL while they work, so callers run them in worker threads for real
parallelism with the event loop.

Gzip is Intel's ISA-L (``isal``): on journal-like text it deflates about ten
times faster than zlib's default level for a size at most ~10% larger, and
inflates faster too. Its output is plain RFC 1952 gzip, decoded by Go's
``compress/gzip`` (Gazette) and Hadoop's ``GzipCodec`` (Spark) alike; the
interop and Spark suites read fragments written here through both.

Formats, as Gazette writes and reads them:

- ``NONE``: identity.
- ``GZIP``: RFC 1952 gzip. The writer ends a member on each :meth:`Compressor.close`
  and starts a new one on the next write, so incremental compression on the
  primary yields a multi-member file; the reader decodes every member.
- ``ZSTANDARD``: one zstd stream per writer; the reader decodes across frames.
- ``SNAPPY``: the Snappy *framing* format (stream identifier
  ``ff 06 00 00 73 4e 61 50 70 59``, masked CRC-32C per chunk).
- ``GZIP_OFFLOAD_DECOMPRESSION``: written as one gzip stream and uploaded with
  ``Content-Encoding: gzip``; the store is expected to decode it, so the
  reader is identity unless the store hands back gzip anyway (see
  :func:`new_decompressor`).
"""

from __future__ import annotations

from typing import Protocol

import cramjam
import zstandard
from isal import isal_zlib

from gazette.broker import protocol as pb
from gazette.broker.fragment import errors

# The Snappy framing format's stream identifier chunk: type 0xff, length 6, "sNaPpY".
SNAPPY_STREAM_IDENTIFIER = b"\xff\x06\x00\x00sNaPpY"

# zstd level. Gazette's writer (DataDog/zstd) uses 5; the level is not part of the
# format, and 3 (zstd's own default) keeps a replica's batch compression cheaper.
ZSTD_LEVEL = 3

# ISA-L gzip level (0-3). Level 1 is ISA-L's fast setting: on JSON and base64
# text it is 3-10x the speed of zlib level 6 for a size within 10% of it (see
# bench_fragment). Gazette writes klauspost/compress's default level; the level
# is not part of the format.
GZIP_LEVEL = 1
# gzip framing (header and CRC-32 trailer) around raw deflate, as zlib's wbits 16+15.
_GZIP_WBITS = 31
# isal's stub types its exception as an instance; it is a class.
_GZIP_ERROR: type[Exception] = isal_zlib.IsalError  # type: ignore[assignment]


class Compressor(Protocol):
    """Encodes content pushed through :meth:`compress`.

    :meth:`close` returns the bytes that end the current stream. For ``GZIP``
    it may be called after every batch (each call ends one gzip member and the
    next :meth:`compress` starts another); for every other codec it is called
    once, at the end.
    """

    def compress(self, data: bytes | memoryview) -> bytes: ...

    def close(self) -> bytes: ...


class Decompressor(Protocol):
    """Decodes a codec's bytes pushed through :meth:`decompress`.

    :meth:`finish` checks that the input ended on a stream boundary and raises
    :class:`errors.CodecError` when it was truncated.
    """

    def decompress(self, data: bytes | memoryview) -> bytes: ...

    def finish(self) -> bytes: ...


class _Identity:
    def compress(self, data: bytes | memoryview) -> bytes:
        return bytes(data)

    def close(self) -> bytes:
        return b""

    def decompress(self, data: bytes | memoryview) -> bytes:
        return bytes(data)

    def finish(self) -> bytes:
        return b""


class _GzipMultiMemberWriter:
    """A gzip member per batch: members are opened lazily and ended on close()."""

    def __init__(self) -> None:
        self._member: isal_zlib.Compress | None = None

    def compress(self, data: bytes | memoryview) -> bytes:
        if self._member is None:
            self._member = _gzip_compressobj()
        return self._member.compress(data)

    def close(self) -> bytes:
        if self._member is None:
            return b""
        out = self._member.flush(isal_zlib.Z_FINISH)
        self._member = None
        return out


class _GzipSingleWriter:
    """One gzip stream for the whole file (GZIP_OFFLOAD_DECOMPRESSION)."""

    def __init__(self) -> None:
        self._gz: isal_zlib.Compress | None = _gzip_compressobj()

    def compress(self, data: bytes | memoryview) -> bytes:
        if self._gz is None:
            raise errors.CodecError("write to a closed gzip compressor")
        return self._gz.compress(data)

    def close(self) -> bytes:
        if self._gz is None:
            return b""
        out = self._gz.flush(isal_zlib.Z_FINISH)
        self._gz = None
        return out


def _gzip_compressobj() -> isal_zlib.Compress:
    return isal_zlib.compressobj(GZIP_LEVEL, isal_zlib.DEFLATED, _GZIP_WBITS)


class _GzipReader:
    """Decodes concatenated gzip members (RFC 1952 §2.2)."""

    def __init__(self) -> None:
        self._member = isal_zlib.decompressobj(_GZIP_WBITS)
        # True once some input was seen, and again after each finished member.
        self._started = False

    def decompress(self, data: bytes | memoryview) -> bytes:
        parts: list[bytes] = []
        pending: bytes | memoryview = data
        while pending:
            self._started = True
            try:
                parts.append(self._member.decompress(pending))
            except _GZIP_ERROR as e:
                raise errors.CodecError(f"gzip: {e}") from e
            if not self._member.eof:
                break
            # A member ended: what follows it, if anything, starts the next member.
            pending = self._member.unused_data
            self._member = isal_zlib.decompressobj(_GZIP_WBITS)
            self._started = False
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def finish(self) -> bytes:
        if self._started:
            raise errors.CodecError("gzip: unexpected EOF (truncated member)")
        return b""


class _ZstdWriter:
    def __init__(self) -> None:
        self._z: zstandard.ZstdCompressionObj | None = zstandard.ZstdCompressor(
            level=ZSTD_LEVEL
        ).compressobj()

    def compress(self, data: bytes | memoryview) -> bytes:
        if self._z is None:
            raise errors.CodecError("write to a closed zstd compressor")
        return self._z.compress(data)

    def close(self) -> bytes:
        if self._z is None:
            return b""
        out = self._z.flush(zstandard.COMPRESSOBJ_FLUSH_FINISH)
        self._z = None
        return out


class _ZstdReader:
    """Decodes a sequence of zstd frames."""

    def __init__(self) -> None:
        self._dctx = zstandard.ZstdDecompressor()
        self._frame = self._dctx.decompressobj()
        self._started = False

    def decompress(self, data: bytes | memoryview) -> bytes:
        parts: list[bytes] = []
        pending: bytes | memoryview = data
        while pending:
            self._started = True
            try:
                parts.append(self._frame.decompress(pending))
            except zstandard.ZstdError as e:
                raise errors.CodecError(f"zstd: {e}") from e
            if not self._frame.eof:
                break
            pending = self._frame.unused_data
            self._frame = self._dctx.decompressobj()
            self._started = False
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def finish(self) -> bytes:
        if self._started:
            raise errors.CodecError("zstd: unexpected EOF (truncated frame)")
        return b""


class _SnappyWriter:
    def __init__(self) -> None:
        self._c: cramjam.snappy.Compressor | None = cramjam.snappy.Compressor()

    def compress(self, data: bytes | memoryview) -> bytes:
        if self._c is None:
            raise errors.CodecError("write to a closed snappy compressor")
        self._c.compress(bytes(data) if isinstance(data, memoryview) else data)
        return bytes(self._c.flush())

    def close(self) -> bytes:
        if self._c is None:
            return b""
        out = bytes(self._c.finish())
        self._c = None
        return out


class _SnappyReader:
    """Decodes the Snappy framing format.

    cramjam decodes whole framed streams but not a chunk split across two reads,
    so this walks chunk headers (one step per chunk of up to 64 KiB, never per
    byte), hands every complete chunk to cramjam at once, and keeps the partial
    tail for the next call. CRCs are checked by cramjam.
    """

    def __init__(self) -> None:
        self._tail = b""
        self._seen_identifier = False

    def decompress(self, data: bytes | memoryview) -> bytes:
        buf = self._tail + bytes(data) if self._tail else bytes(data)
        if not self._seen_identifier:
            head = buf[: len(SNAPPY_STREAM_IDENTIFIER)]
            if not SNAPPY_STREAM_IDENTIFIER.startswith(head):
                raise errors.CodecError("snappy: missing stream identifier")
            self._seen_identifier = len(head) == len(SNAPPY_STREAM_IDENTIFIER)
        pos, n = 0, len(buf)
        while pos + 4 <= n:
            size = int.from_bytes(buf[pos + 1 : pos + 4], "little")
            if pos + 4 + size > n:
                break
            pos += 4 + size
        complete, self._tail = buf[:pos], buf[pos:]
        if not complete:
            return b""
        if not complete.startswith(SNAPPY_STREAM_IDENTIFIER):
            # Later batches lack the identifier; a repeated one is legal in the format.
            complete = SNAPPY_STREAM_IDENTIFIER + complete
        try:
            return bytes(cramjam.snappy.decompress(complete))
        except cramjam.DecompressionError as e:
            raise errors.CodecError(f"snappy: {e}") from e

    def finish(self) -> bytes:
        if self._tail:
            raise errors.CodecError("snappy: unexpected EOF (truncated chunk)")
        return b""


def new_compressor(codec: int) -> Compressor:
    """A compressor writing ``codec``'s file format."""
    if codec == pb.NONE:
        return _Identity()
    if codec == pb.GZIP:
        return _GzipMultiMemberWriter()
    if codec == pb.GZIP_OFFLOAD_DECOMPRESSION:
        return _GzipSingleWriter()
    if codec == pb.ZSTANDARD:
        return _ZstdWriter()
    if codec == pb.SNAPPY:
        return _SnappyWriter()
    raise errors.CodecError(f"unsupported codec {codec}")


def new_decompressor(codec: int, *, content_encoding: str = "") -> Decompressor:
    """A decompressor of a fragment file's bytes as a store returned them.

    For ``GZIP_OFFLOAD_DECOMPRESSION`` the store should already have decoded
    the object; if it answered with ``content_encoding`` "gzip" regardless (MinIO,
    moto, a file store), the bytes are gunzipped here, as Gazette's reader does.
    """
    if codec == pb.NONE:
        return _Identity()
    if codec == pb.GZIP_OFFLOAD_DECOMPRESSION:
        return _GzipReader() if content_encoding == "gzip" else _Identity()
    if codec == pb.GZIP:
        return _GzipReader()
    if codec == pb.ZSTANDARD:
        return _ZstdReader()
    if codec == pb.SNAPPY:
        return _SnappyReader()
    raise errors.CodecError(f"unsupported codec {codec}")


def compress(codec: int, data: bytes) -> bytes:
    """Encode ``data`` whole (convenience for tests and small objects)."""
    c = new_compressor(codec)
    return c.compress(data) + c.close()


def decompress(codec: int, data: bytes, *, content_encoding: str = "") -> bytes:
    """Decode ``data`` whole (convenience for tests and small objects)."""
    d = new_decompressor(codec, content_encoding=content_encoding)
    return d.decompress(data) + d.finish()
