"""The broker process: its spool directory, and the HTTP gateway on its HTTP port."""

from __future__ import annotations

import asyncio
import pathlib
import subprocess
import sys
import urllib.request
from typing import Any

import pytest

from gazette.broker import testing
from gazette.broker.protocol import protocol_pb2_grpc as pb2_grpc
from gazette.broker.server import process
from gazette.keyspace import testing as ks_testing


def test_spool_dir_is_created_with_its_parents(tmp_path: pathlib.Path) -> None:
    spool = tmp_path / "a" / "b" / "spool"
    process.ensure_spool_dir(str(spool))
    assert spool.is_dir()
    process.ensure_spool_dir(str(spool))  # Already there: fine.
    assert spool.is_dir()


def test_spool_dir_that_cannot_be_created_is_one_clear_line(tmp_path: pathlib.Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    spool = tmp_path / "file" / "spool"
    with pytest.raises(SystemExit) as exc:
        process.ensure_spool_dir(str(spool))
    message = str(exc.value)
    assert message.startswith(f"--broker.spool-dir {spool}: cannot create it: ")
    assert "\n" not in message


def test_broker_exits_at_once_when_its_spool_dir_cannot_be_created(tmp_path: pathlib.Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    spool = tmp_path / "file" / "spool"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "gazette.broker",
            "--broker.spool-dir",
            str(spool),
            # Never reached: the spool directory is checked first.
            "--etcd.address",
            "http://127.0.0.1:1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [
        f"--broker.spool-dir {spool}: cannot create it: Not a directory"
    ]


def _http(method: str, url: str, body: bytes | None = None, status: int = 200) -> bytes:
    req = urllib.request.Request(url, data=body, method=method)
    with urllib.request.urlopen(req, timeout=20) as resp:
        assert resp.status == status
        return bytes(resp.read())


@pytest.mark.integration
def test_each_broker_serves_the_gateway_on_its_http_port(
    etcd_server: ks_testing.EtcdServer, tmp_path: pathlib.Path, cluster_factory: Any
) -> None:
    journal = "gateway/on-every-broker"
    with cluster_factory(etcd_server, tmp_path, brokers=2) as cluster:

        async def create() -> None:
            spec = testing.journal_spec(journal, stores=[cluster.store_url])
            async with cluster.channel(0) as ch:
                stub = pb2_grpc.JournalStub(ch)
                await testing.apply_specs(stub, spec)  # type: ignore[arg-type]
                await testing.wait_writable(stub, journal)  # type: ignore[arg-type]

        asyncio.run(create())
        urls = [f"http://127.0.0.1:{b.http_port}" for b in cluster.brokers]
        # Whichever broker holds the journal, each one's gateway routes to it.
        _http("PUT", f"{urls[0]}/{journal}", b"one\n", 204)
        _http("PUT", f"{urls[1]}/{journal}", b"two\n", 204)
        for url in urls:
            assert _http("GET", f"{url}/{journal}?offset=0", status=206) == b"one\ntwo\n"
            assert _http("GET", f"{url}/debug/ready") == b"ready\n"


@pytest.mark.integration
async def test_connections_past_max_connections_are_told_why(
    etcd_server: ks_testing.EtcdServer, tmp_path: pathlib.Path
) -> None:
    from gazette.broker.server import testing as server_testing

    async with server_testing.InProcessCluster(
        etcd_server.endpoint,
        work_dir=tmp_path,
        brokers=1,
        extra_args=["--broker.max-connections", "8"],
    ) as cluster:
        port = int(cluster[0].endpoint.rsplit(":", 1)[1])
        held: list[asyncio.StreamWriter] = []
        try:
            for _ in range(16):
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                held.append(writer)
                writer.write(b"GET /debug/ready HTTP/1.1\r\nHost: x\r\n\r\n")
                answer = await asyncio.wait_for(reader.readuntil(b"\n"), 5)
                if not answer.startswith(b"HTTP/1.1 200 "):
                    break
            assert answer.startswith(b"HTTP/1.1 503 "), answer
            rest = await asyncio.wait_for(reader.read(), 5)
            assert rest.endswith(
                b"this broker serves 8 connections at once, its most"
                b" (--broker.max-connections): try again soon\n"
            )
            assert len(held) <= 9  # Its own connections (the gateway's channel) count too.
        finally:
            for writer in held:
                writer.close()
