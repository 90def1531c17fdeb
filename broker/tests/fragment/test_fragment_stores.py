"""file:// store, query arguments, the store registry and its health checks."""

from __future__ import annotations

import asyncio
import io
import os
import stat
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from gazette.broker import protocol as pb
from gazette.broker.fragment import errors, files, index, stores

JOURNAL = "a/journal"


def registry(root: Path, **kw: object) -> stores.StoreRegistry:
    return stores.StoreRegistry(stores.StoresConfig(file_root=str(root)), **kw)  # type: ignore[arg-type]


async def put(store: stores.ActiveStore, path: str, data: bytes, encoding: str = "") -> None:
    await store.put(path, files.BytesReaderAt(data), len(data), encoding)


async def listing(store: stores.ActiveStore, prefix: str) -> list[str]:
    return [rel async for rel, _ in store.list(prefix)]


async def test_file_store_round_trip(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    store = registry(tmp_path).get("file:///data/")
    assert not await store.exists("a/journal/x.raw")
    await put(store, "a/journal/sub/x.raw", b"hello")
    assert await store.exists("a/journal/sub/x.raw")
    target = tmp_path / "data/a/journal/sub/x.raw"
    assert target.read_bytes() == b"hello"
    # Directories are created with mode 0750 (less the umask); no temp file is left.
    mode = stat.S_IMODE((tmp_path / "data/a/journal").stat().st_mode)
    assert mode & ~0o750 == 0
    assert os.listdir(target.parent) == ["x.raw"]
    async with await store.get("a/journal/sub/x.raw") as r:
        assert r.content_encoding is None
        assert await r.read_all() == b"hello"
    entries = [e async for e in store.list("a/journal/")]
    assert [rel for rel, _ in entries] == ["sub/x.raw"]
    assert int(entries[0][1]) == int(target.stat().st_mtime)
    # The signed URL is the store path, without the file root.
    assert store.sign_get("a/journal/sub/x.raw", 60) == "file:///data/a/journal/sub/x.raw"
    await store.remove("a/journal/sub/x.raw")
    assert not await store.exists("a/journal/sub/x.raw")
    with pytest.raises(errors.StoreError):
        await store.remove("a/journal/sub/x.raw")
    with pytest.raises(errors.StoreError):
        await store.get("a/journal/sub/x.raw")


async def test_file_store_put_overwrites_atomically(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    store = registry(tmp_path).get("file:///d/")
    await put(store, "j/f", b"one")
    await put(store, "j/f", b"two!")
    assert (tmp_path / "d/j/f").read_bytes() == b"two!"
    big = os.urandom(3 * files.COPY_BLOCK + 17)
    await put(store, "j/big", big)
    assert (tmp_path / "d/j/big").read_bytes() == big


async def test_file_store_listing_of_missing_dir_is_empty(tmp_path: Path) -> None:
    store = registry(tmp_path).get("file:///nowhere/")
    assert await listing(store, "a/journal/") == []


async def test_file_store_requires_its_directory(tmp_path: Path) -> None:
    store = registry(tmp_path).get("file:///missing/")
    with pytest.raises(errors.StoreError, match="invalid file store directory") as e:
        await put(store, "j/f", b"x")
    assert store.is_auth_error(e.value)
    assert not store.is_auth_error(errors.StoreError("other"))


async def test_unconfigured_file_root_fails() -> None:
    store = stores.StoreRegistry().get("file:///x/")
    with pytest.raises(errors.StoreError, match="invalid file store directory"):
        await put(store, "j/f", b"x")


async def test_find_replace_rewrites_relative_paths(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    store = registry(tmp_path).get("file:///d/?find=bar%2Fv1%2F&replace=old%2F")
    await put(store, "foo/bar/v1/part-000/x.raw", b"1")
    await put(store, "foo/bar/v2/part-000/x.raw", b"2")
    assert (tmp_path / "d/foo/old/part-000/x.raw").read_bytes() == b"1"
    assert (tmp_path / "d/foo/bar/v2/part-000/x.raw").read_bytes() == b"2"
    assert await listing(store, "foo/bar/v1/") == ["part-000/x.raw"]
    assert store.sign_get("foo/bar/v1/p", 1) == "file:///d/foo/old/p"


def test_query_arguments_are_case_insensitive_and_checked() -> None:
    import urllib.parse

    url = urllib.parse.urlsplit("s3://b/p/?REGION=x&storageclass=GLACIER&Find=a&sseKmsKeyId=k")
    args = stores.parse_query_args(url, ("region", "storageClass", "find", "SSEKMSKeyId"))
    assert args == {"region": "x", "storageClass": "GLACIER", "find": "a", "SSEKMSKeyId": "k"}
    with pytest.raises(errors.StoreConfigError, match="unknown query argument 'bogus'"):
        stores.parse_query_args(urllib.parse.urlsplit("file:///p/?bogus=1"), ("find",))


async def test_construction_errors_are_reported_not_cached(tmp_path: Path) -> None:
    reg = registry(tmp_path)
    bad = reg.get("file:///d/?bogus=1")
    assert bad.init_error is not None
    with pytest.raises(errors.StoreConfigError, match="bogus"):
        await bad.exists("x")
    event, err = bad.health_status()
    assert event.is_set() and err is bad.init_error
    assert reg.get("file:///d/?bogus=1") is not bad
    # Without credentials a gs:// store says so (and is retried on the next use).
    no_creds = reg.get("gs://bucket/p/")
    assert "credentials" in str(no_creds.init_error)
    # An azure-ad:// store without its service principal names the variables it needs.
    no_principal = reg.get("azure-ad://tenant/account/container/p/")
    assert "AZURE_CLIENT_ID and AZURE_CLIENT_SECRET" in str(no_principal.init_error)


def test_s3_store_construction_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    reg = stores.StoreRegistry()
    assert "missing AWS region" in str(reg.get("s3://bucket/p/").init_error)
    assert "unknown query argument 'acls'" in str(reg.get("s3://bucket/p/?acls=x").init_error)
    ok = reg.get("s3://bucket/p/?Region=us-east-2&endpoint=http%3A%2F%2F127.0.0.1%3A9&ACL=private")
    assert ok.init_error is None
    url = ok.sign_get("a/journal/x.raw", 60)
    # Path-style under the custom endpoint, SigV4, one minute.
    assert url.startswith("http://127.0.0.1:9/bucket/p/a/journal/x.raw?")
    assert "X-Amz-Algorithm=AWS4-HMAC-SHA256" in url and "X-Amz-Expires=60" in url


def test_file_only_maps_every_scheme_to_the_file_root(tmp_path: Path) -> None:
    reg = stores.StoreRegistry(stores.StoresConfig(file_root=str(tmp_path), file_only=True))
    store = reg.get("s3://bucket/prefix/?whatever=1")
    assert isinstance(store.store, stores.FileStore)
    assert store.sign_get("j/x", 1) == "file:///j/x"


def test_sweep_drops_unused_stores(tmp_path: Path) -> None:
    reg = registry(tmp_path)
    a, b = reg.get("file:///a/"), reg.get("file:///b/")
    assert reg.sweep() == 0  # Both marked at creation; marks cleared.
    assert reg.get("file:///a/") is a  # Re-marks a.
    assert reg.sweep() == 1
    _, err = b.health_status()
    assert str(err) == stores.LAST_HEALTH_CHECK
    assert reg.get("file:///b/") is not b
    assert reg.get("file:///a/") is a


def test_health_check_schedule() -> None:
    mid = lambda: 0.5  # noqa: E731 (no jitter)
    assert stores.next_check_delay(True, 7, mid) == 1800
    assert [stores.next_check_delay(False, n, mid) for n in range(8)] == [
        0, 0.1, 1, 1, 10, 10, 100, 100,
    ]  # fmt: skip
    assert stores.next_check_delay(False, 6, lambda: 0.0) == pytest.approx(80)
    assert stores.next_check_delay(True, 0, lambda: 0.999999) == pytest.approx(2160, rel=1e-5)


async def test_health_checks_run_while_entered(tmp_path: Path) -> None:
    (tmp_path / "ok").mkdir()
    async with registry(tmp_path) as reg:
        good = reg.get("file:///ok/")
        event, err = good.health_status()
        assert str(err) == stores.FIRST_HEALTH_CHECK
        await asyncio.wait_for(event.wait(), 10)
        assert good.health_status()[1] is None
        assert (tmp_path / "ok/.test/health-check").read_bytes() == b"health-check\n"

        bad = reg.get("file:///missing/")
        for _ in range(2):  # Failures are re-checked quickly.
            event, _ = bad.health_status()
            await asyncio.wait_for(event.wait(), 10)
        err = bad.health_status()[1]
        assert str(err).startswith("health check PUT failed: invalid file store directory")


async def test_check_delete(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    reg = registry(tmp_path)
    await reg.get("file:///d/").check_delete("a/journal/")
    assert not (tmp_path / "d/a/journal/.gazette-delete-probe").exists()
    with pytest.raises(errors.StoreError, match=r"^delete-probe PUT failed: "):
        await reg.get("file:///missing/").check_delete("a/journal/")


async def test_walk_all_stores(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    for d in ("s1", "s2"):
        (tmp_path / d).mkdir()
    reg = registry(tmp_path)
    s1, s2 = reg.get("file:///s1/"), reg.get("file:///s2/")
    zero = "0" * 40
    await put(s1, f"{JOURNAL}/{0:016x}-{100:016x}-{zero}.raw", b"")
    await put(s1, f"{JOURNAL}/date=2020/{100:016x}-{200:016x}-{zero}.gz", b"")
    await put(s1, f"{JOURNAL}/notes.txt", b"")
    await put(s2, f"{JOURNAL}/{50:016x}-{300:016x}-{zero}.zst", b"")
    await put(s2, f"{JOURNAL}x/{300:016x}-{400:016x}-{zero}.zst", b"")  # Other journal.
    out = await index.walk_all_stores(reg, JOURNAL, ["file:///s1/", "file:///s2/"])
    got = [(f.begin, f.end, f.spec.backing_store, f.spec.path_postfix, f.mod_time > 0) for f in out]
    assert got == [(0, 100, "file:///s1/", "", True), (50, 300, "file:///s2/", "", True)]
    assert "notes.txt" in caplog.text
    assert pb.fragment_path(out[1].spec) == f"{JOURNAL}/{50:016x}-{300:016x}-{zero}.zst"


# -- Confinement to the store's root ----------------------------------------------------


def confined_store(tmp_path: Path) -> stores.ActiveStore:
    """A store at <tmp>/root/data/, with <tmp>/outside/ beside the file root."""
    (tmp_path / "root/data").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    return registry(tmp_path / "root").get("file:///data/")


def all_operations(
    store: stores.ActiveStore, path: str
) -> list[tuple[str, Callable[[], Awaitable[object]]]]:
    """(path, operation on it) of each async operation (sign_get is synchronous, checked apart)."""
    directory = path.rsplit("/", 1)[0] + "/"
    return [
        (path, lambda: put(store, path, b"x")),
        (path, lambda: store.exists(path)),
        (path, lambda: store.get(path)),
        (directory, lambda: listing(store, directory)),
        (path, lambda: store.remove(path)),
    ]


@pytest.mark.parametrize(
    "path",
    [
        "../x/f.raw",  # Would be <root>/x/f.raw: beside the store, inside the file root.
        "../../outside/f.raw",
        "a/../../../outside/f.raw",
        "/etc/f.raw",
    ],
)
async def test_file_store_refuses_paths_escaping_its_root(tmp_path: Path, path: str) -> None:
    store = confined_store(tmp_path)
    root = str(tmp_path / "root/data")
    for target, op in all_operations(store, path):
        with pytest.raises(errors.StoreError, match="outside the store root") as e:
            await op()
        assert f" {target}: refused, outside the store root {root}: " in str(e.value)
        assert not store.is_auth_error(e.value)
    with pytest.raises(errors.StoreError, match="outside the store root"):
        store.sign_get(path, 60)
    assert os.listdir(tmp_path / "outside") == []
    assert sorted(os.listdir(tmp_path / "root")) == ["data"]


async def test_file_store_refuses_symlinked_directories_leading_outside(tmp_path: Path) -> None:
    store = confined_store(tmp_path)
    (tmp_path / "outside/secret").write_bytes(b"s3cr3t")
    (tmp_path / "root/data/a").mkdir()
    (tmp_path / "root/data/a/link").symlink_to(tmp_path / "outside")
    for _, op in all_operations(store, "a/link/secret"):
        with pytest.raises(errors.StoreError, match=r"resolves to .*outside"):
            await op()
    with pytest.raises(errors.StoreError, match="outside the store root"):
        await put(store, "a/link/deeper/f.raw", b"x")  # Would create outside/deeper/.
    assert sorted(os.listdir(tmp_path / "outside")) == ["secret"]
    assert (tmp_path / "outside/secret").read_bytes() == b"s3cr3t"
    # A symlinked file leading outside is neither read nor listed.
    (tmp_path / "root/data/a/leak").symlink_to(tmp_path / "outside/secret")
    with pytest.raises(errors.StoreError, match="outside the store root"):
        await store.get("a/leak")
    assert await listing(store, "a/") == []


async def test_file_store_follows_symlinks_that_stay_inside(tmp_path: Path) -> None:
    store = confined_store(tmp_path)
    (tmp_path / "root/data/real").mkdir()
    (tmp_path / "root/data/alias").symlink_to(tmp_path / "root/data/real")
    await put(store, "alias/j/f.raw", b"in")
    assert (tmp_path / "root/data/real/j/f.raw").read_bytes() == b"in"
    assert await store.exists("alias/j/f.raw")
    assert await listing(store, "alias/") == ["j/f.raw"]


async def test_file_store_allows_dotted_names(tmp_path: Path) -> None:
    store = confined_store(tmp_path)
    for path in ("a/b/c/f.raw", "a.b/c/f.raw", "a/..b/c.../f.raw", ".test/health-check"):
        await put(store, path, b"ok")
        assert await store.exists(path)
        async with await store.get(path) as r:
            assert await r.read_all() == b"ok"
        assert store.sign_get(path, 1) == "file:///data/" + path
    assert (tmp_path / "root/data/a.b/c/f.raw").read_bytes() == b"ok"
    assert await listing(store, "a/") == ["..b/c.../f.raw", "b/c/f.raw"]
    await store.remove("a.b/c/f.raw")
    assert not await store.exists("a.b/c/f.raw")


async def test_file_store_refuses_rewrites_and_urls_escaping_the_root(tmp_path: Path) -> None:
    (tmp_path / "root/data").mkdir(parents=True)
    reg = registry(tmp_path / "root")
    rewriting = reg.get("file:///data/?find=j%2F&replace=..%2F..%2F")
    with pytest.raises(errors.StoreError, match=r"'\.\.' segment \(\.\./\.\./f\.raw\)"):
        await put(rewriting, "j/f.raw", b"x")
    bad = reg.get("file:///data/../../outside/")
    assert isinstance(bad.init_error, errors.StoreConfigError)
    assert "has a '..' segment" in str(bad.init_error)
    assert not (tmp_path / "outside").exists()


async def test_file_store_puts_files_readable_by_other_users(tmp_path: Path) -> None:
    # A Spark job running as another user reads file:// stores directly (issue 17):
    # persisted fragments are 0644, not mkstemp's 0600, whatever the umask.
    (tmp_path / "data").mkdir()
    store = registry(tmp_path).get("file:///data/")
    old_umask = os.umask(0o077)
    try:
        await put(store, "a/journal/f.raw", b"hello")
    finally:
        os.umask(old_umask)
    mode = stat.S_IMODE((tmp_path / "data/a/journal/f.raw").stat().st_mode)
    assert mode == 0o644


async def test_what_a_cancelled_get_opened_is_closed() -> None:
    # A store get cancelled while its thread opens the object (a health check's get,
    # cut short) must not leave the opened file to the garbage collector.
    opening, release = threading.Event(), threading.Event()
    opened: list[io.BytesIO] = []

    def opener() -> io.BytesIO:
        opening.set()
        release.wait(5)
        opened.append(io.BytesIO(b"content"))
        return opened[-1]

    closed = asyncio.Event()
    loop = asyncio.get_running_loop()

    def close(f: io.BytesIO) -> None:
        f.close()
        loop.call_soon_threadsafe(closed.set)

    task = asyncio.create_task(stores.base.open_in_thread(opener, close))
    await asyncio.to_thread(opening.wait, 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    release.set()
    await asyncio.wait_for(closed.wait(), 5)
    assert opened[0].closed

    # Uncancelled, the caller gets what was opened, still open.
    f = await stores.base.open_in_thread(lambda: io.BytesIO(b"x"), close)
    assert not f.closed


async def test_probe_checks_once_and_keeps_nothing(tmp_path: Path) -> None:
    (tmp_path / "ok").mkdir()
    reg = registry(tmp_path)
    assert await reg.probe("file:///ok/", delete_prefix="probe/") is None
    assert os.listdir(tmp_path / "ok" / "probe") == []  # The delete probe removed its file.
    err = await reg.probe("file:///missing/")
    assert isinstance(err, errors.HealthCheckError)
    assert str(err).startswith("health check PUT failed: invalid file store directory")
    err = await reg.probe("nope://x/")
    assert isinstance(err, errors.StoreConfigError)
    assert "unsupported fragment store scheme: nope" in str(err)
    assert reg._stores == {}  # Nothing cached, so no health loop runs for any of them.


async def test_probe_gives_up_after_its_time(tmp_path: Path) -> None:
    started = threading.Event()

    def stuck(url: str, config: stores.StoresConfig) -> stores.FileStore:
        class Stuck(stores.FileStore):
            async def put(self, *args: object, **kw: object) -> None:
                started.set()
                await asyncio.sleep(60)

        return Stuck("file:///", config)

    reg = stores.StoreRegistry(
        stores.StoresConfig(file_root=str(tmp_path)), providers={"file": stuck}
    )
    err = await reg.probe("file:///", within=0.2)
    assert started.is_set()
    assert str(err) == "health check took over 0.2s"
