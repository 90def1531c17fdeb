"""The broker process: its spool directory, and the HTTP gateway on its HTTP port."""

from __future__ import annotations

import asyncio
import contextlib
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


# Opens up to N connections to a port and keeps them, each having sent half a request
# line; reopens those the broker closes (refused, or timed out), for SECONDS; prints how
# many it opened. In a process of its own, so that it loads neither this test's event loop
# nor its file descriptors.
FLOOD = r"""
import socket, sys, time
port, most, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
opened, held = 0, []
end = time.monotonic() + seconds
while time.monotonic() < end:
    while len(held) < most and time.monotonic() < end:
        s = socket.socket()
        s.settimeout(2)
        try:
            s.connect(("127.0.0.1", port))
            s.send(b"GET /debug/ready HT")
        except OSError:
            s.close()
            continue
        s.setblocking(False)
        held.append(s)
        opened += 1
    alive = []
    for s in held:
        try:
            s.recv(4096)  # An answer (a refusal) or EOF: the broker let it go.
            s.close()
        except BlockingIOError:
            alive.append(s)
        except OSError:
            s.close()
    held = alive
    time.sleep(0.01)
print(opened)
"""


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith((name + " ", name + "{")):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} is not in /debug/metrics")


async def test_a_connection_flood_is_refused_while_established_clients_go_on(
    etcd_server: ks_testing.EtcdServer, tmp_path: pathlib.Path
) -> None:
    from gazette.broker import client
    from gazette.broker import protocol as pb
    from gazette.broker.server import testing as server_testing

    most = 200
    async with (
        server_testing.InProcessCluster(
            etcd_server.endpoint,
            work_dir=tmp_path,
            brokers=1,
            extra_args=["--broker.max-connections", str(most)],
        ) as cluster,
        client.JournalClient(client.ClientConfig(address=cluster[0].endpoint)) as jc,
    ):
        port = int(cluster[0].endpoint.rsplit(":", 1)[1])
        req = pb.ApplyRequest()
        req.changes.add(upsert=testing.journal_spec("flood/target"))
        await client.apply_journals(jc, req)
        async with asyncio.timeout(30):
            while True:
                try:
                    await asyncio.wait_for(client.append(jc, "flood/target", b"ready\n"), 5)
                    break
                except (client.errors.ClientError, TimeoutError):
                    await asyncio.sleep(0.1)
        # A kept HTTP/1.1 connection of our own, opened before the flood.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)

        async def get(path: str) -> tuple[float, bytes]:
            began = asyncio.get_running_loop().time()
            writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            length = next(
                int(h.split(b":", 1)[1])
                for h in head.split(b"\r\n")
                if h.lower().startswith(b"content-length:")
            )
            body = await asyncio.wait_for(reader.readexactly(length), 5)
            assert head.startswith(b"HTTP/1.1 200 "), head
            return asyncio.get_running_loop().time() - began, body

        flood = await asyncio.create_subprocess_exec(
            sys.executable, "-c", FLOOD, str(port), str(most * 5), "8",
            stdout=subprocess.PIPE,
        )  # fmt: skip
        appended, worst_ready, most_open = 0, 0.0, 0.0
        try:
            while flood.returncode is None:
                await asyncio.wait_for(client.append(jc, "flood/target", b"x" * 1024), 10)
                appended += 1
                took, _ = await get("/debug/ready")
                worst_ready = max(worst_ready, took)
                _, metrics = await get("/debug/metrics")
                most_open = max(
                    most_open, _metric(metrics.decode(), "gazette_broker_connections_open")
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(flood.wait(), 0.05)
            out, _ = await flood.communicate()
        finally:
            if flood.returncode is None:
                flood.kill()
                await flood.wait()
            writer.close()
        metrics = await metrics_after(port)
        refused = _metric(metrics.decode(), "gazette_broker_connections_refused_total")
        opened = int(out)
        # The flood took far more connections than the cap, and got refused, not served.
        assert opened > most * 2, opened
        assert refused >= opened - most * 2, (refused, opened)
        # (The gauge sums both ports; the HTTP port holds none of these.)
        assert most_open <= most + 2, most_open
        # Meanwhile the established client and the kept connection were served.
        assert appended >= 10, appended
        assert worst_ready < 2.0, worst_ready


async def metrics_after(port: int) -> bytes:
    """GET /debug/metrics on a new connection, retried while the port still refuses."""
    async with asyncio.timeout(20):
        while True:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            try:
                writer.write(b"GET /debug/metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                data = await reader.read()
            finally:
                writer.close()
            if data.startswith(b"HTTP/1.1 200 "):
                return data.split(b"\r\n\r\n", 1)[1]
            await asyncio.sleep(0.2)
