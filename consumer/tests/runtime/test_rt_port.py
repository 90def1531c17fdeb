"""A consumer's port is the broker's native front door: /debug/ on the gRPC port, a
connection cap that says why, and tokens checked before a request is read."""

from __future__ import annotations

import asyncio
import base64
import pathlib
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from gazette.broker.protocol import dial
from gazette.broker.server import testing as server_testing
from gazette.consumer import protocol as pc
from gazette.consumer.protocol import protocol_pb2_grpc as pc_grpc
from gazette.consumer.runtime import config, process
from gazette.keyspace import testing as ks_testing

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

KEY = base64.b64encode(b"consumer-port-test-key").decode()


class NoShards:
    """An application never given a shard here."""

    async def new_store(self, shard: Any) -> Any:
        raise AssertionError("no shard is assigned in these tests")

    def new_message(self, spec: Any) -> Any:
        raise AssertionError("no shard is assigned in these tests")

    async def consume_message(self, shard: Any, store: Any, env: Any, pub: Any) -> None:
        raise AssertionError("no shard is assigned in these tests")

    async def finalize_txn(self, shard: Any, store: Any, pub: Any) -> None:
        raise AssertionError("no shard is assigned in these tests")


@pytest.fixture
async def broker(
    etcd_server: ks_testing.EtcdServer, tmp_path: pathlib.Path
) -> AsyncIterator[server_testing.InProcessCluster]:
    async with server_testing.InProcessCluster(
        etcd_server.endpoint, work_dir=tmp_path, brokers=1
    ) as c:
        yield c


async def serving(
    etcd_server: ks_testing.EtcdServer, broker: server_testing.InProcessCluster, *extra: str
) -> tuple[process.Serving, asyncio.Event, asyncio.Task[None]]:
    cfg = config.parse(
        [
            "--consumer.app", "unused:Unused",
            "--consumer.zone", "zone-a",
            "--consumer.id", "port-test",
            "--consumer.host", "127.0.0.1",
            "--consumer.http-port", "-1",
            "--broker.address", broker[0].endpoint,
            "--etcd.address", etcd_server.endpoint,
            "--etcd.prefix", "/gazette/consumers/rt-port",
            "--etcd.lease", "3s",
            "--consumer.drain-timeout", "2s",
            *extra,
        ],
        env={},
    )  # fmt: skip
    stop = asyncio.Event()
    started: asyncio.Future[process.Serving] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(process.serve(cfg, NoShards(), stop=stop, started=started))
    async with asyncio.timeout(30):
        return await started, stop, task


async def test_the_port_serves_debug_and_refuses_connections_past_the_cap_saying_why(
    etcd_server: ks_testing.EtcdServer, broker: server_testing.InProcessCluster
) -> None:
    srv, stop, task = await serving(etcd_server, broker, "--consumer.max-connections", "8")
    port = int(srv.endpoint.rsplit(":", 1)[1])
    held: list[asyncio.StreamWriter] = []
    try:
        for _ in range(16):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            held.append(writer)
            writer.write(b"GET /debug/ready HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = await asyncio.wait_for(reader.readuntil(b"\n"), 5)
            if not answer.startswith(b"HTTP/1.1 200 "):
                break
        assert len(held) > 1, "the first /debug/ready on the gRPC port is answered 200"
        assert answer.startswith(b"HTTP/1.1 503 "), answer
        rest = await asyncio.wait_for(reader.read(), 5)
        assert rest.endswith(
            b"this consumer serves 8 connections at once, its most"
            b" (--consumer.max-connections): try again soon\n"
        ), rest
        assert len(held) <= 9
        # gRPC past the cap: UNAVAILABLE with the same reason, not a silent close.
        async with dial.channel(srv.endpoint) as ch:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await pc_grpc.ShardStub(ch).List(pc.ListRequest(), timeout=5)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "(--consumer.max-connections)" in (err.value.details() or "")
    finally:
        for writer in held:
            writer.close()
    # Once connections go, calls are served again.
    async with asyncio.timeout(10), dial.channel(srv.endpoint) as ch:
        while True:
            try:
                listed = await pc_grpc.ShardStub(ch).List(pc.ListRequest(), timeout=5)
                break
            except grpc.aio.AioRpcError:
                await asyncio.sleep(0.1)
    assert list(listed.shards) == []
    stop.set()
    await asyncio.wait_for(task, 30)


async def test_a_request_without_a_token_is_refused_before_it_is_read(
    etcd_server: ks_testing.EtcdServer, broker: server_testing.InProcessCluster
) -> None:
    srv, stop, task = await serving(etcd_server, broker, "--consumer.auth-keys", KEY)
    # 12 MiB of Apply: over gRPC's own 4 MiB receive limit, which would answer
    # RESOURCE_EXHAUSTED after reading it; the door answers before reading any.
    req = pc.ApplyRequest()
    spec = req.changes.add().upsert
    spec.id = "too-big"
    spec.labels.labels.add(name="padding", value="x" * (12 << 20))
    async with dial.channel(srv.endpoint, dial.DialConfig(max_message_size=64 << 20)) as ch:
        began = time.monotonic()
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await pc_grpc.ShardStub(ch).Apply(req, timeout=20)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED, err.value
        assert "missing or empty Authorization token" in (err.value.details() or "")
        assert time.monotonic() - began < 5
    stop.set()
    await asyncio.wait_for(task, 30)
