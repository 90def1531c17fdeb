"""Codec round trips: append -> persist -> read back from the store, file:// and S3.

Fragments are kept small (1 KiB target length) so that every append rolls the
previous fragment, which the primary persists at once. Once the index's store
listing covers a fragment its local spool file is dropped, and reads are
served from the store object (the metadata then names the backing store and
its modification time). The stored objects are also decoded independently.
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import os

import grpc
import pytest
import zstandard

from gazette.broker import protocol as pb
from gazette.broker import testing
from gazette.broker.fragment import codecs
from gazette.broker.fragment.testing import S3Bucket
from gazette.broker.protocol import protocol_pb2_grpc as pb2_grpc

pytestmark = pytest.mark.integration

APPENDS = [os.urandom(700).hex().encode() for _ in range(4)]  # 1400 bytes each.
CODECS = {
    "none": pb.NONE,
    "gzip": pb.GZIP,
    "zstd": pb.ZSTANDARD,
    "snappy": pb.SNAPPY,
}


def _stub(ch: grpc.aio.Channel) -> pb2_grpc.JournalAsyncStub:
    return pb2_grpc.JournalStub(ch)  # type: ignore[return-value]


async def _round_trip(
    cluster: testing.BrokerCluster, name: str, store: str, codec: int
) -> list[pb.Fragment]:
    spec = testing.journal_spec(name, replication=2, stores=[store], codec=codec, length=1024)
    async with cluster.channel(0) as ch:
        stub = _stub(ch)
        assert (await testing.apply_specs(stub, spec)).status == pb.OK
        await testing.wait_writable(stub, name)
        for data in APPENDS:
            resp = await testing.append(stub, name, [data[:500], data[500:]])
            assert resp.status == pb.OK, resp
        # All but the last append's fragment are rolled and persisted. Wait until a
        # read of the persisted span is served from the store, not the spool.
        persisted_end = sum(len(d) for d in APPENDS[:-1])
        for _ in range(150):
            content, meta = await testing.read(stub, name, 0, end_offset=persisted_end)
            frags = [m.fragment for m in meta if m.HasField("fragment")]
            if frags and all(f.backing_store == store and f.mod_time for f in frags):
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError(f"fragments of {name} not read from {store}: {frags}")
        assert content == b"".join(APPENDS[:-1])
        for m in meta:
            pb.validate(m)
            if m.HasField("fragment"):
                assert m.fragment.compression_codec == codec
                assert m.fragment_url  # Signed for do_not_proxy readers.
        # The whole journal: persisted fragments from the store, the last from the spool.
        content, _ = await testing.read(stub, name, 0)
        assert content == b"".join(APPENDS)
        return frags


def _decode(codec: int, raw: bytes) -> bytes:
    if codec == pb.NONE:
        return raw
    if codec in (pb.GZIP, pb.GZIP_OFFLOAD_DECOMPRESSION):
        return gzip.decompress(raw)
    if codec == pb.ZSTANDARD:
        return zstandard.ZstdDecompressor().decompressobj(read_across_frames=True).decompress(raw)
    dec = codecs.new_decompressor(codec)
    return dec.decompress(raw) + dec.finish()


@pytest.mark.parametrize("codec_name", sorted(CODECS))
async def test_file_store_round_trip(cluster: testing.BrokerCluster, codec_name: str) -> None:
    codec = CODECS[codec_name]
    name = f"codecs/file-{codec_name}"
    frags = await _round_trip(cluster, name, cluster.store_url, codec)
    for f in frags:
        path = cluster.file_root / pb.fragment_path(f)
        assert path.name.endswith(pb.codec_to_extension(codec))
        raw = path.read_bytes()
        content = _decode(codec, raw)
        assert len(content) == f.end - f.begin
        assert hashlib.sha1(content).digest() == pb.sha1sum_to_digest(f.sum)


@pytest.mark.parametrize("codec_name", [*sorted(CODECS), "gzip-offload"])
async def test_s3_store_round_trip(
    cluster: testing.BrokerCluster, s3_bucket: S3Bucket, codec_name: str
) -> None:
    codec = CODECS.get(codec_name, pb.GZIP_OFFLOAD_DECOMPRESSION)
    name = f"codecs/s3-{codec_name}"
    store = s3_bucket.store_url("frags/")
    frags = await _round_trip(cluster, name, store, codec)
    client = s3_bucket.server.client()
    for f in frags:
        key = "frags/" + pb.fragment_path(f)
        obj = client.get_object(Bucket=s3_bucket.name, Key=key)
        raw = obj["Body"].read()
        if codec == pb.GZIP_OFFLOAD_DECOMPRESSION:
            assert obj.get("ContentEncoding") == "gzip"
        content = _decode(codec, raw)
        assert hashlib.sha1(content).digest() == pb.sha1sum_to_digest(f.sum)
