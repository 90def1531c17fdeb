"""The consumer's ``--etcd.*`` options: the brokers' flags, and a consumer process on a
TLS + auth etcd (announced, kept alive past its token, and drained)."""

from __future__ import annotations

import asyncio
import pathlib
from typing import Any

import pytest

from gazette import keyspace
from gazette.consumer.runtime import config, process
from gazette.keyspace import testing as ks_testing

USER, PASSWORD = "consumer", "c-secret"
PREFIX = "/gazette/consumers/etcd-options"
TOKEN_TTL = 2


def base_args() -> list[str]:
    return ["--consumer.app", "unused:Unused", "--consumer.id", "consumer-00"]


def test_the_etcd_flags_are_the_brokers(tmp_path: pathlib.Path) -> None:
    cert, key, ca = (tmp_path / n for n in ("c.crt", "c.key", "ca.crt"))
    for f in (cert, key, ca):
        f.write_text("x")
    cfg = config.parse(
        [
            *base_args(),
            "--etcd.address",
            "https://e-0:2379,https://e-1:2379",
            "--etcd.cert-file",
            str(cert),
            "--etcd.cert-key-file",
            str(key),
        ],
        env={
            "ETCD_TRUSTED_CA_FILE": str(ca),
            "ETCD_USERNAME": USER,
            "ETCD_PASSWORD": PASSWORD,
        },
    )
    assert isinstance(cfg.etcd, keyspace.EtcdConfig)
    assert (cfg.etcd.cert_file, cfg.etcd.cert_key_file, cfg.etcd.trusted_ca_file) == (
        str(cert),
        str(key),
        str(ca),
    )
    assert (cfg.etcd.username, cfg.etcd.password) == (USER, PASSWORD)
    assert len(cfg.etcd.endpoints) == 2
    assert PASSWORD not in repr(cfg)
    assert cfg.etcd.prefix == "/gazette/consumers/Unused"


def test_bad_etcd_options_are_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        config.parse([*base_args(), "--etcd.cert-key-file", "/k.pem"], env={})
    assert info.value.code == 2
    assert "--etcd.cert-key-file: needs --etcd.cert-file too" in capsys.readouterr().err


class _NoShards:
    """An application that is never given a shard (this test assigns none)."""

    def new_store(self, shard: Any) -> Any:
        raise AssertionError("no shard expected")

    def new_message(self, spec: Any) -> Any:
        raise AssertionError("no shard expected")

    def consume_message(self, shard: Any, store: Any, env: Any, pub: Any) -> None:
        raise AssertionError("no shard expected")

    def finalize_txn(self, shard: Any, store: Any, pub: Any) -> None:
        raise AssertionError("no shard expected")


@pytest.mark.integration
@pytest.mark.timeout(120)
async def test_a_consumer_process_on_a_tls_and_auth_etcd(tmp_path: pathlib.Path) -> None:
    tls = ks_testing.make_tls(tmp_path / "pki")
    server = ks_testing.EtcdServer(work_dir=tmp_path / "etcd", tls=tls, auth_token_ttl=TOKEN_TTL)
    with server:
        server.enable_auth({USER: (PASSWORD, "/gazette/consumers/")})
        want = server.config(USER, PASSWORD)
        cfg = config.parse(
            [
                *base_args(),
                "--consumer.host", "127.0.0.1",
                "--consumer.http-port", "-1",
                "--broker.address", "http://127.0.0.1:1",  # Never dialed: no shards.
                "--etcd.address", want.address,
                "--etcd.cert-file", want.cert_file,
                "--etcd.cert-key-file", want.cert_key_file,
                "--etcd.trusted-ca-file", want.trusted_ca_file,
                "--etcd.prefix", PREFIX,
                "--etcd.lease", "3s",
                "--consumer.drain-timeout", "5s",
            ],
            env={"ETCD_USERNAME": USER, "ETCD_PASSWORD": PASSWORD},
        )  # fmt: skip
        stop = asyncio.Event()
        started: asyncio.Future[process.Serving] = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(process.serve(cfg, _NoShards(), stop=stop, started=started))
        root = await keyspace.connect(server.config(), call_timeout=10)
        try:
            async with asyncio.timeout(30):
                serving = await started
            # Past the consumer's token, twice over: its lease is still kept alive.
            await asyncio.sleep(2 * TOKEN_TTL + 1)
            assert not task.done()
            member = await root.get(serving.member_key.encode())
            assert member is not None and member.lease
            stop.set()
            async with asyncio.timeout(30):
                await task  # Drains, then revokes its lease: with a fresh token.
            assert await root.get(serving.member_key.encode()) is None
        finally:
            stop.set()
            if not task.done():
                task.cancel()
            await root.delete_prefix(f"{PREFIX}/".encode())
            await root.close()
