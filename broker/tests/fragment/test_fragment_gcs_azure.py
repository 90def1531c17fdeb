"""gs://, azure:// and azure-ad:// stores against real emulators on loopback
(fake-gcs-server, Azurite).

gs:// and azure:// (shared key): put, exists, get, list, remove, the
find/replace rewrite, a signed GET fetched over HTTP, the missing
bucket/container as an authorization error, the health check with its delete
probe, spools persisted then read back through the index for codecs with and
without gzip offload, and an in-process broker that persists a journal's
fragments to the store and serves them back once its spools are gone (then a
fresh broker, which knows the journal only through its store, serves them too).

azure-ad:// runs against an Azurite serving https with OAuth, its tokens minted
by a test credential: the same operations, a user-delegation SAS fetched over
https, the health check, and the delegation key reused then refreshed as an
injected clock advances.

The emulators build/install once into the tool cache (e2e/cache-root.sh); tests skip only when go (GCS) or
npm (Azure) is missing. URL validation and construction errors need no emulator
(and no integration marker).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import os
import pathlib
import re
import shutil
import ssl
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from emulator_servers import AZURITE_ACCOUNT, AZURITE_KEY, Azurite, EmulatorError, FakeGCS
from fragment_helpers import JOURNAL, commit, proposal

from gazette.broker import protocol as pb
from gazette.broker import testing
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
from gazette.broker.protocol import protocol_pb2_grpc as pb2_grpc
from gazette.broker.server import testing as server_testing
from gazette.keyspace import testing as ks_testing

pytestmark = pytest.mark.timeout(300)
INTEGRATION = pytest.mark.integration

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


def http_get(url: str, context: ssl.SSLContext | None = None) -> bytes:
    with urllib.request.urlopen(url, timeout=10, context=context) as resp:
        return bytes(resp.read())


async def put(store: stores.ActiveStore, path: str, data: bytes, encoding: str = "") -> None:
    await store.put(path, files.BytesReaderAt(data), len(data), encoding)


@INTEGRATION
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


@INTEGRATION
async def test_bad_urls_and_missing_buckets(store_root: str) -> None:
    bad = stores.StoreRegistry().get(store_root + "p/?region=nowhere")
    assert bad.init_error is not None and "region" in str(bad.init_error)
    missing = store_root.replace(BUCKET, BUCKET + "-missing") + "p/"
    store = stores.StoreRegistry().get(missing)
    with pytest.raises(errors.StoreError) as e:
        await put(store, "x", b"1")
    assert store.is_auth_error(e.value), e.value


@INTEGRATION
async def test_health_check_and_delete_probe(store_root: str) -> None:
    async with stores.StoreRegistry() as reg:
        store = reg.get(store_root + "hc/")
        event, _ = store.health_status()
        await asyncio.wait_for(event.wait(), 30)
        assert store.health_status()[1] is None, store.health_status()[1]
        await store.check_delete("a/journal/")
        assert not await store.exists("a/journal/.gazette-delete-probe")


@INTEGRATION
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


@INTEGRATION
async def test_find_replace_rewrite(store_root: str) -> None:
    reg = stores.StoreRegistry()
    plain = reg.get(store_root + "rewrite/")
    renamed = reg.get(store_root + "rewrite/?find=old%2Fname%2F&replace=new%2Fname%2F")
    assert renamed.init_error is None, renamed.init_error
    await put(renamed, "old/name/frag.raw", b"moved")
    await put(renamed, "old/name/old/name/deep", b"once")
    # Stored under the replacement (its first occurrence only)...
    assert await plain.exists("new/name/frag.raw")
    assert await plain.exists("new/name/old/name/deep")
    assert not await plain.exists("old/name/frag.raw")
    # ...and found, read, listed and signed through the old name.
    assert await renamed.exists("old/name/frag.raw")
    async with await renamed.get("old/name/frag.raw") as r:
        assert await r.read_all() == b"moved"
    listed = sorted([rel async for rel, _ in renamed.list("old/name/")])
    assert listed == ["frag.raw", "old/name/deep"]
    url = renamed.sign_get("old/name/frag.raw", 60)
    assert urllib.parse.unquote(urllib.parse.urlsplit(url).path).endswith(
        "/rewrite/new/name/frag.raw"
    )
    assert await asyncio.to_thread(http_get, url) == b"moved"
    await renamed.remove("old/name/frag.raw")
    assert not await plain.exists("new/name/frag.raw")


# -- An in-process broker over the store ------------------------------------------------

# 1400 bytes each: with 1 KiB fragments every append rolls (and persists) the one before.
BROKER_APPENDS = [os.urandom(700).hex().encode() for _ in range(4)]


def _journal_stub(ch: Any) -> pb2_grpc.JournalAsyncStub:
    return pb2_grpc.JournalStub(ch)  # type: ignore[return-value]


async def _read_from_store(
    stub: pb2_grpc.JournalAsyncStub, name: str, url: str, end: int
) -> tuple[bytes, list[pb.ReadResponse]]:
    """[0, end) of journal ``name``, once every fragment of it is served from ``url``."""
    frags: list[pb.Fragment] = []
    for _ in range(300):
        content, meta = await testing.read(stub, name, 0, end_offset=end)
        frags = [m.fragment for m in meta if m.HasField("fragment")]
        if frags and all(f.backing_store == url and f.mod_time for f in frags):
            return content, meta
        await asyncio.sleep(0.1)
    raise AssertionError(f"fragments of {name} not read from {url}: {frags}")


@INTEGRATION
async def test_in_process_broker_persists_and_serves_from_store(
    store_root: str, etcd_server: ks_testing.EtcdServer, tmp_path: pathlib.Path
) -> None:
    url = store_root + "broker/"
    name = "stores/broker-" + urllib.parse.urlsplit(store_root).scheme
    spec = testing.journal_spec(name, stores=[url], codec=pb.GZIP, length=1024)
    persisted = b"".join(BROKER_APPENDS[:-1])

    async with (
        server_testing.InProcessCluster(
            etcd_server.endpoint, work_dir=tmp_path / "first", brokers=1
        ) as cluster,
        cluster.channel(0) as ch,
    ):
        stub = _journal_stub(ch)
        assert (await testing.apply_specs(stub, spec)).status == pb.OK
        await testing.wait_writable(stub, name)
        for data in BROKER_APPENDS:
            resp = await testing.append(stub, name, [data[:500], data[500:]])
            assert resp.status == pb.OK, resp
        # Once a listing of the store covers the rolled fragments, the index drops
        # their spools and reads are served from the store objects.
        content, _ = await _read_from_store(stub, name, url, len(persisted))
        assert content == persisted

    # A second cluster (its own etcd prefix, empty spool directories) knows the
    # journal's past only through the store.
    async with (
        server_testing.InProcessCluster(
            etcd_server.endpoint, work_dir=tmp_path / "second", brokers=1
        ) as cluster,
        cluster.channel(0) as ch,
    ):
        stub = _journal_stub(ch)
        assert (await testing.apply_specs(stub, spec)).status == pb.OK
        resp = await testing.wait_writable(stub, name)
        assert resp.commit.end == len(persisted), resp  # Appends resume after them.
        content, meta = await _read_from_store(stub, name, url, len(persisted))
        assert content == persisted
        for m in meta:
            if not m.HasField("fragment"):
                continue
            # Readers that fetch fragments themselves get a working signed URL.
            raw = await asyncio.to_thread(http_get, m.fragment_url)
            assert codecs.decompress(pb.GZIP, raw) == persisted[m.fragment.begin : m.fragment.end]


# -- azure-ad:// against an Azurite serving https with OAuth -----------------------------

TENANT = "3f2c1e0a-6b7d-4c59-9a8e-0d1f2e3a4b5c"
PRINCIPAL = "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d"
# Azurite (--oauth basic) never checks signatures; HS256 under a throwaway key
# (long enough that PyJWT doesn't warn about it) makes a well-formed token.
_JWT_KEY = "not-a-secret-azurite-ignores-signatures"


class TokenMinter:
    """An Azure AD token credential (``get_token``) for Azurite's ``--oauth basic``.

    Its tokens carry the claims Azurite checks (audience, issuer of the tenant,
    lifetime) and the principal's object and tenant IDs, which it puts into
    user-delegation keys. ``scopes`` records what each request asked for.
    """

    def __init__(self, tenant: str = TENANT) -> None:
        self.tenant = tenant
        self.scopes: list[tuple[str, ...]] = []

    def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        import jwt
        from azure.core.credentials import AccessToken

        self.scopes.append(scopes)
        now = int(time.time())
        claims = {
            "aud": "https://storage.azure.com",
            "iss": f"https://sts.windows.net/{self.tenant}/",
            "iat": now,
            "nbf": now - 60,
            "exp": now + 3600,
            "oid": PRINCIPAL,
            "tid": self.tenant,
        }
        return AccessToken(jwt.encode(claims, _JWT_KEY, algorithm="HS256"), now + 3600)


class AzureAD:
    """An Azurite with OAuth on https: its blob endpoint and the CA file that it trusts."""

    def __init__(self, endpoint: str, ca_file: pathlib.Path) -> None:
        self.endpoint = endpoint
        self.ca_file = ca_file
        self.root = f"azure-ad://{TENANT}/{AZURITE_ACCOUNT}/{BUCKET}/"

    def store(self, url: str, **options: Any) -> Any:
        from gazette.broker.fragment.stores import azure

        options.setdefault("credential", TokenMinter())
        return azure.AzureStore(url, stores.StoresConfig(), **options)

    def registry(self, minter: TokenMinter) -> stores.StoreRegistry:
        def construct(url: str, config: stores.StoresConfig) -> stores.Store:
            from gazette.broker.fragment.stores import azure

            return azure.AzureStore(url, config, credential=minter)

        return stores.StoreRegistry(providers={"azure-ad": construct})

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))


@pytest.fixture(scope="module")
def azure_ad_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AzureAD]:
    if shutil.which("npm") is None:
        pytest.skip("`npm` is not on PATH: Azurite is installed from npm")
    pytest.importorskip("azure.identity")
    work = tmp_path_factory.mktemp("azure-ad")
    with contextlib.ExitStack() as stack:
        try:
            endpoint = stack.enter_context(Azurite(work, oauth=True))
        except EmulatorError as e:
            pytest.fail(str(e))
        server = AzureAD(endpoint, work / "cert.pem")
        from azure.storage.blob import BlobServiceClient

        # Bearer tokens go over TLS only, so the client must trust Azurite's
        # self-signed certificate: here by connection_verify, in the tests by
        # REQUESTS_CA_BUNDLE (the store builds its client itself).
        BlobServiceClient(
            account_url=endpoint, credential=TokenMinter(), connection_verify=str(server.ca_file)
        ).create_container(BUCKET)
        yield server


@pytest.fixture
def azure_ad(azure_ad_server: AzureAD, monkeypatch: pytest.MonkeyPatch) -> AzureAD:
    """The server, with this test's environment pointing azure stores at it.

    The store's client (requests) reads REQUESTS_CA_BUNDLE; urllib's default
    context, which the health check fetches signed URLs with, reads SSL_CERT_FILE.
    """
    monkeypatch.setenv("AZURE_BLOB_ENDPOINT", azure_ad_server.endpoint)
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(azure_ad_server.ca_file))
    monkeypatch.setenv("SSL_CERT_FILE", str(azure_ad_server.ca_file))
    return azure_ad_server


def _sas(url: str) -> dict[str, str]:
    return dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query))


@INTEGRATION
async def test_azure_ad_operations_and_delegation_signed_get(azure_ad: AzureAD) -> None:
    from gazette.broker.fragment.stores import azure

    minter = TokenMinter()
    store = azure_ad.registry(minter).get(azure_ad.root + "ad/")
    assert store.init_error is None, store.init_error
    path = f"{JOURNAL}/{0:016x}-{5:016x}-{'0' * 40}.raw"
    assert not await store.exists(path)
    await put(store, path, b"hello")
    await put(store, f"{JOURNAL}/sub/other", b"x" * 3000, "gzip")
    assert await store.exists(path)
    async with await store.get(path) as r:
        assert await r.read_all() == b"hello"
    async with await store.get(f"{JOURNAL}/sub/other") as r:
        assert r.content_encoding == "gzip" and await r.read_all() == b"x" * 3000
    listing = [e async for e in store.list(f"{JOURNAL}/")]
    assert sorted(rel for rel, _ in listing) == [path.split("/")[-1], "sub/other"]
    assert all(mtime > 1.6e9 for _, mtime in listing)

    url = store.sign_get(path, 60)
    assert url.startswith(azure_ad.endpoint + f"/{BUCKET}/ad/{JOURNAL}/")
    sas = _sas(url)
    # A read-only, https-only SAS signed by a delegation key of the principal.
    assert (sas["sp"], sas["spr"], sas["sr"]) == ("r", "https", "b")
    assert (sas["skoid"], sas["sktid"]) == (PRINCIPAL, TENANT)
    assert "sig" in sas
    assert await asyncio.to_thread(http_get, url, azure_ad.ssl_context()) == b"hello"
    await store.remove(path)
    assert not await store.exists(path)
    # Every token asked for was one of Azure Storage.
    assert minter.scopes and set(minter.scopes) == {(azure.STORAGE_SCOPE,)}

    missing = azure_ad.registry(minter).get(azure_ad.root.replace(BUCKET, BUCKET + "-missing"))
    with pytest.raises(errors.StoreError) as e:
        await put(missing, "x", b"1")
    assert missing.is_auth_error(e.value), e.value


@INTEGRATION
async def test_azure_ad_health_check(azure_ad: AzureAD) -> None:
    async with azure_ad.registry(TokenMinter()) as reg:
        store = reg.get(azure_ad.root + "hc/")
        event, _ = store.health_status()
        await asyncio.wait_for(event.wait(), 30)
        assert store.health_status()[1] is None, store.health_status()[1]
        await store.check_delete("a/journal/")
        assert not await store.exists("a/journal/.gazette-delete-probe")


@INTEGRATION
async def test_azure_ad_delegation_key_reused_then_refreshed(azure_ad: AzureAD) -> None:
    # The store's clock runs behind the real one, so that every key it fetches
    # (valid from the store's "now" for two hours) is valid now, as Azurite checks.
    offset = [-6000.0]
    store = azure_ad.store(azure_ad.root + "udk/", clock=lambda: time.time() + offset[0])
    await store.put("blob", files.BytesReaderAt(b"signed"), 6)

    def sign_and_fetch() -> str:
        url = store.sign_get("blob", 60)
        assert http_get(url, azure_ad.ssl_context()) == b"signed"
        return _sas(url)["skt"]

    first = await asyncio.to_thread(sign_and_fetch)  # A key of [now-6000s, now+1200s).
    offset[0] = -3000.0  # 70 min of it remain: more than half, so it is reused.
    assert await asyncio.to_thread(sign_and_fetch) == first
    offset[0] = -2000.0  # 53 min remain: less than half, so a new key is fetched.
    second = await asyncio.to_thread(sign_and_fetch)
    # The new key starts at the store's "now": 4000 s of its clock (and a little
    # real time) after the first.
    moved = datetime.datetime.fromisoformat(second) - datetime.datetime.fromisoformat(first)
    assert 4000 <= moved.total_seconds() < 4060, (first, second)


# -- URL validation and construction errors: no emulator --------------------------------

_AZURE_ENV = (
    "AZURE_ACCOUNT_NAME",
    "AZURE_ACCOUNT_KEY",
    "AZURE_CLIENT_ID",
    "AZURE_CLIENT_SECRET",
    "AZURE_BLOB_ENDPOINT",
)
_SECRET = {"AZURE_CLIENT_ID": "client", "AZURE_CLIENT_SECRET": "secret"}
_SHARED_KEY = {"AZURE_ACCOUNT_NAME": AZURITE_ACCOUNT, "AZURE_ACCOUNT_KEY": AZURITE_KEY}


@pytest.mark.parametrize(
    ("url", "env", "message"),
    [
        ("azure-ad:///acct/container/p/", _SECRET, "azure-ad:// store URL has no tenant ID"),
        ("azure-ad://tenant/", _SECRET, "must include storage account and container"),
        ("azure-ad://tenant/acct/", _SECRET, "must include storage account and container"),
        ("azure-ad://tenant//container/p/", _SECRET, "must include storage account and container"),
        ("azure-ad://tenant/acct/container/p/", {}, "AZURE_CLIENT_ID and AZURE_CLIENT_SECRET"),
        (
            "azure-ad://tenant/acct/container/p/",
            {"AZURE_CLIENT_ID": "client"},
            "AZURE_CLIENT_ID and AZURE_CLIENT_SECRET",
        ),
        ("azure:///p/", _SHARED_KEY, "azure:// store URL has no container"),
        ("azure://container/p/", {}, "AZURE_ACCOUNT_NAME and AZURE_ACCOUNT_KEY"),
        (
            "azure://container/p/",
            {"AZURE_ACCOUNT_NAME": AZURITE_ACCOUNT},
            "AZURE_ACCOUNT_NAME and AZURE_ACCOUNT_KEY",
        ),
        ("azure://container/p/?region=x", _SHARED_KEY, "unknown query argument 'region'"),
    ],
)
def test_azure_url_validation(
    url: str, env: dict[str, str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    azure = pytest.importorskip("gazette.broker.fragment.stores.azure")
    for key in _AZURE_ENV:
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(errors.StoreConfigError, match=re.escape(message)):
        azure.AzureStore(url, stores.StoresConfig())
    # The registry reports it as the store's permanent error.
    active = stores.StoreRegistry().get(url)
    assert isinstance(active.init_error, errors.StoreConfigError)
    assert message in str(active.init_error)


def test_azure_valid_urls_construct_without_network(monkeypatch: pytest.MonkeyPatch) -> None:
    azure = pytest.importorskip("gazette.broker.fragment.stores.azure")
    pytest.importorskip("azure.identity")
    for key in _AZURE_ENV:
        monkeypatch.delenv(key, raising=False)
    for key, value in {**_SECRET, **_SHARED_KEY}.items():
        monkeypatch.setenv(key, value)
    # The client-secret credential is built, but asks for no token until a request.
    ad = stores.StoreRegistry().get("azure-ad://tenant/acct/container/deep/prefix/")
    assert ad.init_error is None, ad.init_error
    assert isinstance(ad.store, azure.AzureStore)
    shared = azure.AzureStore("azure://container/pre/", stores.StoresConfig())
    signed = shared.sign_get("a/b", 60)
    assert signed.startswith(f"https://{AZURITE_ACCOUNT}.blob.core.windows.net/container/pre/a/b?")
    assert _sas(signed)["spr"] == "https"  # Gazette signs https-only.


def test_gcs_url_without_bucket() -> None:
    gcs = pytest.importorskip("gazette.broker.fragment.stores.gcs")
    with pytest.raises(errors.StoreConfigError, match=re.escape("gs:// store URL has no bucket")):
        gcs.GCSStore("gs:///prefix/", stores.StoresConfig())
    active = stores.StoreRegistry().get("gs:///prefix/")
    assert isinstance(active.init_error, errors.StoreConfigError)
    assert "has no bucket" in str(active.init_error)


def _azure_error(kind: str, code: str, status: int) -> BaseException:
    from azure.core import exceptions as aexc

    e = getattr(aexc, kind)(message=code)
    e.status_code, e.error_code = status, code
    # As a store operation raises it: wrapped, the service error as its cause.
    try:
        raise errors.StoreError(f"Azure put x: {e}", op="put", path="x") from e
    except errors.StoreError as wrapped:
        return wrapped


@pytest.mark.parametrize(
    ("kind", "code", "status", "auth"),
    [
        ("ResourceNotFoundError", "ContainerNotFound", 404, True),
        ("HttpResponseError", "ContainerDisabled", 403, True),
        ("HttpResponseError", "AccountIsDisabled", 403, True),
        ("HttpResponseError", "AuthorizationPermissionMismatch", 403, True),
        ("ClientAuthenticationError", "AuthenticationFailed", 403, True),
        # Credentials that don't authenticate at all are not a refusal to write here.
        ("ClientAuthenticationError", "InvalidAuthenticationInfo", 401, False),
        ("ResourceNotFoundError", "BlobNotFound", 404, False),
        ("HttpResponseError", "ServerBusy", 503, False),
    ],
)
def test_azure_auth_error_classification(
    kind: str, code: str, status: int, auth: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    azure = pytest.importorskip("gazette.broker.fragment.stores.azure")
    for key, value in _SHARED_KEY.items():
        monkeypatch.setenv(key, value)
    store = azure.AzureStore("azure://container/p/", stores.StoresConfig())
    assert store.is_auth_error(_azure_error(kind, code, status)) is auth
    assert store.is_auth_error(RuntimeError("timeout")) is False
