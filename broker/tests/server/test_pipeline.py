"""The replication pipeline against in-process peers (grpc.aio servers on loopback).

Each peer serves ``Replicate`` by applying requests to a real
``fragment.Spool``, as a replica broker does, or answers scripted statuses.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest

from gazette.broker import protocol as pb
from gazette.broker.fragment import spool
from gazette.broker.protocol import protocol_pb2_grpc as pb2_grpc
from gazette.broker.server import errors, pipeline

JOURNAL = "a/journal"
PRIMARY = pb.ProcessSpec.ID(zone="a", suffix="primary")


class NullObserver:
    def __init__(self) -> None:
        self.commits: list[Any] = []
        self.completed: list[spool.Spool] = []

    def spool_commit(self, fragment: Any) -> None:
        self.commits.append(fragment)

    def spool_complete(self, sp: spool.Spool, primary: bool) -> None:
        self.completed.append(sp)


Script = Callable[[pb.ReplicateRequest], pb.ReplicateResponse | None]


class Peer(pb2_grpc.JournalServicer):
    """A replica: applies requests to its spool; ``script`` may answer instead."""

    def __init__(self, suffix: str, tmp: str) -> None:
        self.id = pb.ProcessSpec.ID(zone="b", suffix=suffix)
        self.spool = spool.Spool(JOURNAL, NullObserver(), config=spool.SpoolConfig(directory=tmp))
        self.script: Script | None = None
        self.headers: list[pb.Header] = []
        self.server: grpc.aio.Server | None = None
        self.endpoint = ""

    async def Replicate(
        self, request_iterator: AsyncIterator[pb.ReplicateRequest], context: Any
    ) -> None:  # type: ignore[override]
        async for req in request_iterator:
            if req.HasField("header"):
                self.headers.append(req.header)
            resp = self.script(req) if self.script is not None else None
            if resp is None:
                resp = await self.spool.apply(req)
            if req.acknowledge:
                await context.write(resp)

    async def start(self) -> None:
        self.server = grpc.aio.server()
        pb2_grpc.add_JournalServicer_to_server(self, self.server)
        port = self.server.add_insecure_port("127.0.0.1:0")
        await self.server.start()
        self.endpoint = f"http://127.0.0.1:{port}"


@pytest.fixture
async def peers(tmp_path: Any) -> AsyncIterator[list[Peer]]:
    ps = [Peer("peer-one", str(tmp_path)), Peer("peer-two", str(tmp_path))]
    for p in ps:
        await p.start()
    yield ps
    for p in ps:
        assert p.server is not None
        await p.server.stop(None)


async def make_pipeline(
    peers: list[Peer], tmp: str, *, peer_timeout: float = pipeline.REPLICATION_TIMEOUT
) -> tuple[pipeline.Pipeline, spool.Spool, list[Any]]:
    header = pb.Header()
    header.process_id.CopyFrom(PRIMARY)
    header.route.members.extend([PRIMARY, *(p.id for p in peers)])
    header.route.endpoints.extend(["http://unused:1", *(p.endpoint for p in peers)])
    header.route.primary = 0
    header.etcd.CopyFrom(pb.Header.Etcd(cluster_id=1, member_id=2, revision=10, raft_term=3))
    local = spool.Spool(JOURNAL, NullObserver(), config=spool.SpoolConfig(directory=tmp))
    channels: list[grpc.aio.Channel] = []

    def stub_for(_member: pb.ProcessSpec.ID, endpoint: str) -> Any:
        ch = grpc.aio.insecure_channel(pb.endpoint_grpc_addr(endpoint))
        channels.append(ch)
        return pb2_grpc.JournalStub(ch)

    returned: list[Any] = []
    pln = pipeline.Pipeline(header, local, returned.append, stub_for, timeout=peer_timeout)
    pln.channels = channels  # type: ignore[attr-defined]
    return pln, local, returned


def sync_request(pln: pipeline.Pipeline, proposal: pb.Fragment) -> pb.ReplicateRequest:
    req = pb.ReplicateRequest(proposal=proposal, registers=pb.LabelSet(), acknowledge=True)
    req.header.CopyFrom(pln.header)
    return req


async def close(pln: pipeline.Pipeline, *, abort: bool = False) -> None:
    if abort:
        await pln.abort()
    else:
        await pln.shutdown(False)
    for ch in pln.channels:  # type: ignore[attr-defined]
        await ch.close()


async def test_sync_then_pipelined_commits(peers: list[Peer], tmp_path: Any) -> None:
    pln, local, returned = await make_pipeline(peers, str(tmp_path))
    await pln.scatter(sync_request(pln, pb.Fragment(journal=JOURNAL, compression_codec=pb.NONE)))
    assert await pln.gather_sync() == (0, None, 0)
    assert pln.send_err() is None and pln.recv_err() is None
    # Each peer saw the header addressed to itself.
    assert [p.headers[0].process_id for p in peers] == [p.id for p in peers]

    # Two appends, pipelined: the second sends before the first reads its acks.
    barriers = []
    for text in (b"hello ", b"world"):
        await pln.scatter(pb.ReplicateRequest(content=text, content_delta=0))
        commit = local.next()
        await pln.scatter(
            pb.ReplicateRequest(proposal=commit, registers=pb.LabelSet(), acknowledge=True)
        )
        barriers.append(pln.barrier())
    for wait_for, close_after in barriers:
        await wait_for
        await pln.gather_ok()
        close_after.set_result(None)
    assert pln.recv_err() is None
    assert local.spec.end == 11
    assert pb.sha1sum_to_digest(local.spec.sum) == hashlib.sha1(b"hello world").digest()
    for p in peers:
        assert p.spool.spec == local.spec
    await close(pln)
    assert returned == [local]  # The spool went back to its replica.


async def test_gather_sync_rolls_to_a_peer_further_ahead(peers: list[Peer], tmp_path: Any) -> None:
    pln, _local, _ = await make_pipeline(peers, str(tmp_path))
    regs = pb.label_set(owner="peer")
    ahead = pb.Fragment(journal=JOURNAL, begin=0, end=500, compression_codec=pb.NONE)

    def mismatch(req: pb.ReplicateRequest) -> pb.ReplicateResponse:
        return pb.ReplicateResponse(status=pb.PROPOSAL_MISMATCH, fragment=ahead, registers=regs)

    peers[1].script = mismatch
    await pln.scatter(sync_request(pln, pb.Fragment(journal=JOURNAL, compression_codec=pb.NONE)))
    roll_to, roll_regs, read_through = await pln.gather_sync()
    assert (roll_to, roll_regs, read_through) == (500, regs, 0)
    assert pln.recv_err() is None
    await close(pln)


async def test_gather_sync_wrong_route(peers: list[Peer], tmp_path: Any) -> None:
    pln, _local, _ = await make_pipeline(peers, str(tmp_path))
    newer = pb.Header()
    newer.CopyFrom(pln.header)
    newer.etcd.revision = 42
    del newer.route.members[2]
    del newer.route.endpoints[:]
    peers[1].script = lambda req: pb.ReplicateResponse(status=pb.WRONG_ROUTE, header=newer)
    await pln.scatter(sync_request(pln, pb.Fragment(journal=JOURNAL, compression_codec=pb.NONE)))
    assert await pln.gather_sync() == (0, None, 42)
    await close(pln)

    # The same route at an older revision is a protocol error.
    pln, _local, _ = await make_pipeline(peers, str(tmp_path))
    same = pb.Header()
    same.CopyFrom(pln.header)
    peers[1].script = lambda req: pb.ReplicateResponse(status=pb.WRONG_ROUTE, header=same)
    await pln.scatter(sync_request(pln, pb.Fragment(journal=JOURNAL, compression_codec=pb.NONE)))
    await pln.gather_sync()
    assert "unexpected WRONG_ROUTE" in str(pln.recv_err())
    await close(pln, abort=True)


async def test_a_dead_peer_fails_the_pipeline(peers: list[Peer], tmp_path: Any) -> None:
    pln, local, returned = await make_pipeline(peers, str(tmp_path))
    await pln.scatter(sync_request(pln, pb.Fragment(journal=JOURNAL, compression_codec=pb.NONE)))
    await pln.gather_sync()
    assert peers[0].server is not None
    await peers[0].server.stop(None)
    await pln.scatter(pb.ReplicateRequest(content=b"lost", content_delta=0))
    await pln.scatter(
        pb.ReplicateRequest(proposal=local.next(), registers=pb.LabelSet(), acknowledge=True)
    )
    await pln.gather_ok()
    err = pln.recv_err() or pln.send_err()
    assert err is not None and "peer-one" in str(err)
    await close(pln, abort=True)
    # The primary's own spool committed (peers catch up at the next sync) and went back.
    assert returned == [local] and local.spec.end == 4


async def test_a_peer_that_ended_its_stream_is_noted_before_the_commit(
    peers: list[Peer], tmp_path: Any
) -> None:
    pln, _local, _ = await make_pipeline(peers, str(tmp_path))
    await pln.scatter(sync_request(pln, pb.Fragment(journal=JOURNAL, compression_codec=pb.NONE)))
    await pln.gather_sync()

    def stalled(req: pb.ReplicateRequest) -> None:
        if req.content:
            raise RuntimeError("spool directory is stalled")

    peers[0].script = stalled
    await pln.scatter(pb.ReplicateRequest(content=b"abc", content_delta=0))
    async with asyncio.timeout(5):
        await pln._streams[1].code()  # The peer's stream has ended.
    await pln.note_ended_peers()
    err = pln.failure()
    assert err is not None and "peer-one" in str(err), err
    assert "stalled" in str(err), err
    # Whether a commit went out is each append's to say, not the pipeline's (an append
    # whose commit went out before the peer ended reads this same error).
    assert errors.NOT_COMMITTED not in str(err), err
    await close(pln, abort=True)


async def _commit_to_a_silent_peer(pln: pipeline.Pipeline, local: Any, peer: Peer) -> asyncio.Event:
    """Make ``peer`` answer no proposal until the returned event is set; send a commit."""
    silent = asyncio.Event()
    original = peer.spool.apply

    async def never(req: pb.ReplicateRequest, **_: Any) -> pb.ReplicateResponse:
        await silent.wait()
        return await original(req)

    peer.spool.apply = never  # type: ignore[method-assign]
    await pln.scatter(pb.ReplicateRequest(content=b"data", content_delta=0))
    await pln.scatter(
        pb.ReplicateRequest(proposal=local.next(), registers=pb.LabelSet(), acknowledge=True)
    )
    return silent


async def test_a_peer_that_never_answers_fails_the_pipeline_in_bounded_time(
    peers: list[Peer], tmp_path: Any
) -> None:
    # A peer behind a network partition neither answers nor fails: the pipeline
    # gives up on it after its timeout instead of waiting for TCP to.
    pln, local, returned = await make_pipeline(peers, str(tmp_path), peer_timeout=0.5)
    await pln.scatter(sync_request(pln, pb.Fragment(journal=JOURNAL, compression_codec=pb.NONE)))
    await pln.gather_sync()
    assert pln.recv_err() is None
    # Peer-two's stream goes silent: it answers no proposal from now on.
    silent = await _commit_to_a_silent_peer(pln, local, peers[1])
    loop = asyncio.get_running_loop()
    started = loop.time()
    await pln.gather_ok()
    took = loop.time() - started
    err = pln.recv_err()
    assert err is not None and "peer-two" in str(err) and "no answer for 0.5s" in str(err)
    assert took < 3.0, took
    silent.set()
    await close(pln, abort=True)
    assert returned == [local]


async def test_a_peer_that_left_the_route_is_not_waited_on(
    peers: list[Peer], tmp_path: Any
) -> None:
    # The route lost a silent peer (etcd gave its lease up): the append waiting on
    # its answer fails at once, naming why, instead of at the pipeline's timeout.
    pln, local, returned = await make_pipeline(peers, str(tmp_path), peer_timeout=60.0)
    await pln.scatter(sync_request(pln, pb.Fragment(journal=JOURNAL, compression_codec=pb.NONE)))
    await pln.gather_sync()
    silent = await _commit_to_a_silent_peer(pln, local, peers[1])
    loop = asyncio.get_running_loop()
    gathering = asyncio.create_task(pln.gather_ok())
    await asyncio.sleep(0.2)
    assert not gathering.done()
    started = loop.time()
    pln.interrupt("zone/peer-two left the route of a/journal")
    await gathering
    assert loop.time() - started < 1.0
    err = pln.recv_err()
    assert err is not None and "left the route" in str(err)
    # Nothing more is waited on either: a later write or read fails the same way.
    await pln.scatter(pb.ReplicateRequest(content=b"more", content_delta=4))
    silent.set()
    await close(pln, abort=True)
    assert returned == [local]
