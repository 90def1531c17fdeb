"""The isolation watch (gazette.broker.server.isolation), on a fake clock and fake peers."""

from __future__ import annotations

import asyncio
import random

import grpc

from gazette.broker import protocol as pb
from gazette.broker.protocol import dial
from gazette.broker.protocol import protocol_pb2_grpc as pb2_grpc
from gazette.broker.server import isolation

PEERS = [("z#b", "http://b:1"), ("z#c", "http://c:1")]


class Net:
    """Peers that answer or not, the watch's clock, and what it did."""

    def __init__(self, peers: list[isolation.Peer] = PEERS) -> None:
        self.peers = list(peers)
        self.reachable = {ep for _, ep in peers}
        self.now = 0.0
        self.events: list[str] = []

    async def probe(self, endpoint: str) -> None:
        if endpoint not in self.reachable:
            raise ConnectionError(f"{endpoint} does not answer")

    async def isolated(self, why: str) -> None:
        self.events.append(f"isolated: {why}")

    async def rejoined(self) -> None:
        self.events.append("rejoined")

    def watch(self, timeout: float = 3.0) -> isolation.Isolation:
        return isolation.Isolation(
            lambda: self.peers,
            self.probe,
            on_isolated=self.isolated,
            on_rejoined=self.rejoined,
            on_unreachable=lambda ep: self.events.append(f"unreachable {ep}"),
            config=isolation.IsolationConfig(timeout=timeout),
            clock=lambda: self.now,
            rng=random.Random(1),
        )

    async def rounds(self, w: isolation.Isolation, n: int, every: float = 1.0) -> None:
        for _ in range(n):
            await w.round()
            self.now += every


async def test_a_broker_that_loses_every_peer_gives_up_then_rejoins() -> None:
    net = Net()
    w = net.watch()
    await net.rounds(w, 2)
    assert net.events == [] and not w.isolated
    net.reachable.clear()  # The cut, 1 s after the last answer.
    await net.rounds(w, 2)
    assert not w.isolated  # 2 s without an answer: not yet.
    await net.rounds(w, 1)
    assert w.isolated
    assert sorted(net.events[:2]) == ["unreachable http://b:1", "unreachable http://c:1"]
    assert net.events[2].startswith("isolated: no other broker answered for 3.0s")
    assert "--broker.isolation-timeout 3s" in net.events[2]
    await net.rounds(w, 5)  # Still cut: nothing more happens.
    assert len(net.events) == 3
    net.reachable.add("http://c:1")  # The heal: one peer is enough.
    await net.rounds(w, 1)
    assert net.events[3:] == ["rejoined"] and not w.isolated


async def test_one_peer_answering_keeps_the_broker() -> None:
    # A full cut of another broker (or one dead peer) is not our isolation.
    net = Net()
    w = net.watch()
    await net.rounds(w, 1)
    net.reachable.discard("http://b:1")
    await net.rounds(w, 10)
    assert net.events == ["unreachable http://b:1"] and not w.isolated


async def test_a_broker_that_never_heard_a_peer_stays() -> None:
    # The first broker up after every broker was killed: the others' keys linger
    # until their leases expire, and nobody answers yet.
    net = Net()
    net.reachable.clear()
    w = net.watch()
    await net.rounds(w, 10)
    assert not w.isolated
    assert not [e for e in net.events if e.startswith("isolated")]


async def test_with_one_other_broker_a_cut_is_not_told_apart() -> None:
    net = Net(PEERS[:1])
    w = net.watch()
    await net.rounds(w, 1)
    net.reachable.clear()
    await net.rounds(w, 10)
    assert not w.isolated and net.events == []


async def test_a_hanging_probe_is_a_miss_within_its_timeout() -> None:
    net = Net()

    async def hang(_endpoint: str) -> None:
        await asyncio.sleep(3600)

    w = net.watch()
    await net.rounds(w, 1)
    w.probe = hang
    w.config = isolation.IsolationConfig(timeout=3.0, probe_timeout=0.05)
    async with asyncio.timeout(5):
        await net.rounds(w, 4)
    assert w.isolated


async def test_timeout_zero_turns_the_watch_off() -> None:
    net = Net()
    async with asyncio.timeout(1):
        await net.watch(timeout=0).run()  # Returns at once.


async def test_a_peer_whose_host_refuses_counts_as_reachable() -> None:
    # SIGKILLed brokers on reachable hosts: the network works, nobody is cut off.
    ch = dial.channel("http://127.0.0.1:9")  # The discard port: nothing listens.
    try:

        async def refusing(_endpoint: str) -> None:
            call = pb2_grpc.JournalStub(ch).List(pb.ListRequest())
            await call.read()

        net = Net()
        w = net.watch()
        await net.rounds(w, 1)
        w.probe = refusing
        await net.rounds(w, 6)
        assert not w.isolated and net.events == []
        with_error: list[BaseException] = []
        try:
            await refusing("")
        except grpc.aio.AioRpcError as e:
            with_error.append(e)
        assert with_error and isolation.refused(with_error[0])
        assert not isolation.refused(TimeoutError())
    finally:
        await ch.close()
