"""Key rotation without a restart: ``--broker.auth-keys-file``, polled and on SIGHUP.

- :class:`~gazette.broker.server.keyreload.KeyReloader` on its own: a changed
  file swaps the keys, a Kubernetes-style symlink swap is seen, a bad or
  missing file keeps the keys in force, SIGHUP's forced read sees a change
  the stat can't.
- The flags: the file and the keys exclude each other, a bad file is one line.
- A real in-process cluster on a keys file laid out as the kubelet projects a
  Secret: A → [B, A] (both verify, replication and proxying still work) →
  [B] (A's tokens are refused at once, peers sign with B) → garbage (B kept,
  the error names the file).
- A broker process reloads its file on SIGHUP (a change the poll can't see),
  and one with ``--broker.auth-keys`` survives SIGHUP saying there is
  nothing to reload.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import pathlib
import signal
import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import pytest

from gazette.broker import protocol as pb
from gazette.broker import testing
from gazette.broker.protocol import auth
from gazette.broker.protocol import protocol_pb2_grpc as pb2_grpc
from gazette.broker.server import config, keyreload
from gazette.broker.server import testing as server_testing
from gazette.keyspace import testing as ks_testing

# Keys of equal length: a rewrite in place from one to the other keeps the file's size.
KEY_A = base64.b64encode(b"rotation key A: the old one...").decode()
KEY_B = base64.b64encode(b"rotation key B: the new one...").decode()
A = auth.KeyedAuth(KEY_A)
B = auth.KeyedAuth(KEY_B)
Cap = auth.Capability
WRONG_KEY = "UNAUTHENTICATED: verifying Authorization: token signature is invalid"


class SecretVolume:
    """A directory laid out as the kubelet projects a Secret, and updated as it does.

    ``<dir>/auth-keys`` -> ``..data/auth-keys``; ``..data`` -> ``..<n>/``. An update
    writes a new ``..<n+1>/``, swaps ``..data`` by renaming a new symlink over it,
    then removes the old directory: the file is never written in place.
    """

    def __init__(self, root: pathlib.Path) -> None:
        self.root = root
        root.mkdir(parents=True)
        self.path = root / "auth-keys"
        self.version = 0

    def write(self, text: str) -> None:
        self.version += 1
        new = self.root / f"..{self.version}"
        new.mkdir()
        (new / "auth-keys").write_text(text)
        tmp = self.root / "..data_tmp"
        tmp.symlink_to(new.name)
        os.replace(tmp, self.root / "..data")
        if not self.path.is_symlink():
            self.path.symlink_to("..data/auth-keys")
        old = self.root / f"..{self.version - 1}"
        if old.exists():
            (old / "auth-keys").unlink()
            old.rmdir()


# -- The reloader alone ------------------------------------------------------------------


def _accepts(holder: auth.SwappableAuth, signer: auth.KeyedAuth) -> bool:
    try:
        holder.verify(signer.authorize(auth.Claims(Cap.READ)), Cap.READ)
    except pb.AuthorizationError:
        return False
    return True


def test_reloader_swaps_on_change_and_keeps_keys_on_a_bad_file(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    vol = SecretVolume(tmp_path / "secret")
    vol.write(KEY_A)
    holder = keyreload.server_auth("", str(vol.path), "--broker.auth-keys-file")
    assert holder is not None
    reloader = keyreload.KeyReloader(str(vol.path), holder)
    assert _accepts(holder, A) and not _accepts(holder, B)
    assert not reloader.check()  # Nothing changed.

    vol.write(f"{KEY_B}\n{KEY_A}\n")  # A symlink swap: a new inode.
    assert reloader.check()
    assert _accepts(holder, A) and _accepts(holder, B)
    # The first key now signs (a broker's calls to its peers).
    ((_, value),) = holder.authorize(auth.Claims(Cap.REPLICATE))
    assert B.parse(value.removeprefix("Bearer ")).capability == Cap.REPLICATE

    vol.write(KEY_B)
    assert reloader.check()
    assert _accepts(holder, B) and not _accepts(holder, A)

    caplog.set_level(logging.ERROR, keyreload.__name__)
    for bad in ("not base64!", "", "\xff"):
        vol.write(bad)
        assert not reloader.check()
        assert _accepts(holder, B), bad
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 3, errors
    assert all(f"--broker.auth-keys-file {vol.path}: no valid keys" in e for e in errors)
    assert "failed to decode key at index 0" in errors[0]
    assert "at least one key must be provided" in errors[1]
    # The same bad content again is not logged again (polls would flood the log).
    caplog.clear()
    os.utime(vol.path, ns=(time.time_ns(), time.time_ns()))
    assert not reloader.check() and not caplog.records
    # ... but a forced read (SIGHUP) says it once more.
    assert not reloader.check(force=True)
    assert len(caplog.records) == 1

    # A missing file keeps the keys too, and its return is picked up.
    (vol.root / "..data").unlink()
    caplog.clear()
    assert not reloader.check()
    assert "cannot be read, keeping the keys in force" in caplog.records[0].getMessage()
    vol.write(KEY_A)
    assert reloader.check()
    assert _accepts(holder, A) and not _accepts(holder, B)
    assert reloader.reloads == 3


def test_a_forced_read_sees_what_the_stat_cannot(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "keys"
    path.write_text(KEY_A)
    holder = keyreload.server_auth("", str(path), "--broker.auth-keys-file")
    assert holder is not None
    reloader = keyreload.KeyReloader(str(path), holder)
    _rewrite_keeping_stat(path, KEY_B)
    assert not reloader.check()  # Same inode, size and mtime: the poll is blind to it.
    assert _accepts(holder, A)
    assert reloader.check(force=True)
    assert _accepts(holder, B) and not _accepts(holder, A)


async def test_the_reload_loop_polls_and_answers_requests(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "keys"
    path.write_text(KEY_A)
    holder = auth.SwappableAuth(keyreload.load_keys_file(str(path)))
    reloader = keyreload.KeyReloader(str(path), holder, keyreload.ReloadConfig(poll_interval=0.05))
    async with asyncio.TaskGroup() as tg:
        task = tg.create_task(reloader.run())
        path.write_text(f"{KEY_B},{KEY_A}")
        await _until(lambda: _accepts(holder, B), 5)
        _rewrite_keeping_stat(path, f"{KEY_A},{KEY_B}")
        reloader.request_reload()
        await _until(lambda: reloader.reloads == 2, 5)
        task.cancel()


def _rewrite_keeping_stat(path: pathlib.Path, text: str) -> None:
    before = os.stat(path)
    with open(path, "r+") as f:  # In place: same inode.
        f.write(text)
        f.truncate()
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (
        before.st_ino,
        before.st_size,
        before.st_mtime_ns,
    )


async def _until(ok: Callable[[], bool], within: float) -> None:
    deadline = time.monotonic() + within
    while not ok():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


# -- Flags -------------------------------------------------------------------------------

_BASE = [
    "--etcd.address",
    "http://127.0.0.1:1",
    "--broker.id",
    "rotation",
    "--broker.host",
    "127.0.0.1",
]


def test_keys_and_keys_file_exclude_each_other(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "keys"
    path.write_text(KEY_A)
    cfg = config.parse([*_BASE, "--broker.auth-keys-file", str(path)], env={})
    assert cfg.broker.auth_keys_file == str(path) and not cfg.broker.auth_keys
    cfg = config.parse(_BASE, env={"BROKER_AUTH_KEYS_FILE": str(path)})
    assert cfg.broker.auth_keys_file == str(path)
    want = (
        "--broker.auth-keys and --broker.auth-keys-file are mutually exclusive "
        "(flags or environment variables): give the keys one way"
    )
    for argv, env in (
        ([*_BASE, "--broker.auth-keys", KEY_A, "--broker.auth-keys-file", str(path)], {}),
        ([*_BASE, "--broker.auth-keys-file", str(path)], {"BROKER_AUTH_KEYS": KEY_A}),
    ):
        with pytest.raises(SystemExit) as exc:
            config.parse(argv, env=env)
        assert str(exc.value) == want


def test_a_bad_keys_file_is_one_line_naming_it(tmp_path: pathlib.Path) -> None:
    bad = tmp_path / "bad"
    bad.write_text("!!!")
    cases = {
        str(bad): f"--broker.auth-keys-file: {bad}: failed to decode key at index 0",
        str(tmp_path / "missing"): (
            f"--broker.auth-keys-file: reading {tmp_path / 'missing'}: No such file or directory"
        ),
    }
    for path, want in cases.items():
        with pytest.raises(SystemExit) as exc:
            config.parse([*_BASE, "--broker.auth-keys-file", path], env={})
        assert str(exc.value).startswith(want), str(exc.value)
        assert "\n" not in str(exc.value)
    helps = config.build_parser(env={}).format_help()
    assert "--broker.auth-keys-file" in helps and "SIGHUP" in helps
    assert "Read once: changing them takes a restart" in " ".join(helps.split())


# -- A real cluster ----------------------------------------------------------------------


def _stub(ch: grpc.aio.Channel) -> pb2_grpc.JournalAsyncStub:
    return pb2_grpc.JournalStub(ch)  # type: ignore[return-value]


def _md(signer: auth.KeyedAuth, cap: int = Cap.ALL) -> auth.Metadata:
    return signer.authorize(auth.Claims(cap), 600)


async def _outcome(aw: Awaitable[Any]) -> str:
    try:
        await aw
    except grpc.aio.AioRpcError as e:
        return f"{e.code().name}: {e.details()}"
    return "ok"


async def _list(stub: pb2_grpc.JournalAsyncStub, md: auth.Metadata) -> None:
    async for _ in stub.List(pb.ListRequest(), metadata=md):
        pass


async def _on_every_broker(
    cluster: server_testing.InProcessCluster,
    signer: auth.KeyedAuth,
    want: str,
    within: float = 20.0,
) -> None:
    """Wait until a List with ``signer``'s token has outcome ``want`` on every broker."""
    deadline = time.monotonic() + within
    for i in range(len(cluster)):
        async with cluster.channel(i) as ch:
            while True:
                got = await _outcome(_list(_stub(ch), _md(signer, Cap.LIST)))
                if got.startswith(want):
                    break
                assert time.monotonic() < deadline, (i, got)
                await asyncio.sleep(0.1)


async def _append_everywhere(
    cluster: server_testing.InProcessCluster, journal: str, signer: auth.KeyedAuth, tag: str
) -> bytes:
    """Append a line through each broker (members and not: proxied, replicated)."""
    out = b""
    for i in range(len(cluster)):
        async with cluster.channel(i) as ch:
            line = f"{tag} via {i}\n".encode()
            resp = await testing.append(_stub(ch), journal, [line], metadata=_md(signer))
            assert resp.status == pb.OK, (tag, i, resp)
            out += line
    return out


async def test_rotating_the_keys_file_of_a_serving_cluster(
    etcd_server: ks_testing.EtcdServer, tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    vol = SecretVolume(tmp_path / "secret")
    vol.write(KEY_A)
    journal = "rotation/j"
    async with server_testing.InProcessCluster(
        etcd_server.endpoint,
        work_dir=tmp_path,
        brokers=3,
        extra_args=["--broker.auth-keys-file", str(vol.path)],
    ) as cluster:
        async with cluster.channel(0) as ch:
            spec = testing.journal_spec(journal, stores=[cluster.store_url], replication=2)
            assert (await testing.apply_specs(_stub(ch), spec, metadata=_md(A))).status == pb.OK
            await testing.wait_writable(_stub(ch), journal, metadata=_md(A))
        want = await _append_everywhere(cluster, journal, A, "A")
        await _on_every_broker(cluster, B, WRONG_KEY)

        # Step 1: B is added in front. Both verify; the brokers sign with B.
        vol.write(f"{KEY_B}, {KEY_A}")
        await _on_every_broker(cluster, B, "ok")
        await _on_every_broker(cluster, A, "ok")
        want += await _append_everywhere(cluster, journal, A, "A after B, A")
        want += await _append_everywhere(cluster, journal, B, "B after B, A")

        # Step 2: A is retired. Its tokens are refused as soon as a broker reloads;
        # replication and proxying work, so the brokers' own tokens are B's.
        vol.write(KEY_B)
        await _on_every_broker(cluster, A, WRONG_KEY)
        for i in range(len(cluster)):
            async with cluster.channel(i) as ch:
                got = await _outcome(testing.append(_stub(ch), journal, [b"no"], metadata=_md(A)))
                assert got == f"{WRONG_KEY}: signature is invalid", (i, got)
        want += await _append_everywhere(cluster, journal, B, "B after B")
        for i in range(len(cluster)):
            async with cluster.channel(i) as ch:
                content, _ = await testing.read(_stub(ch), journal, metadata=_md(B))
                assert content == want, i

        # Step 3: a file without keys is logged, naming it; the keys in force stay.
        caplog.set_level(logging.ERROR, keyreload.__name__)
        vol.write("this is not base64\n")
        await _until(
            lambda: any(
                f"--broker.auth-keys-file {vol.path}: no valid keys" in r.getMessage()
                for r in caplog.records
            ),
            20,
        )
        await _on_every_broker(cluster, B, "ok")
        await _on_every_broker(cluster, A, WRONG_KEY)
        want += await _append_everywhere(cluster, journal, B, "B after garbage")
        async with cluster.channel(1) as ch:
            content, _ = await testing.read(_stub(ch), journal, metadata=_md(B))
            assert content == want


# -- SIGHUP, on broker processes ---------------------------------------------------------


def _list_outcome(endpoint_port: int, signer: auth.KeyedAuth) -> str:
    async def go() -> str:
        from gazette.broker.protocol import dial

        async with dial.channel(f"http://127.0.0.1:{endpoint_port}") as ch:
            return await _outcome(_list(_stub(ch), _md(signer, Cap.LIST)))

    return asyncio.run(go())


def _wait_log(broker: testing.BrokerProcess, text: str, within: float = 15.0) -> None:
    deadline = time.monotonic() + within
    while text not in broker.log_path.read_text(errors="replace"):
        assert time.monotonic() < deadline, f"{text!r} not logged:\n{broker.log_tail()}"
        time.sleep(0.1)


@pytest.mark.integration
def test_sighup_reloads_the_keys_file_of_a_broker_process(
    etcd_server: ks_testing.EtcdServer, tmp_path: pathlib.Path, cluster_factory: Any
) -> None:
    path = tmp_path / "keys"
    path.write_text(KEY_A)
    with cluster_factory(
        etcd_server, tmp_path / "c", brokers=1, extra_args=["--broker.auth-keys-file", str(path)]
    ) as cluster:
        broker = cluster[0]
        assert _list_outcome(broker.port, A) == "ok"
        # Rewritten in place with its inode, size and mtime kept: no poll can see it.
        _rewrite_keeping_stat(path, KEY_B)
        time.sleep(5)  # Two polls and more.
        assert _list_outcome(broker.port, B).startswith(WRONG_KEY)
        assert broker.proc is not None
        broker.proc.send_signal(signal.SIGHUP)
        _wait_log(broker, f"--broker.auth-keys-file {path}: reloaded 1 authorization keys")
        assert _list_outcome(broker.port, B) == "ok"
        assert _list_outcome(broker.port, A).startswith(WRONG_KEY)
        assert "SIGHUP: reloading" in broker.log_path.read_text()
        assert broker.alive


@pytest.mark.integration
def test_sighup_with_keys_from_a_flag_reloads_nothing_and_keeps_serving(
    etcd_server: ks_testing.EtcdServer, tmp_path: pathlib.Path, cluster_factory: Any
) -> None:
    with cluster_factory(
        etcd_server, tmp_path, brokers=1, extra_args=["--broker.auth-keys", KEY_A]
    ) as cluster:
        broker = cluster[0]
        assert broker.proc is not None
        broker.proc.send_signal(signal.SIGHUP)
        _wait_log(broker, "SIGHUP: nothing to reload")
        assert "--broker.auth-keys" in broker.log_tail()
        assert broker.alive
        assert _list_outcome(broker.port, A) == "ok"
