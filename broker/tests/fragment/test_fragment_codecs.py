"""Codecs: round trips of every codec, multi-member / multi-frame input, split reads."""

from __future__ import annotations

import gzip
import io
import os
import random
import zlib

import cramjam
import pytest
import zstandard

from gazette.broker import protocol as pb
from gazette.broker.fragment import codecs, errors

ALL_CODECS = [pb.NONE, pb.GZIP, pb.ZSTANDARD, pb.SNAPPY, pb.GZIP_OFFLOAD_DECOMPRESSION]


def sample(n: int, seed: int = 1) -> bytes:
    """Half compressible text, half random bytes."""
    rnd = random.Random(seed)
    text = b"".join(b"record %d: %s\n" % (i, b"x" * rnd.randrange(40)) for i in range(n // 40))
    return (text + rnd.randbytes(n // 2))[:n]


def encode_in_batches(codec: int, data: bytes, batch: int) -> bytes:
    """As the spool does: compress batch by batch, closing each GZIP batch's member."""
    c = codecs.new_compressor(codec)
    out = []
    for i in range(0, len(data), batch):
        out.append(c.compress(data[i : i + batch]))
        if codec == pb.GZIP:
            out.append(c.close())
    out.append(c.close())
    return b"".join(out)


def decode_in_pieces(codec: int, blob: bytes, piece: int, content_encoding: str = "") -> bytes:
    d = codecs.new_decompressor(codec, content_encoding=content_encoding)
    out = [d.decompress(blob[i : i + piece]) for i in range(0, len(blob), piece)]
    out.append(d.finish())
    return b"".join(out)


@pytest.mark.parametrize("codec", ALL_CODECS)
@pytest.mark.parametrize("size", [0, 1, 1000, 300_000])
def test_round_trip(codec: int, size: int) -> None:
    data = sample(size)
    enc = "gzip" if codec == pb.GZIP_OFFLOAD_DECOMPRESSION else ""
    blob = encode_in_batches(codec, data, 70_000)
    for piece in (1 << 20, 4096, 777):
        assert decode_in_pieces(codec, blob, piece, enc) == data
    if size <= 1000:
        assert decode_in_pieces(codec, blob, 1, enc) == data


def test_gzip_writes_a_member_per_batch() -> None:
    data = sample(250_000)
    blob = encode_in_batches(pb.GZIP, data, 100_000)
    members = 0
    rest = blob
    while rest:
        d = zlib.decompressobj(wbits=31)
        d.decompress(rest)
        assert d.eof
        rest = d.unused_data
        members += 1
    assert members == 3
    # The standard library's reader agrees.
    assert gzip.decompress(blob) == data
    # A member is not opened for nothing: closing twice adds no empty member.
    c = codecs.new_compressor(pb.GZIP)
    assert c.close() == b""


def test_gzip_reads_members_of_other_writers() -> None:
    """Members as zlib, Python's gzip (with a file name) and ISA-L write them, concatenated,
    decode as one GZIP fragment; so does the reverse (ours read by the standard library)."""
    parts = [sample(90_000, 1), sample(40_000, 2), b"", sample(70_000, 3)]
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    blob = (
        z.compress(parts[0])
        + z.flush()
        + gzip.compress(parts[1], mtime=1_700_000_000)
        + _gzip_with_name(parts[2])
        + codecs.compress(pb.GZIP, parts[3])
    )
    for piece in (1 << 20, 1000, 7):
        assert decode_in_pieces(pb.GZIP, blob, piece) == b"".join(parts)
    d = codecs.new_decompressor(pb.GZIP)
    assert d.decompress(memoryview(blob)) + d.finish() == b"".join(parts)


def _gzip_with_name(data: bytes) -> bytes:
    buf = io.BytesIO()
    with gzip.GzipFile(filename="fragment.raw", mode="wb", fileobj=buf, mtime=0) as f:
        f.write(data)
    return buf.getvalue()


def test_gzip_offload_is_one_stream() -> None:
    data = sample(200_000)
    blob = encode_in_batches(pb.GZIP_OFFLOAD_DECOMPRESSION, data, 50_000)
    d = zlib.decompressobj(wbits=31)
    assert d.decompress(blob) == data and d.eof and d.unused_data == b""
    # Stores that decode for us hand back plain content: no decoding then.
    assert codecs.decompress(pb.GZIP_OFFLOAD_DECOMPRESSION, data) == data
    assert codecs.decompress(pb.GZIP_OFFLOAD_DECOMPRESSION, blob, content_encoding="gzip") == data


def test_zstd_reads_across_frames() -> None:
    a, b = sample(100_000, 1), sample(50_000, 2)
    blob = zstandard.ZstdCompressor().compress(a) + zstandard.ZstdCompressor(level=9).compress(b)
    assert decode_in_pieces(pb.ZSTANDARD, blob, 1000) == a + b
    # Our writer's stream is readable by zstandard's own reader.
    ours = encode_in_batches(pb.ZSTANDARD, a, 10_000)
    with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(ours)) as r:
        assert r.read() == a


def test_snappy_is_the_framing_format() -> None:
    data = sample(200_000)
    blob = encode_in_batches(pb.SNAPPY, data, 30_000)
    assert blob[:10] == bytes([0xFF, 0x06, 0x00, 0x00, 0x73, 0x4E, 0x61, 0x50, 0x70, 0x59])
    assert blob.count(codecs.SNAPPY_STREAM_IDENTIFIER) >= 1
    # An independent framed decoder agrees.
    assert bytes(cramjam.snappy.decompress(blob)) == data
    # And a stream from a one-shot framed encoder decodes in pieces.
    other = bytes(cramjam.snappy.compress(data))
    assert decode_in_pieces(pb.SNAPPY, other, 5000) == data


def test_snappy_rejects_raw_format_and_bad_crc() -> None:
    with pytest.raises(errors.CodecError, match="stream identifier"):
        codecs.decompress(pb.SNAPPY, bytes(cramjam.snappy.compress_raw(b"hello" * 100)))
    blob = bytearray(codecs.compress(pb.SNAPPY, b"hello world" * 100))
    blob[-1] ^= 0xFF
    with pytest.raises(errors.CodecError):
        codecs.decompress(pb.SNAPPY, bytes(blob))


@pytest.mark.parametrize("codec", [pb.GZIP, pb.ZSTANDARD, pb.SNAPPY])
def test_truncated_input_fails(codec: int) -> None:
    blob = codecs.compress(codec, os.urandom(10_000))
    with pytest.raises(errors.CodecError):
        codecs.decompress(codec, blob[:-3])


def test_garbage_fails() -> None:
    for codec in (pb.GZIP, pb.ZSTANDARD):
        with pytest.raises(errors.CodecError):
            codecs.decompress(codec, b"definitely not compressed")


def test_unknown_codec() -> None:
    with pytest.raises(errors.CodecError):
        codecs.new_compressor(pb.INVALID)
    with pytest.raises(errors.CodecError):
        codecs.new_decompressor(99)
