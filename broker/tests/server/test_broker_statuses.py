"""Every Status a client can provoke (Gazette broker/protocol/protocol.proto), and bad input, on real brokers.

One cluster of four broker processes in two zones (module fixture), a real
etcd and the file:// store. Each test uses journals of its own. Every response
is checked with ``pb.validate``, as Go clients do.
"""

from __future__ import annotations

import asyncio
import hashlib
import pathlib
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from gazette.broker import protocol as pb
from gazette.broker import testing
from gazette.broker.protocol import protocol_pb2_grpc as pb2_grpc
from gazette.keyspace import testing as ks_testing

pytestmark = pytest.mark.integration

MISSING_STORE = "file:///no/such/directory/"


def stub_of(ch: grpc.aio.Channel) -> pb2_grpc.JournalAsyncStub:
    return pb2_grpc.JournalStub(ch)  # type: ignore[return-value]


async def create(
    cluster: testing.BrokerCluster, name: str, *, writable: bool = True, **kw: object
) -> pb.JournalSpec:
    kw.setdefault("stores", [cluster.store_url])
    spec = testing.journal_spec(name, **kw)  # type: ignore[arg-type]
    async with cluster.channel(0) as ch:
        resp = await testing.apply_specs(stub_of(ch), spec)
        pb.validate(resp)
        assert resp.status == pb.OK
        if writable:
            await testing.wait_writable(stub_of(ch), name)
    return spec


async def route_of(stub: pb2_grpc.JournalAsyncStub, journal: str) -> pb.Route:
    req = pb.ListRequest(selector=pb.LabelSelector(include=pb.label_set(name=journal)))
    async for resp in stub.List(req):
        pb.validate(resp)
        assert len(resp.journals) == 1
        return resp.journals[0].route
    raise AssertionError("empty List")


def index_of(cluster: testing.BrokerCluster, member: pb.ProcessSpec.ID) -> int:
    return next(i for i, b in enumerate(cluster.brokers) if b.id == member)


async def head_of(stub: pb2_grpc.JournalAsyncStub, journal: str) -> int:
    _, meta = await testing.read(stub, journal, -1)
    pb.validate(meta[0])
    assert meta[0].status == pb.OFFSET_NOT_YET_AVAILABLE
    return meta[0].offset


async def test_ok_append_and_read_everywhere(cluster: testing.BrokerCluster) -> None:
    await create(cluster, "statuses/ok", replication=3)
    async with cluster.channel(1) as ch:
        resp = await testing.append(stub_of(ch), "statuses/ok", [b"foo", b"bar"])
    pb.validate(resp)
    assert resp.status == pb.OK
    assert (resp.commit.begin, resp.commit.end) == (0, 6)
    assert pb.sha1sum_hex(resp.commit.sum) == hashlib.sha1(b"foobar").hexdigest()
    assert resp.total_chunks == 3 and resp.delayed_chunks == 0
    etcd = resp.header.etcd
    assert etcd.cluster_id and etcd.member_id and etcd.revision > 0 and etcd.raft_term

    for i in range(len(cluster)):  # Members serve it; the others proxy.
        async with cluster.channel(i) as ch:
            content, meta = await testing.read(stub_of(ch), "statuses/ok")
        assert content == b"foobar"
        for m in meta:
            pb.validate(m)
        assert meta[-1].status == pb.OFFSET_NOT_YET_AVAILABLE and meta[-1].offset == 6


async def test_journal_not_found(cluster: testing.BrokerCluster) -> None:
    async with cluster.channel(2) as ch:
        stub = stub_of(ch)
        resp = await testing.append(stub, "statuses/missing", [b"x"])
        pb.validate(resp)
        assert resp.status == pb.JOURNAL_NOT_FOUND
        _, meta = await testing.read(stub, "statuses/missing")
        pb.validate(meta[0])
        assert meta[0].status == pb.JOURNAL_NOT_FOUND
        frags = await stub.ListFragments(pb.FragmentsRequest(journal="statuses/missing"))
        pb.validate(frags)
        assert frags.status == pb.JOURNAL_NOT_FOUND


async def test_not_primary_and_not_member_without_proxy(cluster: testing.BrokerCluster) -> None:
    await create(cluster, "statuses/noproxy", replication=1)
    async with cluster.channel(0) as ch:
        route = await route_of(stub_of(ch), "statuses/noproxy")
    assert len(route.members) == 1 and route.primary == 0
    other = next(i for i, b in enumerate(cluster.brokers) if b.id != route.members[0])
    async with cluster.channel(other) as ch:
        stub = stub_of(ch)
        resp = await testing.append(stub, "statuses/noproxy", [b"x"], do_not_proxy=True)
        pb.validate(resp)
        assert resp.status == pb.NOT_JOURNAL_PRIMARY_BROKER
        assert resp.header.process_id == cluster[other].id
        _, meta = await testing.read(stub, "statuses/noproxy", do_not_proxy=True)
        assert meta[0].status == pb.NOT_JOURNAL_BROKER
        # The same requests, proxied.
        resp = await testing.append(stub, "statuses/noproxy", [b"proxied"])
        assert resp.status == pb.OK
        assert resp.header.process_id == route.members[0]
        content, _ = await testing.read(stub, "statuses/noproxy")
        assert content == b"proxied"


async def test_insufficient_journal_brokers(cluster: testing.BrokerCluster) -> None:
    await create(cluster, "statuses/five", replication=5, writable=False)
    async with cluster.channel(0) as ch:
        stub = stub_of(ch)
        for _ in range(100):
            resp = await testing.append(stub, "statuses/five", [b"x"])
            pb.validate(resp)
            if (
                resp.status == pb.INSUFFICIENT_JOURNAL_BROKERS
                and len(resp.header.route.members) == 4
            ):
                break
            await asyncio.sleep(0.1)
        assert resp.status == pb.INSUFFICIENT_JOURNAL_BROKERS


async def test_offset_not_yet_available_and_blocking_read(cluster: testing.BrokerCluster) -> None:
    await create(cluster, "statuses/block", replication=2)
    async with cluster.channel(3) as ch:
        stub = stub_of(ch)
        content, meta = await testing.read(stub, "statuses/block", -1)
        assert content == b"" and meta[0].status == pb.OFFSET_NOT_YET_AVAILABLE

        async def blocked() -> bytes:
            out = b""
            req = pb.ReadRequest(journal="statuses/block", offset=-1, block=True)
            async for resp in stub.Read(req, timeout=20):
                out += resp.content
                if out:
                    return out
            return out

        reader = asyncio.ensure_future(blocked())
        await asyncio.sleep(0.5)
        assert not reader.done()
        resp = await testing.append(stub, "statuses/block", [b"woken"])
        assert resp.status == pb.OK
        assert await asyncio.wait_for(reader, 20) == b"woken"
        # end_offset bounds a read.
        content, _ = await testing.read(stub, "statuses/block", 1, end_offset=3)
        assert content == b"ok"


async def test_etcd_transaction_failed(cluster: testing.BrokerCluster) -> None:
    spec = await create(cluster, "statuses/txn", writable=False)
    async with cluster.channel(1) as ch:
        resp = await testing.apply_specs(stub_of(ch), spec, expect_mod_revision=0)
        pb.validate(resp)
        assert resp.status == pb.ETCD_TRANSACTION_FAILED
        resp = await testing.apply_specs(stub_of(ch), spec, expect_mod_revision=-1)
        assert resp.status == pb.OK


async def test_not_allowed(cluster: testing.BrokerCluster) -> None:
    await create(cluster, "statuses/rdonly", flags=pb.JournalSpec.O_RDONLY)
    await create(cluster, "statuses/wronly", flags=pb.JournalSpec.O_WRONLY)
    async with cluster.channel(0) as ch:
        stub = stub_of(ch)
        resp = await testing.append(stub, "statuses/rdonly", [b"x"])
        pb.validate(resp)
        assert resp.status == pb.NOT_ALLOWED
        assert (await testing.append(stub, "statuses/rdonly", [])).status == pb.OK
        assert (await testing.append(stub, "statuses/wronly", [b"x"])).status == pb.OK
        _, meta = await testing.read(stub, "statuses/wronly")
        assert meta[0].status == pb.NOT_ALLOWED
        frags = await stub.ListFragments(pb.FragmentsRequest(journal="statuses/wronly"))
        assert frags.status == pb.NOT_ALLOWED
        # Content under a suspend mode that forbids it.
        resp = await testing.append(
            stub, "statuses/wronly", [b"x"], suspend=pb.AppendRequest.SUSPEND_KEEP
        )
        assert resp.status == pb.NOT_ALLOWED


async def test_offsets_index_has_greater_wrong_append_and_reset_head(
    cluster: testing.BrokerCluster,
) -> None:
    name = "statuses/offsets"
    await create(cluster, name, replication=2)
    # Another writer persisted a fragment far ahead (as after a lost spool).
    content = b"ahead"
    frag = pb.Fragment(journal=name, begin=1000, end=1000 + len(content), compression_codec=pb.NONE)
    frag.sum.CopyFrom(pb.sha1sum_from_digest(hashlib.sha1(content).digest()))
    path = pathlib.Path(cluster.file_root) / pb.fragment_path(frag)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)

    async with cluster.channel(2) as ch:
        stub = stub_of(ch)
        for _ in range(100):  # Until the next store listing (1 s refresh) shows it.
            resp = await testing.append(stub, name, [b"x"])
            pb.validate(resp)
            if resp.status != pb.OK:
                break
            await asyncio.sleep(0.1)
        assert resp.status == pb.INDEX_HAS_GREATER_OFFSET
        resp = await testing.append(stub, name, [b"x"], offset=7)
        assert resp.status == pb.WRONG_APPEND_OFFSET
        resp = await testing.append(stub, name, [b"!"], offset=1005)
        assert resp.status == pb.OK, resp
        assert (resp.commit.begin, resp.commit.end) == (1005, 1006)
        # Reads from the journal's start jump to the persisted fragment.
        data, _meta = await testing.read(stub, name, 1000)
        assert data == b"ahead!"


async def test_register_mismatch(cluster: testing.BrokerCluster) -> None:
    name = "statuses/registers"
    await create(cluster, name, replication=2)
    async with cluster.channel(1) as ch:
        stub = stub_of(ch)
        union = pb.label_set(owner="alice")
        resp = await testing.append(stub, name, [b"a"], union_registers=union)
        assert resp.status == pb.OK and resp.registers == union
        check = pb.parse_selector("owner=bob")
        resp = await testing.append(stub, name, [b"b"], check_registers=check)
        pb.validate(resp)
        assert resp.status == pb.REGISTER_MISMATCH and resp.registers == union
        resp = await testing.append(
            stub, name, [b"c"], check_registers=pb.parse_selector("owner=alice")
        )
        assert resp.status == pb.OK
        # Register changes need content.
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await testing.append(stub, name, [], union_registers=union)
        assert "register modification requires non-empty Append" in (exc.value.details() or "")


async def test_suspended_and_resumed(cluster: testing.BrokerCluster) -> None:
    name = "statuses/suspend"
    await create(cluster, name, replication=2)
    async with cluster.channel(0) as ch:
        stub = stub_of(ch)
        resp = await testing.append(stub, name, [], suspend=pb.AppendRequest.SUSPEND_IF_FLUSHED)
        pb.validate(resp)
        assert resp.status == pb.SUSPENDED  # Nothing written: fully suspended.
        _, meta = await testing.read(stub, name)
        assert meta[0].status == pb.SUSPENDED
        resp = await testing.append(stub, name, [], suspend=pb.AppendRequest.SUSPEND_NO_RESUME)
        assert resp.status == pb.SUSPENDED
        # A plain append resumes it (once it is assigned again).
        for _ in range(200):
            resp = await testing.append(stub, name, [b"back"])
            if resp.status == pb.OK:
                break
            await asyncio.sleep(0.1)
        assert resp.status == pb.OK


async def test_fragment_store_unhealthy(cluster: testing.BrokerCluster) -> None:
    # A store that can't even be built (unknown query argument) fails every health
    # check at once. (A store that merely fails its checks makes appends wait for
    # several checks, whose schedule backs off to minutes, as Gazette's does.)
    name, broken = "statuses/unhealthy", "s3://bucket/prefix/?bogus=1"
    await create(cluster, name, writable=False, stores=[broken])
    async with cluster.channel(3) as ch:
        stub = stub_of(ch)
        for _ in range(100):
            resp = await testing.append(stub, name, [b"x"])
            if resp.status not in (pb.NO_JOURNAL_PRIMARY_BROKER, pb.INSUFFICIENT_JOURNAL_BROKERS):
                break
            await asyncio.sleep(0.1)
        pb.validate(resp)
        assert resp.status == pb.FRAGMENT_STORE_UNHEALTHY
        assert resp.store_health_error.startswith(f"fragment store {broken} unhealthy:")

        health = await stub.FragmentStoreHealth(
            pb.FragmentStoreHealthRequest(fragment_store=MISSING_STORE)
        )
        pb.validate(health)
        assert health.status == pb.FRAGMENT_STORE_UNHEALTHY and health.store_health_error
        health = await stub.FragmentStoreHealth(
            pb.FragmentStoreHealthRequest(
                fragment_store=cluster.store_url, check_delete=True, check_delete_prefix="probe/"
            )
        )
        assert health.status == pb.OK, health


async def test_wrong_route(cluster: testing.BrokerCluster) -> None:
    name = "statuses/route"
    await create(cluster, name, replication=2)
    async with cluster.channel(0) as ch:
        _, meta = await testing.read(stub_of(ch), name, -1)
    header = meta[0].header
    member = header.route.members[1 - header.route.primary]
    bogus = pb.Header()
    bogus.CopyFrom(header)
    bogus.process_id.CopyFrom(member)
    del bogus.route.members[header.route.primary]
    del bogus.route.endpoints[:]
    bogus.route.primary = 0
    req = pb.ReplicateRequest(
        header=bogus,
        proposal=pb.Fragment(journal=name, compression_codec=pb.NONE),
        registers=pb.LabelSet(),
        acknowledge=True,
    )
    async with cluster.channel(index_of(cluster, member)) as ch:
        call = stub_of(ch).Replicate()
        await call.write(req)
        resp = await call.read()
        call.cancel()
    pb.validate(resp)
    assert resp.status == pb.WRONG_ROUTE
    assert pb.route_equivalent(resp.header.route, header.route)


async def test_no_journal_primary_broker(
    etcd_server: ks_testing.EtcdServer, tmp_path: pathlib.Path, cluster_factory: Any
) -> None:
    # A broker with no capacity: nothing can be assigned to it.
    with cluster_factory(
        etcd_server, tmp_path, brokers=1, extra_args=("--broker.limit", "0")
    ) as single:
        name = "statuses/unassigned"
        await create(single, name, writable=False)
        async with single.channel(0) as ch:
            resp = await testing.append(stub_of(ch), name, [b"x"])
            pb.validate(resp)
            assert resp.status == pb.NO_JOURNAL_PRIMARY_BROKER
            _, meta = await testing.read(stub_of(ch), name)
            assert meta[0].status == pb.INSUFFICIENT_JOURNAL_BROKERS


# -- Bad input ----------------------------------------------------------------------------


async def test_malformed_requests_change_nothing(cluster: testing.BrokerCluster) -> None:
    name = "badinput/malformed"
    await create(cluster, name, replication=2)
    async with cluster.channel(1) as ch:
        stub = stub_of(ch)
        assert (await testing.append(stub, name, [b"base"])).status == pb.OK

        async def rpc_error(aw: object) -> grpc.aio.AioRpcError:
            with pytest.raises(grpc.aio.AioRpcError) as exc:
                await aw  # type: ignore[misc]
            return exc.value

        e = await rpc_error(testing.read(stub, "bad//name"))
        assert e.code() == grpc.StatusCode.UNKNOWN
        assert e.details() == "Journal: must be a clean path (bad//name)"
        e = await rpc_error(testing.read(stub, name, -2))
        assert "invalid Offset (-2" in (e.details() or "")

        async def content_first() -> AsyncIterator[pb.AppendRequest]:
            yield pb.AppendRequest(journal=name, content=b"nope")

        e = await rpc_error(stub.Append(content_first()))
        assert e.code() == grpc.StatusCode.UNKNOWN

        async def journal_twice() -> AsyncIterator[pb.AppendRequest]:
            yield pb.AppendRequest(journal=name)
            yield pb.AppendRequest(content=b"partial")
            yield pb.AppendRequest(journal=name)

        e = await rpc_error(stub.Append(journal_twice()))
        assert e.details() == "append stream: expected Content chunk"
        e = await rpc_error(testing.append(stub, name, [b"no commit"], commit=False))
        assert e.details() == "append stream: unexpected EOF"

        bad_spec = testing.journal_spec("badinput/spec", replication=0)
        e = await rpc_error(testing.apply_specs(stub, bad_spec))
        assert "invalid Replication (0" in (e.details() or "")
        e = await rpc_error(
            anext(aiter(stub.List(pb.ListRequest(selector=pb.parse_selector("prefix=no-slash")))))
        )
        assert "expected trailing '/'" in (e.details() or "")

        assert await head_of(stub, name) == 4
        content, _ = await testing.read(stub, name)
        assert content == b"base"


async def test_oversized_append_changes_nothing(cluster: testing.BrokerCluster) -> None:
    name = "badinput/oversized"
    await create(cluster, name)
    async with cluster.channel(2) as ch:
        stub = stub_of(ch)

        async def oversized() -> AsyncIterator[pb.AppendRequest]:
            yield pb.AppendRequest(journal=name)
            yield pb.AppendRequest(content=b"x" * 1024)
            yield pb.AppendRequest(content=b"y" * (5 << 20))  # > --broker.max-grpc-recv-size
            await asyncio.sleep(30)  # Don't race the broker's verdict with more sends.

        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await stub.Append(oversized(), timeout=20)
        assert exc.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, exc.value
        assert await head_of(stub, name) == 0
        resp = await testing.append(stub, name, [b"after"])
        assert (resp.status, resp.commit.begin) == (pb.OK, 0)


async def test_client_disconnect_mid_append(cluster: testing.BrokerCluster) -> None:
    name = "badinput/disconnect"
    await create(cluster, name, replication=3)
    async with cluster.channel(0) as ch:
        stub = stub_of(ch)
        assert (await testing.append(stub, name, [b"before|"])).status == pb.OK

        sent = asyncio.Event()

        async def requests() -> AsyncIterator[pb.AppendRequest]:
            yield pb.AppendRequest(journal=name)
            for _ in range(8):
                yield pb.AppendRequest(content=b"partial" * 1000)
            sent.set()
            await asyncio.sleep(3600)

        call = stub.Append(requests())
        await asyncio.wait_for(sent.wait(), 10)
        await asyncio.sleep(0.3)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call

        # Nothing of it is visible, and the journal takes the next append at once.
        assert await head_of(stub, name) == 7
        resp = await testing.append(stub, name, [b"after"])
        assert (resp.status, resp.commit.begin, resp.commit.end) == (pb.OK, 7, 12)
        for i in range(len(cluster)):
            async with cluster.channel(i) as ch2:
                content, _ = await testing.read(stub_of(ch2), name)
            assert content == b"before|after"


async def test_list_watch_and_list_fragments(cluster: testing.BrokerCluster) -> None:
    await create(cluster, "listing/one", labels=[("topic", "t")])
    async with cluster.channel(0) as ch:
        stub = stub_of(ch)
        sel = pb.parse_selector("prefix=listing/")
        call = stub.List(pb.ListRequest(selector=sel, watch=True))
        first = await call.read()
        pb.validate(first)
        assert [j.spec.name for j in first.journals] == ["listing/one"]
        assert (await call.read()).journals == []  # End of snapshot.
        await create(cluster, "listing/two", writable=False)
        nxt = await asyncio.wait_for(call.read(), 20)
        assert [j.spec.name for j in nxt.journals] == ["listing/one", "listing/two"]
        call.cancel()

        for i in range(3):
            r = await testing.append(stub, "listing/one", [bytes([65 + i]) * 2000])
            assert r.status == pb.OK
        resp = await stub.ListFragments(
            pb.FragmentsRequest(
                journal="listing/one", page_limit=1, signatureTTL=pb.duration_from_seconds(60)
            )
        )
        pb.validate(resp)
        assert resp.status == pb.OK and len(resp.fragments) == 1
        assert resp.next_page_token == resp.fragments[0].spec.end
