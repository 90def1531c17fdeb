"""S3 stores against a real S3 server on loopback (moto), end to end with spools."""

from __future__ import annotations

import asyncio
import urllib.request

import pytest
from fragment_helpers import JOURNAL, commit, proposal

from gazette.broker import protocol as pb
from gazette.broker.fragment import (
    codecs,
    cover_set,
    errors,
    files,
    index,
    persister,
    reader,
    spool,
    stores,
)
from gazette.broker.fragment.testing import S3Bucket

pytestmark = pytest.mark.integration

ALL_CODECS = [pb.NONE, pb.GZIP, pb.ZSTANDARD, pb.SNAPPY, pb.GZIP_OFFLOAD_DECOMPRESSION]


def http_get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return bytes(resp.read())


async def put(store: stores.ActiveStore, path: str, data: bytes, encoding: str = "") -> None:
    await store.put(path, files.BytesReaderAt(data), len(data), encoding)


async def test_store_operations(s3_bucket: S3Bucket) -> None:
    reg = stores.StoreRegistry()
    store = reg.get(s3_bucket.store_url("root/"))
    assert store.init_error is None
    path = f"{JOURNAL}/{0:016x}-{5:016x}-{'0' * 40}.raw"
    assert not await store.exists(path)
    await put(store, path, b"hello")
    await put(store, f"{JOURNAL}/sub/other", b"x" * 3000)
    await put(store, "elsewhere/file", b"nope")
    assert await store.exists(path)
    assert sorted(s3_bucket.object_keys()) == [
        "root/a/journal/" + path.split("/")[-1],
        "root/a/journal/sub/other",
        "root/elsewhere/file",
    ]
    async with await store.get(path) as r:
        assert await r.read_all() == b"hello"
    listing = [e async for e in store.list(f"{JOURNAL}/")]
    assert sorted(rel for rel, _ in listing) == [path.split("/")[-1], "sub/other"]
    assert all(mtime > 1.6e9 for _, mtime in listing)

    # A presigned GET works over plain HTTP, for the signed TTL.
    url = store.sign_get(path, 60)
    body = await asyncio.to_thread(http_get, url)
    assert body == b"hello"

    await store.remove(path)
    assert not await store.exists(path)


async def test_put_options_from_query(s3_bucket: S3Bucket) -> None:
    url = s3_bucket.store_url("opts/") + "&storageClass=REDUCED_REDUNDANCY&SSE=AES256&acl=private"
    store = stores.StoreRegistry().get(url)
    await put(store, "x/y", b"data", "gzip")
    head = s3_bucket.server.client().head_object(Bucket=s3_bucket.name, Key="opts/x/y")
    assert head["StorageClass"] == "REDUCED_REDUNDANCY"
    assert head["ServerSideEncryption"] == "AES256"
    assert head["ContentEncoding"] == "gzip"


async def test_missing_bucket_is_an_auth_error(s3_bucket: S3Bucket) -> None:
    url = s3_bucket.store_url("p/").replace(s3_bucket.name, s3_bucket.name + "-missing", 1)
    store = stores.StoreRegistry().get(url)
    with pytest.raises(errors.StoreError) as e:
        await put(store, "x", b"1")
    assert store.is_auth_error(e.value)
    with pytest.raises(errors.StoreError):
        _ = [x async for x in store.list("")]


async def test_health_check_passes_with_signed_fetch(s3_bucket: S3Bucket) -> None:
    async with stores.StoreRegistry() as reg:
        store = reg.get(s3_bucket.store_url("hc/"))
        event, err = store.health_status()
        assert str(err) == stores.FIRST_HEALTH_CHECK
        await asyncio.wait_for(event.wait(), 30)
        assert store.health_status()[1] is None
        assert "hc/.test/health-check" in s3_bucket.object_keys()
        await store.check_delete("a/journal/")
        assert "hc/a/journal/.gazette-delete-probe" not in s3_bucket.object_keys()


@pytest.mark.parametrize("codec", ALL_CODECS)
async def test_append_persist_list_read_back(s3_bucket: S3Bucket, codec: int) -> None:
    """Spool commits -> persist -> listing refreshes the index -> read back from the store."""
    url = s3_bucket.store_url("fragments/")
    spec = pb.JournalSpec(name=JOURNAL, replication=1)
    spec.fragment.stores.append(url)
    reg = stores.StoreRegistry()
    ix = index.Index(signer=reg.sign_get_url)

    class Observer:
        def __init__(self) -> None:
            self.completed: list[spool.Spool] = []

        def spool_commit(self, fragment: cover_set.Fragment) -> None:
            ix.spool_commit(fragment)

        def spool_complete(self, sp: spool.Spool, primary: bool) -> None:
            self.completed.append(sp)

    obv = Observer()
    sp = spool.Spool(JOURNAL, obv, config=spool.SpoolConfig(compression_batch_size=64 << 10))
    await sp.apply(proposal(pb.Fragment(journal=JOURNAL, compression_codec=codec)), primary=True)
    written: list[bytes] = []
    for fragment_no in range(2):
        for i in range(40):
            record = b"fragment %d record %d %s\n" % (fragment_no, i, b"z" * (i * 97 % 5000))
            written.append(record)
            await commit(sp, record, primary=True)
        roll = pb.Fragment(journal=JOURNAL, begin=sp.end, end=sp.end, compression_codec=codec)
        assert (await sp.apply(proposal(roll, sp.registers), primary=True)).status == pb.OK
    assert len(obv.completed) == 2

    # Before persisting, reads are served from the local spool files.
    resp, local_file = await ix.query(pb.ReadRequest(journal=JOURNAL, offset=0))
    assert resp.status == pb.OK and local_file is not None and resp.fragment_url == ""

    for done in obv.completed:
        await persister.persist(reg, done, spec, False)
        # A second attempt finds it there and does nothing.
        await persister.persist(reg, done, spec, False)
    assert len(s3_bucket.object_keys()) == 2

    ix.replace_remote(await index.walk_all_stores(reg, JOURNAL, [url]))
    frags = list(ix.fragments)
    assert [f.file for f in frags] == [None, None]  # Locals dropped: durable now.
    assert [(f.begin, f.end) for f in frags] == [(d.begin, d.end) for d in obv.completed]
    assert all(f.spec.compression_codec == codec and f.mod_time > 0 for f in frags)
    if codec == pb.GZIP_OFFLOAD_DECOMPRESSION:
        key = "fragments/" + pb.fragment_path(frags[0].spec)
        head = s3_bucket.server.client().head_object(Bucket=s3_bucket.name, Key=key)
        assert head["ContentEncoding"] == "gzip"

    # Reads now come from the store, with a signed URL, and decode to what was written.
    got = []
    offset = 0
    while True:
        resp, local_file = await ix.query(pb.ReadRequest(journal=JOURNAL, offset=offset))
        if resp.status != pb.OK:
            assert resp.status == pb.OFFSET_NOT_YET_AVAILABLE and offset == sp.end
            break
        assert local_file is None and resp.fragment_url.startswith("http://127.0.0.1")
        async for chunk in reader.read_fragment(reg, resp.fragment, resp.offset):
            got.append(chunk)
            offset += len(chunk)
    assert b"".join(got) == b"".join(written)

    # The signed URL of a fragment fetches its stored (encoded) bytes.
    resp, _ = await ix.query(pb.ReadRequest(journal=JOURNAL, offset=0))
    raw = await asyncio.to_thread(http_get, resp.fragment_url)
    first = b"".join(written)[: resp.fragment.end]
    enc = "gzip" if codec == pb.GZIP_OFFLOAD_DECOMPRESSION else ""
    assert codecs.decompress(codec, raw, content_encoding=enc) == first

    # Removing an object makes it leave the index on the next refresh.
    await reg.get(url).remove(pb.fragment_path(frags[0].spec))
    ix.replace_remote(await index.walk_all_stores(reg, JOURNAL, [url]))
    assert [(f.begin, f.end) for f in ix.fragments] == [(frags[1].begin, frags[1].end)]
