"""Serving reads in large chunks: from spools and persisted fragments, at any offsets.

Multi-MiB journals read through a real cluster (the data plane serves Read), from
spool files and from the file store (GZIP and NONE), checking every response's size
and the bytes at odd offsets. (The chunking itself is tested in Rust:
broker/dataplane/core/src/read/tests.rs.)
"""

from __future__ import annotations

import asyncio
import random

import pytest

from gazette.broker import protocol as pb
from gazette.broker import testing
from gazette.broker.protocol import protocol_pb2_grpc as pb2_grpc
from gazette.broker.server import native

CHUNK = native.READ_CHUNK_SIZE


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
