"""Bad input a tester threw at a running cluster: each gets a clear, Gazette-style error.

One module cluster of three broker processes over the session's etcd. Each
test uses journals of its own, checks the error the client sees (a gRPC code
with a short message, never a Python repr), that the broker is unharmed (the
journal takes the next append), and that the brokers logged no unretrieved
task exception or unhandled RPC exception meanwhile.
"""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import AsyncIterator, Iterator

import grpc
import pytest

from gazette.broker import protocol as pb
from gazette.broker import testing
from gazette.broker.protocol import protocol_pb2_grpc as pb2_grpc
from gazette.keyspace import testing as ks_testing

pytestmark = pytest.mark.integration

# What asyncio and grpc log when a task's or a handler's failure escapes us.
UNHANDLED = ("Task exception was never retrieved", "Exception not handled by _handle_exceptions")


@pytest.fixture(scope="module")
def cluster(
    etcd_server: ks_testing.EtcdServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[testing.BrokerCluster]:
    with testing.running_cluster(
        etcd_server.endpoint, tmp_path_factory.mktemp("bad-input"), brokers=3
    ) as c:
        yield c


@pytest.fixture
def clean_logs(cluster: testing.BrokerCluster) -> Iterator[None]:
    """Fails the test if a broker logged an unhandled exception while it ran."""
    marks = {b.log_path: b.log_path.stat().st_size for b in cluster.brokers}
    yield
    for path, mark in marks.items():
        with path.open("rb") as f:
            f.seek(mark)
            text = f.read().decode(errors="replace")
        for needle in UNHANDLED:
            assert needle not in text, f"{pathlib.Path(path).parent.name}:\n{text}"


def stub_of(ch: grpc.aio.Channel) -> pb2_grpc.JournalAsyncStub:
    return pb2_grpc.JournalStub(ch)  # type: ignore[return-value]


async def create(cluster: testing.BrokerCluster, name: str, replication: int = 2) -> None:
    spec = testing.journal_spec(name, replication=replication, stores=[cluster.store_url])
    async with cluster.channel(0) as ch:
        resp = await testing.apply_specs(stub_of(ch), spec)
        assert resp.status == pb.OK
        await testing.wait_writable(stub_of(ch), name)


async def route_of(stub: pb2_grpc.JournalAsyncStub, journal: str) -> pb.Header:
    _, meta = await testing.read(stub, journal, -1)
    return meta[0].header


def index_of(cluster: testing.BrokerCluster, member: pb.ProcessSpec.ID) -> int:
    return next(i for i, b in enumerate(cluster.brokers) if b.id == member)


async def rpc_error(aw: object) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await aw  # type: ignore[misc]
    return exc.value


def assert_no_repr(e: grpc.aio.AioRpcError) -> None:
    details = e.details() or ""
    assert "<" not in details and "StatusCode." not in details, details


# -- 1. Oversized content chunks ------------------------------------------------------------


@pytest.mark.parametrize("via", ["primary", "replica", "non-member"])
async def test_oversized_chunk_is_resource_exhausted(
    cluster: testing.BrokerCluster, clean_logs: None, via: str
) -> None:
    # A 5 MB chunk (over the default --broker.max-grpc-recv-size of 4 MiB), sent
    # straight after the first message to a fresh connection: grpc core used to
    # reset the stream while the client still wrote it, and Python clients then
    # reported their own "INTERNAL: Internal error from Core".
    name = f"badinput/oversized-{via}"
    await create(cluster, name)
    async with cluster.channel(0) as ch:
        header = await route_of(stub_of(ch), name)
    route = header.route
    members = [index_of(cluster, m) for m in route.members]
    primary = members[route.primary]
    target = {
        "primary": primary,
        "replica": next(i for i in members if i != primary),
        "non-member": next(i for i in range(len(cluster)) if i not in members),
    }[via]
    async with cluster.channel(target) as ch:
        stub = stub_of(ch)

        async def oversized() -> AsyncIterator[pb.AppendRequest]:
            yield pb.AppendRequest(journal=name)
            yield pb.AppendRequest(content=b"y" * (5 << 20))
            yield pb.AppendRequest()

        e = await rpc_error(stub.Append(oversized(), timeout=30))
        assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, e
        assert "--broker.max-grpc-recv-size" in (e.details() or ""), e
        assert_no_repr(e)

        # Unharmed: nothing was committed, and the next append goes through.
        resp = await testing.append(stub, name, [b"after"])
        assert (resp.status, resp.commit.begin, resp.commit.end) == (pb.OK, 0, 5)


async def test_chunk_at_the_limit_replicates(
    cluster: testing.BrokerCluster, clean_logs: None
) -> None:
    # The largest AppendRequest the broker accepts becomes a Replicate message a
    # few bytes larger (it adds content_delta): peers must take it.
    name = "badinput/at-limit"
    await create(cluster, name, replication=3)
    chunk = b"z" * ((4 << 20) - 5)
    assert pb.AppendRequest(content=chunk).ByteSize() == 4 << 20
    async with cluster.channel(1) as ch:
        resp = await testing.append(stub_of(ch), name, [b"a", chunk])
        assert resp.status == pb.OK, resp
        assert resp.commit.end == len(chunk) + 1


# -- 2. An append that names no journal -----------------------------------------------------


async def test_append_without_journal_is_rejected_like_read(
    cluster: testing.BrokerCluster, clean_logs: None
) -> None:
    async with cluster.channel(1) as ch:
        stub = stub_of(ch)
        read_err = await rpc_error(testing.read(stub, ""))
        append_err = await rpc_error(testing.append(stub, "", [b"x"]))
    assert append_err.code() == read_err.code() == grpc.StatusCode.UNKNOWN
    assert append_err.details() == read_err.details()
    assert append_err.details() == "Journal: invalid length (0; expected 4 <= length <= 512)"


# -- 3. An Apply larger than one etcd transaction -------------------------------------------


async def test_apply_of_too_many_changes_names_the_limit(
    cluster: testing.BrokerCluster, clean_logs: None
) -> None:
    specs = [testing.journal_spec(f"badinput/many/{i:04d}") for i in range(2000)]
    async with cluster.channel(2) as ch:
        stub = stub_of(ch)
        e = await rpc_error(testing.apply_specs(stub, *specs))
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, e
        details = e.details() or ""
        assert "2000 changes" in details and "--max-txn-ops" in details, details
        assert_no_repr(e)
        # Atomic: none of them was created.
        req = pb.ListRequest(selector=pb.parse_selector("prefix=badinput/many/"))
        async for resp in stub.List(req):
            assert not resp.journals


# -- 4. Messages that don't decode --------------------------------------------------------


READ = pb.ReadRequest(journal="badinput/x", offset=0).SerializeToString()
NOT_UTF8_JOURNAL = b"\x12\x02\xff\xfe"  # Field 2 (the journal, of either request) as 0xfffe.


@pytest.mark.parametrize(
    ("rpc", "wire", "names"),
    [
        ("ListFragments", bytes(range(256)) + bytes(range(44)), "failed to decode"),
        ("ListFragments", b"\x08\xff", "failed to decode"),
        ("Read", READ + NOT_UTF8_JOURNAL, "ReadRequest.journal"),
    ],
)
async def test_a_message_that_does_not_decode_is_invalid_argument(
    cluster: testing.BrokerCluster, clean_logs: None, rpc: str, wire: bytes, names: str
) -> None:
    async with cluster.channel(1) as ch:
        call = ch.unary_stream if rpc == "Read" else ch.unary_unary
        method = call(f"/protocol.Journal/{rpc}", request_serializer=lambda b: b)
        err = await rpc_error(_drain(method(wire, timeout=10)))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err
    assert err.details().startswith("malformed request message: "), err.details()
    assert names in err.details()


async def _drain(call: object) -> None:
    if hasattr(call, "__aiter__"):
        async for _ in call:  # type: ignore[attr-defined]
            pass
    else:
        await call  # type: ignore[misc]


async def test_a_proxied_append_with_a_corrupt_message_fails_at_once(
    cluster: testing.BrokerCluster, clean_logs: None
) -> None:
    # A valid first message, then one that doesn't decode, sent to a broker that
    # proxies to the primary: answered as fast as the primary itself would.
    name = "badinput/corrupt-proxied"
    await create(cluster, name, replication=1)
    async with cluster.channel(0) as ch:
        header = await route_of(stub_of(ch), name)
    primary = index_of(cluster, header.route.members[header.route.primary])
    proxy = (primary + 1) % len(cluster.brokers)

    async def requests() -> AsyncIterator[bytes]:
        yield pb.AppendRequest(journal=name).SerializeToString()
        yield NOT_UTF8_JOURNAL

    loop = asyncio.get_running_loop()
    async with cluster.channel(proxy) as ch:
        method = ch.stream_unary("/protocol.Journal/Append", request_serializer=lambda b: b)
        started = loop.time()
        err = await rpc_error(method(requests(), timeout=30))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err
    assert "AppendRequest.journal" in err.details()
    assert loop.time() - started < 5
    async with cluster.channel(proxy) as ch:
        resp = await testing.append(stub_of(ch), name, [b"after"])
    assert resp.status == pb.OK


# -- 5. Cancelled streams leave no unhandled exception behind --------------------------------


async def test_cancelled_appends_log_nothing_unhandled(
    cluster: testing.BrokerCluster, clean_logs: None
) -> None:
    # The primary tears its pipeline down: every peer's Replicate stream is cancelled.
    name = "badinput/append-cancel"
    await create(cluster, name, replication=3)
    for i in range(len(cluster)):  # Each broker is the primary or proxies to it.
        async with cluster.channel(i) as ch:
            stub = stub_of(ch)
            sent = asyncio.Event()

            async def requests(sent: asyncio.Event) -> AsyncIterator[pb.AppendRequest]:
                yield pb.AppendRequest(journal=name)
                for _ in range(4):
                    yield pb.AppendRequest(content=b"partial" * 1000)
                sent.set()
                await asyncio.sleep(3600)

            call = stub.Append(requests(sent))
            await asyncio.wait_for(sent.wait(), 10)
            await asyncio.sleep(0.2)
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
    await asyncio.sleep(0.5)
    async with cluster.channel(0) as ch:
        resp = await testing.append(stub_of(ch), name, [b"after"])
        assert (resp.status, resp.commit.begin) == (pb.OK, 0)
