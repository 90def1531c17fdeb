"""Go's Publisher feeds our consumer shards; Go's reader reads what our shards published.

``gazette-msg`` (Go's ``message`` package, go.gazette.dev/core v0.103) publishes
committed messages, acknowledged transactions, a rolled-back span and never
acknowledged messages into a shard's source journal. Our consumer process
(``python -m gazette.consumer``'s serve, in this test's loop) must consume
the committed and acknowledged ones exactly once, and nothing else; it
republishes each inside its consumer transactions, which Go's
read-committed iterator must then deliver exactly once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from typing import Any

import pytest
from google.protobuf import duration_pb2
from interop_go import GazetteMsg, ndjson_journal

from gazette import keyspace, message
from gazette.broker import client, testing
from gazette.broker import protocol as pb
from gazette.broker.client import AsyncOperation
from gazette.consumer import protocol as pc
from gazette.consumer.runtime import config, process
from gazette.keyspace import testing as ks_testing

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

SOURCE = "interop/go-to-shard"
OUT = "interop/shard-to-go"
PREFIX = "/gazette/consumers/interop-go"


class GoMsg(message.JSONMessage):
    """Go's ``Msg{UUID, Seq, Kind}``."""


class Store:
    """A fenced in-memory checkpoint (one process, one store per primary)."""

    def __init__(self, fqn: str, checkpoints: dict[str, bytes]) -> None:
        self.fqn = fqn
        self.checkpoints = checkpoints

    async def restore_checkpoint(self, shard: Any) -> pc.Checkpoint:
        return pc.Checkpoint.FromString(self.checkpoints.get(self.fqn, b""))

    def start_commit(
        self, shard: Any, cp: pc.Checkpoint, wait_for: Collection[AsyncOperation]
    ) -> AsyncOperation:
        async def commit() -> None:
            for op in wait_for:
                await op
            self.checkpoints[self.fqn] = cp.SerializeToString()

        op: AsyncOperation = shard.run_operation("commit", commit())
        return op

    async def destroy(self) -> None:
        pass


class Relay:
    def __init__(self) -> None:
        self.consumed: list[tuple[int, str]] = []
        self.checkpoints: dict[str, bytes] = {}

    async def new_store(self, shard: Any) -> Any:
        return Store(shard.fqn, self.checkpoints)

    def new_message(self, spec: pb.JournalSpec) -> message.Message:
        return GoMsg()

    async def consume_message(
        self, shard: Any, store: Any, env: message.Envelope, pub: message.Publisher
    ) -> None:
        doc = env.message.doc  # type: ignore[attr-defined]
        if message.get_flags(env.message.get_uuid()) == message.Flags.ACK_TXN:
            return
        self.consumed.append((doc["Seq"], doc["Kind"]))
        out = GoMsg({"UUID": "", "Seq": doc["Seq"], "Kind": "relayed"})
        pub.publish_uncommitted(lambda _m: (OUT, pb.CONTENT_TYPE_JSON_LINES), out)

    async def finalize_txn(self, shard: Any, store: Any, pub: message.Publisher) -> None:
        pass


async def test_go_publisher_to_our_shards_to_go_reader(
    gazette_msg: GazetteMsg,
    interop_cluster: testing.BrokerCluster,
    etcd_server: ks_testing.EtcdServer,
) -> None:
    broker = interop_cluster[0].endpoint
    etcd = await keyspace.connect(etcd_server.endpoint)
    for name in (SOURCE, OUT):
        await ndjson_journal(interop_cluster, name)
    spec = pc.ShardSpec(id="relay-000")
    spec.sources.add(journal=SOURCE)
    spec.max_txn_duration.CopyFrom(duration_pb2.Duration(nanos=300_000_000))
    await keyspace.apply_changes(etcd, PREFIX, [(spec.id, spec.SerializeToString(), 0)])

    app = Relay()
    stop = asyncio.Event()
    cfg = config.parse(
        [
            "--consumer.app", "unused:Unused",
            "--consumer.id", "relay-consumer",
            "--consumer.host", "127.0.0.1",
            "--consumer.http-port", "-1",
            "--broker.address", broker,
            "--etcd.address", etcd_server.endpoint,
            "--etcd.prefix", PREFIX,
            "--etcd.lease", "3s",
        ]
    )  # fmt: skip
    task = asyncio.create_task(process.serve(cfg, app, stop=stop))
    try:
        pub = await gazette_msg.apublish(
            broker, [SOURCE], committed=10, txn=5, txns=3, rollback=4, pending=3
        )
        print("go publish:", pub)
        expected = [(s, "committed") for s in range(10)] + [(s, "txn") for s in range(10, 25)]
        async with asyncio.timeout(60):
            while True:
                if len(app.consumed) >= len(expected):
                    break
                await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)  # Anything more (a rolled-back or pending message) would show.
        assert app.consumed == expected, "Go's committed and acknowledged messages, once, in order"

        # Go reads our shard's transactional output: each relayed message once.
        async with client.JournalClient(client.ClientConfig(address=broker)) as jc:
            async with asyncio.timeout(30):
                while True:
                    head = (await client.append(jc, OUT, b"")).commit.end
                    delivered, summary = await gazette_msg.aread(broker, OUT, until_offset=head)
                    relayed = [d for d in delivered if d.get("Kind") == "relayed"]
                    if len(relayed) >= len(expected):
                        break
                    await asyncio.sleep(0.5)
        print("go read:", summary)
        assert [d["Seq"] for d in relayed] == [s for s, _ in expected]
    finally:
        stop.set()
        async with asyncio.timeout(30):
            await asyncio.gather(task, return_exceptions=True)
        await etcd.close()
        await asyncio.to_thread(ks_testing.wipe_prefix, etcd_server.endpoint, PREFIX + "/")
    assert task.exception() is None
