"""Publisher, read iterators and Sequencer against a real broker (in-process, real etcd).

Gazette's message/publisher_test.go and reader_test.go run on brokertest;
these run on ``gazette.broker.server.testing.InProcessCluster``.
"""

from __future__ import annotations

import asyncio
import pathlib
import time
from collections.abc import AsyncIterator

import prometheus_client
import pytest
from msg_helpers import TMsg

from gazette import message
from gazette.broker import client, testing
from gazette.broker import protocol as pb
from gazette.broker.server import testing as server_testing
from gazette.keyspace import testing as ks_testing

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

JOURNALS = ["msg/a", "msg/b", "msg/c"]


def new_msg(spec: pb.JournalSpec) -> TMsg:
    return TMsg()


@pytest.fixture
async def jc(
    etcd_server: ks_testing.EtcdServer, tmp_path: pathlib.Path
) -> AsyncIterator[client.JournalClient]:
    async with (
        server_testing.InProcessCluster(etcd_server.endpoint, work_dir=tmp_path, brokers=1) as c,
        client.JournalClient(client.ClientConfig(address=c[0].endpoint)) as jc,
    ):
        req = pb.ApplyRequest()
        for name in JOURNALS:
            spec = testing.journal_spec(
                name, labels=[(pb.LABEL_CONTENT_TYPE, pb.CONTENT_TYPE_JSON_LINES)]
            )
            req.changes.add(upsert=spec)
        await client.apply_journals(jc, req)
        deadline = time.monotonic() + 60
        for name in JOURNALS:  # Until each is assigned and writable.
            while True:
                try:
                    await asyncio.wait_for(client.append(jc, name, b""), 10)
                    break
                except (client.errors.ClientError, TimeoutError):
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.1)
        yield jc


def to(journal: str) -> message.MappingFunc[TMsg]:
    return lambda m: (journal, pb.CONTENT_TYPE_JSON_LINES)


async def read_all(jc: client.JournalClient, journal: str) -> list[TMsg]:
    req = pb.ReadRequest(journal=journal)  # Non-blocking: up to the write head.
    async with message.ReadUncommittedIter(jc, req, new_msg) as it:
        return [env.message async for env in it]


async def test_publish_and_read_through_a_broker(jc: client.JournalClient) -> None:
    clock = message.Clock()
    async with client.AppendService(jc) as appends:
        pub = message.Publisher(appends, clock)
        for s in ("hello", "world"):
            await pub.publish_committed(to("msg/a"), TMsg(s=s))
        pub.publish_uncommitted(to("msg/b"), TMsg(s="one"))
        pub.publish_uncommitted(to("msg/c"), TMsg(s="two"))
        for intent in pub.build_ack_intents():
            await appends.append(intent.journal, intent.content)
        await asyncio.gather(*(op.wait() for op in appends.pending_except("")))

    p = pub.producer
    assert await read_all(jc, "msg/a") == [
        TMsg(message.build_uuid(p, 160, message.Flags.OUTSIDE_TXN), "hello"),
        TMsg(message.build_uuid(p, 320, message.Flags.OUTSIDE_TXN), "world"),
    ]
    assert await read_all(jc, "msg/b") == [
        TMsg(message.build_uuid(p, 480, message.Flags.CONTINUE_TXN), "one"),
        TMsg(message.build_uuid(p, 800, message.Flags.ACK_TXN)),
    ]
    assert await read_all(jc, "msg/c") == [
        TMsg(message.build_uuid(p, 640, message.Flags.CONTINUE_TXN), "two"),
        TMsg(message.build_uuid(p, 960, message.Flags.ACK_TXN)),
    ]

    # The spec is fetched: the envelope names the journal exactly as read.
    req = pb.ReadRequest(journal="msg/a;some/meta")
    async with message.ReadUncommittedIter(jc, req, new_msg) as it:
        env = await it.next()
    assert env.journal.name == "msg/a;some/meta"
    assert pb.value_of(env.journal.labels, pb.LABEL_CONTENT_TYPE) == pb.CONTENT_TYPE_JSON_LINES

    with pytest.raises(message.ReadError, match=r"fetching journal spec: .*does not exist"):
        await message.ReadUncommittedIter(jc, pb.ReadRequest(journal="msg/none"), new_msg).next()


async def test_publisher_sequencer_and_reader_with_replays(jc: client.JournalClient) -> None:
    """Gazette's TestIntegrationOfPublisherWithSequencerAndReader: a ring of 3 overflows."""
    clock = message.Clock()
    seq = message.Sequencer({}, [], 3)
    req = pb.ReadRequest(journal="msg/a", block=True)
    async with (
        client.AppendService(jc) as appends,
        message.ReadCommittedIter(jc, req, new_msg, seq) as it,
    ):
        pub = message.Publisher(appends, clock)
        txn_pub = message.Publisher(appends, clock)

        async def write_intents() -> None:
            for intent in txn_pub.build_ack_intents():
                await appends.append(intent.journal, intent.content)

        async def committed(n: int) -> list[tuple[bytes, int, str]]:
            out = []
            for _ in range(n):
                env = await asyncio.wait_for(it.next(), 30)
                u = env.message.get_uuid()
                out.append((message.get_producer(u), message.get_clock(u), env.message.s))
            return out

        txn_pub.publish_uncommitted(to("msg/a"), TMsg(s="one"))
        pub.publish_committed(to("msg/a"), TMsg(s="two"))
        await write_intents()
        a, t = pub.producer, txn_pub.producer
        assert await committed(3) == [(a, 320, "two"), (t, 160, "one"), (t, 480, "")]

        # Enough interleaved messages to overflow the ring: "three" is replayed.
        replays = replayed()
        txn_pub.publish_uncommitted(to("msg/a"), TMsg(s="three"))
        pub.publish_committed(to("msg/a"), TMsg(s="four"))
        txn_pub.publish_uncommitted(to("msg/a"), TMsg(s="five"))
        pub.publish_committed(to("msg/a"), TMsg(s="six"))
        txn_pub.publish_uncommitted(to("msg/a"), TMsg(s="seven"))
        await write_intents()
        assert await committed(6) == [
            (a, 800, "four"),
            (a, 1120, "six"),
            (t, 640, "three"),
            (t, 960, "five"),
            (t, 1280, "seven"),
            (t, 1440, ""),
        ]
        assert replayed() > replays


def replayed() -> float:
    value = prometheus_client.REGISTRY.get_sample_value(
        "gazette_sequencer_replay_total", {"journal": "msg/a"}
    )
    return value or 0.0
