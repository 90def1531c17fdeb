"""gs:// and azure:// stores against real emulators on loopback (fake-gcs-server, Azurite).

Each store: put, exists, get, list, remove, a signed GET fetched over HTTP, the
missing bucket/container as an authorization error, the health check with its
delete probe, and spools persisted then read back through the index for codecs
with and without gzip offload. The emulators build/install once into .cache/;
tests skip only when go (GCS) or npm (Azure) is missing.
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import shutil
import urllib.request
from collections.abc import Iterator

import pytest
from emulator_servers import AZURITE_ACCOUNT, AZURITE_KEY, Azurite, EmulatorError, FakeGCS
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

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

BUCKET = "gazette-frags"


def _service_account_key(path: pathlib.Path) -> None:
    """A throwaway service-account key: V4 signing is local, the emulator does not check it."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    path.write_text(
        json.dumps(
            {
                "type": "service_account",
                "project_id": "gazette-emulated",
                "private_key_id": "0",
                "private_key": pem,
                "client_email": "fragments@gazette-emulated.iam.gserviceaccount.com",
                "client_id": "1",
                "token_uri": "https://oauth2.googleapis.com/token",
            }
        )
    )


@pytest.fixture(scope="module", params=["gs", "azure"])
def store_root(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A store URL root (``gs://bucket/`` or ``azure://container/``) on its emulator."""
    work = tmp_path_factory.mktemp(request.param)
    saved = dict(os.environ)
    try:
        if request.param == "gs":
            if shutil.which("go") is None:
                pytest.skip("`go` is not on PATH: fake-gcs-server is built from its Go module")
            try:
                emulator = FakeGCS(work)
                endpoint = emulator.__enter__()
            except EmulatorError as e:
                pytest.fail(str(e))
            _service_account_key(work / "sa.json")
            os.environ["STORAGE_EMULATOR_HOST"] = endpoint
            os.environ["GOOGLE_APPLICATION_CREDENTIALS"] = str(work / "sa.json")
            from google.auth.credentials import AnonymousCredentials
            from google.cloud import storage

            storage.Client(
                project="gazette-emulated",
                credentials=AnonymousCredentials(),
                client_options={"api_endpoint": endpoint},
            ).create_bucket(BUCKET)
            root = f"gs://{BUCKET}/"
        else:
            if shutil.which("npm") is None:
                pytest.skip("`npm` is not on PATH: Azurite is installed from npm")
            try:
                emulator = Azurite(work)
                endpoint = emulator.__enter__()
            except EmulatorError as e:
                pytest.fail(str(e))
            os.environ.update(
                AZURE_ACCOUNT_NAME=AZURITE_ACCOUNT,
                AZURE_ACCOUNT_KEY=AZURITE_KEY,
                AZURE_BLOB_ENDPOINT=endpoint,
            )
            from azure.storage.blob import BlobServiceClient

            BlobServiceClient(
                account_url=endpoint,
                credential={"account_name": AZURITE_ACCOUNT, "account_key": AZURITE_KEY},
            ).create_container(BUCKET)
            root = f"azure://{BUCKET}/"
        try:
            yield root
        finally:
            emulator.__exit__(None, None, None)
    finally:
        os.environ.clear()
        os.environ.update(saved)


def http_get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return bytes(resp.read())


async def put(store: stores.ActiveStore, path: str, data: bytes, encoding: str = "") -> None:
    await store.put(path, files.BytesReaderAt(data), len(data), encoding)


async def test_store_operations_and_signed_get(store_root: str) -> None:
    store = stores.StoreRegistry().get(store_root + "root/")
    assert store.init_error is None, store.init_error
    path = f"{JOURNAL}/{0:016x}-{5:016x}-{'0' * 40}.raw"
    assert not await store.exists(path)
    await put(store, path, b"hello")
    await put(store, f"{JOURNAL}/sub/other", b"x" * 3000, "gzip")
    await put(store, "elsewhere/file", b"nope")
    assert await store.exists(path)
    async with await store.get(path) as r:
        assert await r.read_all() == b"hello"
    async with await store.get(f"{JOURNAL}/sub/other") as r:
        assert r.content_encoding == "gzip" and await r.read_all() == b"x" * 3000
    listing = [e async for e in store.list(f"{JOURNAL}/")]
    assert sorted(rel for rel, _ in listing) == [path.split("/")[-1], "sub/other"]
    assert all(mtime > 1.6e9 for _, mtime in listing)
    url = store.sign_get(path, 60)
    assert url.startswith("http://127.0.0.1")
    assert await asyncio.to_thread(http_get, url) == b"hello"
    await store.remove(path)
    assert not await store.exists(path)


async def test_bad_urls_and_missing_buckets(store_root: str) -> None:
    bad = stores.StoreRegistry().get(store_root + "p/?region=nowhere")
    assert bad.init_error is not None and "region" in str(bad.init_error)
    missing = store_root.replace(BUCKET, BUCKET + "-missing") + "p/"
    store = stores.StoreRegistry().get(missing)
    with pytest.raises(errors.StoreError) as e:
        await put(store, "x", b"1")
    assert store.is_auth_error(e.value), e.value


async def test_health_check_and_delete_probe(store_root: str) -> None:
    async with stores.StoreRegistry() as reg:
        store = reg.get(store_root + "hc/")
        event, _ = store.health_status()
        await asyncio.wait_for(event.wait(), 30)
        assert store.health_status()[1] is None, store.health_status()[1]
        await store.check_delete("a/journal/")
        assert not await store.exists("a/journal/.gazette-delete-probe")


@pytest.mark.parametrize("codec", [pb.NONE, pb.GZIP, pb.SNAPPY, pb.GZIP_OFFLOAD_DECOMPRESSION])
async def test_spools_persist_and_read_back(store_root: str, codec: int) -> None:
    url = store_root + f"fragments-{codec}/"
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
        for i in range(30):
            record = b"fragment %d record %d %s\n" % (fragment_no, i, b"z" * (i * 97 % 4000))
            written.append(record)
            await commit(sp, record, primary=True)
        roll = pb.Fragment(journal=JOURNAL, begin=sp.end, end=sp.end, compression_codec=codec)
        assert (await sp.apply(proposal(roll, sp.registers), primary=True)).status == pb.OK
    for done in obv.completed:
        await persister.persist(reg, done, spec, False)
    ix.replace_remote(await index.walk_all_stores(reg, JOURNAL, [url]))
    frags = list(ix.fragments)
    assert [(f.begin, f.end) for f in frags] == [(d.begin, d.end) for d in obv.completed]
    assert all(f.file is None and f.mod_time > 0 for f in frags)

    got, offset = [], 0
    while True:
        resp, local_file = await ix.query(pb.ReadRequest(journal=JOURNAL, offset=offset))
        if resp.status != pb.OK:
            break
        assert local_file is None and resp.fragment_url.startswith("http://127.0.0.1")
        async for chunk in reader.read_fragment(reg, resp.fragment, resp.offset):
            got.append(chunk)
            offset += len(chunk)
    assert b"".join(got) == b"".join(written)
    # The signed URL fetches the stored (encoded) bytes.
    resp, _ = await ix.query(pb.ReadRequest(journal=JOURNAL, offset=0))
    raw = await asyncio.to_thread(http_get, resp.fragment_url)
    want = b"".join(written)[: resp.fragment.end]
    if codec == pb.GZIP_OFFLOAD_DECOMPRESSION and raw == want:
        return  # GCS decompresses gzip-encoded objects for clients (the point of offloading).
    enc = "gzip" if codec == pb.GZIP_OFFLOAD_DECOMPRESSION else ""
    assert codecs.decompress(codec, raw, content_encoding=enc) == want
