"""Serving reads in large chunks: from spools and persisted fragments, at any offsets.

The unit tests drive :mod:`gazette.broker.server.read_api`'s chunking and
read-ahead directly; the integration tests read multi-MiB journals through a
real cluster, from spool files and from the file store (GZIP and NONE), and
check every response's size and the bytes at odd offsets.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator

import pytest

from gazette.broker import protocol as pb
from gazette.broker import testing
from gazette.broker.protocol import protocol_pb2_grpc as pb2_grpc
from gazette.broker.server import read_api

CHUNK = read_api.READ_CHUNK_SIZE


# -- Unit: pieces and read-ahead ---------------------------------------------------------


def test_a_chunk_that_fits_is_sent_as_it_is() -> None:
    data = b"x" * CHUNK
    (piece,) = read_api._pieces(data, CHUNK * 2)
    assert piece is data  # No copy.


def test_a_large_chunk_is_cut_to_the_room_left_and_the_response_size() -> None:
    data = bytes(range(256)) * ((CHUNK * 3) // 256)
    pieces = read_api._pieces(data, CHUNK * 2 + 5)
    assert [len(p) for p in pieces] == [CHUNK, CHUNK, 5]
    assert b"".join(pieces) == data[: CHUNK * 2 + 5]
    assert read_api._pieces(b"abcdef", 2) == [b"ab"]


async def test_read_ahead_yields_everything_in_order() -> None:
    async def gen() -> AsyncIterator[bytes]:
        for i in range(5):
            await asyncio.sleep(0)
            yield b"%d" % i

    assert [c async for c in read_api._read_ahead(gen())] == [b"0", b"1", b"2", b"3", b"4"]


async def test_read_ahead_fetches_the_next_chunk_while_the_caller_works() -> None:
    fetched: list[int] = []

    async def gen() -> AsyncIterator[bytes]:
        for i in range(3):
            fetched.append(i)
            yield b"%d" % i

    ahead = read_api._read_ahead(gen())
    assert await anext(ahead) == b"0"
    await asyncio.sleep(0.01)  # The caller is busy: the next fetch already ran.
    assert fetched == [0, 1]
    await ahead.aclose()


async def test_closing_read_ahead_cancels_the_fetch_and_closes_the_source() -> None:
    closed = asyncio.Event()
    started = asyncio.Event()

    async def gen() -> AsyncIterator[bytes]:
        try:
            yield b"first"
            started.set()
            await asyncio.sleep(3600)  # A fetch that never finishes.
            yield b"never"
        finally:
            closed.set()

    ahead = read_api._read_ahead(gen())
    assert await anext(ahead) == b"first"
    await asyncio.wait_for(started.wait(), 5)
    await asyncio.wait_for(ahead.aclose(), 5)
    assert closed.is_set()


async def test_read_ahead_raises_what_the_source_raised() -> None:
    async def gen() -> AsyncIterator[bytes]:
        yield b"ok"
        raise OSError("disk gone")

    got = []
    with pytest.raises(OSError, match="disk gone"):
        async for c in read_api._read_ahead(gen()):
            got.append(c)
    assert got == [b"ok"]


# -- Integration: multi-MiB reads through a cluster ------------------------------------


def _content(n: int, seed: int) -> bytes:
    """Compressible but not trivial text."""
    rnd = random.Random(seed)
    words = [b"alpha", b"beta", b"gamma", b"delta", rnd.randbytes(8).hex().encode()]
    out = bytearray()
    while len(out) < n:
        out += b" ".join(rnd.choice(words) for _ in range(12)) + b"\n"
    return bytes(out[:n])


async def _read(
    stub: pb2_grpc.JournalAsyncStub, journal: str, offset: int, end_offset: int = 0
) -> tuple[bytes, list[pb.ReadResponse], list[int]]:
    """(content, metadata responses, each content response's size)."""
    req = pb.ReadRequest(journal=journal, offset=offset, end_offset=end_offset)
    parts, meta, sizes = [], [], []
    at = offset
    async for resp in stub.Read(req, timeout=60):
        if resp.content:
            assert resp.offset == at, (resp.offset, at)
            parts.append(resp.content)
            sizes.append(len(resp.content))
            at += len(resp.content)
        else:
            meta.append(resp)
    return b"".join(parts), meta, sizes


async def _append_all(stub: pb2_grpc.JournalAsyncStub, journal: str, data: bytes) -> None:
    step = 1 << 20
    for i in range(0, len(data), step):
        resp = await testing.append(stub, journal, [data[i : i + step]])
        assert resp.status == pb.OK, resp


def _check_sizes(sizes: list[int]) -> None:
    assert sizes and max(sizes) <= CHUNK, sizes
    assert sizes.count(CHUNK) >= 2, sizes  # Large responses, not 32 KiB ones.


@pytest.mark.integration
@pytest.mark.parametrize("codec", [pb.NONE, pb.GZIP], ids=["none", "gzip"])
async def test_large_reads_from_persisted_fragments(
    cluster: testing.BrokerCluster, codec: int
) -> None:
    name = f"read-api/persisted-{pb.CompressionCodec.Name(codec).lower()}"
    data = _content(5 * (1 << 20) + 12345, seed=codec)
    spec = testing.journal_spec(
        name, replication=2, stores=[cluster.store_url], codec=codec, length=1 << 20
    )
    async with cluster.channel(0) as ch:
        stub: pb2_grpc.JournalAsyncStub = pb2_grpc.JournalStub(ch)  # type: ignore[assignment]
        assert (await testing.apply_specs(stub, spec)).status == pb.OK
        await testing.wait_writable(stub, name)
        await _append_all(stub, name, data)
        # Every append but the last rolled its fragment, which the primary persisted.
        persisted_end = len(data) - (len(data) % (1 << 20) or (1 << 20))
        for _ in range(200):
            _, meta, _ = await _read(stub, name, 0, end_offset=persisted_end)
            if meta and all(m.fragment.backing_store and m.fragment.mod_time for m in meta):
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError(f"{name} not served from the store: {meta}")

        got, meta, sizes = await _read(stub, name, 0)
        assert got == data
        _check_sizes(sizes)
        assert any(m.fragment.mod_time for m in meta)
        # Odd offsets: inside one persisted fragment to inside the next, and to the spool.
        for lo, hi in ((1_000_001, 2_500_003), (3, 77), (persisted_end - 9, 0)):
            got, _, _ = await _read(stub, name, lo, end_offset=hi)
            assert got == data[lo : hi or None], (lo, hi)


@pytest.mark.integration
async def test_large_reads_from_a_spool(cluster: testing.BrokerCluster) -> None:
    name = "read-api/spool"
    data = _content(3 * (1 << 20) + 999, seed=3)
    spec = testing.journal_spec(name, replication=2, codec=pb.GZIP, length=1 << 30)
    async with cluster.channel(1) as ch:
        stub: pb2_grpc.JournalAsyncStub = pb2_grpc.JournalStub(ch)  # type: ignore[assignment]
        assert (await testing.apply_specs(stub, spec)).status == pb.OK
        await testing.wait_writable(stub, name)
        await _append_all(stub, name, data)
        got, meta, sizes = await _read(stub, name, 0)
        assert got == data
        _check_sizes(sizes)
        assert all(not m.fragment.backing_store for m in meta)  # Served from the spool.
        got, _, _ = await _read(stub, name, CHUNK - 1, end_offset=2 * CHUNK + 1)
        assert got == data[CHUNK - 1 : 2 * CHUNK + 1]


@pytest.mark.integration
async def test_a_read_cancelled_mid_stream_leaves_the_broker_serving(
    cluster: testing.BrokerCluster,
) -> None:
    name = "read-api/cancelled"
    data = _content(4 << 20, seed=4)
    spec = testing.journal_spec(name, replication=1, length=1 << 30)
    async with cluster.channel(0) as ch:
        stub: pb2_grpc.JournalAsyncStub = pb2_grpc.JournalStub(ch)  # type: ignore[assignment]
        assert (await testing.apply_specs(stub, spec)).status == pb.OK
        await testing.wait_writable(stub, name)
        await _append_all(stub, name, data)
        call = stub.Read(pb.ReadRequest(journal=name, offset=0), timeout=60)
        async for resp in call:
            if resp.content:
                break  # One chunk, then walk away.
        call.cancel()
        got, _, _ = await _read(stub, name, 0)
        assert got == data
