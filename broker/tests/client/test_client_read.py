"""Reader and RetryReader: offsets, jumps, resumption, signed file:// URLs, routing."""

from __future__ import annotations

import asyncio
import pathlib

import pytest
from client_fakes import FakeBroker, InstantClock

from gazette.broker import client
from gazette.broker import protocol as pb
from gazette.broker.client import errors


@pytest.fixture(params=[True, False], ids=["native", "grpc.aio"])
def native(request: pytest.FixtureRequest) -> bool:
    """Every test here reads (and appends) through the native data plane, then grpc.aio."""
    return bool(request.param)


async def read_all(rr: client.RetryReader) -> bytes:
    return b"".join([chunk async for chunk in rr])


async def test_reads_to_the_write_head(fake: FakeBroker, jc: client.JournalClient) -> None:
    fake.fragment_size = 1000
    body = bytes(range(256)) * 20
    fake.content["a/journal"] += body
    async with client.RetryReader(jc, pb.ReadRequest(journal="a/journal")) as rr:
        assert await read_all(rr) == body
        assert rr.offset == len(body)
        assert rr.response.write_head == len(body)


async def test_reads_from_an_offset_to_an_end_offset(
    fake: FakeBroker, jc: client.JournalClient
) -> None:
    fake.content["a/journal"] += b"0123456789" * 10
    rr = client.RetryReader(jc, pb.ReadRequest(journal="a/journal", offset=15, end_offset=42))
    assert await read_all(rr) == (b"0123456789" * 10)[15:42]
    assert rr.offset == 42


async def test_resumes_after_early_close_without_gap_or_duplicate(
    fake: FakeBroker, jc: client.JournalClient
) -> None:
    fake.fragment_size, fake.chunk_size, fake.cut_reads_after = 500, 64, 3
    body = b"".join(b"%05d\n" % i for i in range(1000))
    fake.content["a/journal"] += body
    rr = client.RetryReader(jc, pb.ReadRequest(journal="a/journal"))
    assert await read_all(rr) == body
    offsets = [r.offset for r in fake.read_requests]
    assert len(offsets) > 10 and offsets == sorted(offsets)
    assert offsets[:3] == [0, 192, 384]


async def test_blocking_read_waits_for_appends(fake: FakeBroker, jc: client.JournalClient) -> None:
    rr = client.RetryReader(jc, pb.ReadRequest(journal="a/journal", offset=0, block=True))
    got = asyncio.ensure_future(rr.read())
    await asyncio.sleep(0.05)
    assert not got.done()
    await client.append(jc, "a/journal", b"late\n")
    assert await asyncio.wait_for(got, 5) == b"late\n"
    await rr.close()


async def test_a_cancelled_read_leaves_the_reader_usable(
    fake: FakeBroker, jc: client.JournalClient
) -> None:
    # grpc.aio cancels the RPC with the read; the next read starts another at the
    # same offset (a reader blocked at the head is stopped this way).
    await client.append(jc, "a/journal", b"one\n")
    rr = client.RetryReader(jc, pb.ReadRequest(journal="a/journal", offset=0, block=True))
    assert await rr.read() == b"one\n"
    blocked = asyncio.ensure_future(rr.read())
    await asyncio.sleep(0.05)
    blocked.cancel()
    with pytest.raises(asyncio.CancelledError):
        await blocked
    await client.append(jc, "a/journal", b"two\n")
    assert await asyncio.wait_for(rr.read(), 5) == b"two\n"
    assert rr.offset == 8
    await rr.close()


async def test_a_cancelled_read_whose_stream_ends_quietly_is_not_retried(
    fake: FakeBroker, jc: client.JournalClient
) -> None:
    # A cancelled task's RPC may end as a clean close rather than raise (gazctl
    # `journals read --block` ignored a Ctrl-C once so): the read stops all the same.
    rr = client.RetryReader(jc, pb.ReadRequest(journal="a/journal", offset=0, block=True))

    async def quietly_ended() -> bytes:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            return b""
        return b"never"

    rr.reader.read = quietly_ended  # type: ignore[method-assign]
    blocked = asyncio.ensure_future(rr.read())
    await asyncio.sleep(0.05)
    blocked.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(blocked, 5)
    await rr.close()


async def test_tail_read_starts_at_the_write_head(
    fake: FakeBroker, jc: client.JournalClient
) -> None:
    fake.content["a/journal"] += b"old\n"
    rr = client.RetryReader(jc, pb.ReadRequest(journal="a/journal", offset=-1, block=True))
    first = asyncio.ensure_future(anext(aiter(rr)))
    await asyncio.sleep(0.05)
    assert not first.done()  # A blocking tail read waits for the next commit.
    await client.append(jc, "a/journal", b"new\n")
    assert await asyncio.wait_for(first, 5) == b"new\n"
    assert rr.offset == 8
    assert rr.jumps == []  # Learning the head of a tail read is no jump.
    await rr.close()


async def test_non_blocking_read_surfaces_offset_not_yet_available(
    fake: FakeBroker, jc: client.JournalClient
) -> None:
    fake.content["a/journal"] += b"abc"
    rr = client.RetryReader(jc, pb.ReadRequest(journal="a/journal", offset=3))
    with pytest.raises(errors.OffsetNotYetAvailable):
        await rr.read()


async def test_offset_jump_is_reported_and_reading_goes_on(
    fake: FakeBroker, jc: client.JournalClient
) -> None:
    fake.content["a/journal"] += b"0123456789"
    real_read = fake.Read

    async def jumping_read(request, context):  # type: ignore[no-untyped-def]
        if request.offset < 4:  # As if [0, 4) were removed by retention.
            request.offset = 4
        async for resp in real_read(request, context):
            yield resp

    fake.Read = jumping_read  # type: ignore[method-assign]
    # The servicer's bound method was registered at start: restart to pick up the patch.
    await fake.stop()
    await fake.start()
    async with client.JournalClient(client.ClientConfig(address=fake.endpoint)) as jc2:
        rr = client.RetryReader(jc2, pb.ReadRequest(journal="a/journal", offset=1))
        assert await read_all(rr) == b"456789"
        assert [(j.from_offset, j.to_offset) for j in rr.jumps] == [(1, 4)]


async def test_journal_not_found_surfaces_after_a_few_attempts(
    fake: FakeBroker, jc: client.JournalClient, clock: InstantClock
) -> None:
    async def missing(request, context):  # type: ignore[no-untyped-def]
        yield pb.ReadResponse(status=pb.JOURNAL_NOT_FOUND, header=fake.header())

    fake.Read = missing  # type: ignore[method-assign]
    await fake.stop()
    await fake.start()
    async with client.JournalClient(client.ClientConfig(address=fake.endpoint), clock=clock) as jc2:
        with pytest.raises(errors.JournalNotFound):
            await client.RetryReader(jc2, pb.ReadRequest(journal="nope/journal")).read()
    assert len(clock.sleeps) == 4


@pytest.mark.parametrize("codec", [pb.NONE, pb.GZIP])
async def test_signed_file_urls_are_read_from_the_file_root(
    fake: FakeBroker, tmp_path: pathlib.Path, codec: int
) -> None:
    fake.fragment_size = 100
    fake.persist_dir = tmp_path
    body = bytes(range(250))
    fake.content["a/journal"] += body
    async with client.JournalClient(
        client.ClientConfig(address=fake.endpoint, file_root=str(tmp_path))
    ) as jc2:
        fake.codec = codec
        rr = client.RetryReader(
            jc2, pb.ReadRequest(journal="a/journal", offset=30, do_not_proxy=True)
        )
        assert await read_all(rr) == body[30:]
    # Two persisted fragments were handed out as URLs; the partial third streamed.
    assert [r.offset for r in fake.read_requests] == [30, 100, 200]


async def test_file_url_without_file_root_is_an_error(
    fake: FakeBroker, jc: client.JournalClient, tmp_path: pathlib.Path
) -> None:
    fake.fragment_size = 10
    fake.persist_dir = tmp_path
    fake.content["a/journal"] += b"x" * 25
    reader = client.Reader(jc, pb.ReadRequest(journal="a/journal", do_not_proxy=True))
    with pytest.raises(errors.FragmentReadError, match="--file-root"):
        await reader.read()


async def test_routes_are_cached_and_reads_go_to_members(fake: FakeBroker) -> None:
    other = FakeBroker()
    await other.start()
    try:
        fake.content["a/journal"] += b"abc"
        # The default address is `other`; the route names `fake`.
        cfg = client.ClientConfig(address=other.endpoint, cache_size=10, zone="zone-a")
        async with client.JournalClient(cfg) as jc2:
            jc2.update_route("a/journal", fake.header().route)
            rr = client.RetryReader(jc2, pb.ReadRequest(journal="a/journal"))
            assert await read_all(rr) == b"abc"
        assert len(fake.read_requests) == 1 and other.read_requests == []
    finally:
        await other.stop()


async def test_a_read_stopped_below_the_write_head_says_so(
    fake: FakeBroker, caplog: pytest.LogCaptureFixture
) -> None:
    # A broker that has no fragment for [2, 6) yet (another broker has yet to persist
    # it, say) answers OFFSET_NOT_YET_AVAILABLE there with a write head beyond it.
    fake.content["a/journal"] += b"0123456789"
    real_read = fake.Read

    async def holed_read(request, context):  # type: ignore[no-untyped-def]
        if 2 <= request.offset < 6:
            yield pb.ReadResponse(
                status=pb.OFFSET_NOT_YET_AVAILABLE,
                offset=request.offset,
                write_head=10,
                header=fake.header(),
            )
            return
        async for resp in real_read(request, context):
            yield resp

    fake.Read = holed_read  # type: ignore[method-assign]
    await fake.stop()
    await fake.start()
    async with client.JournalClient(client.ClientConfig(address=fake.endpoint)) as jc2:
        rr = client.RetryReader(jc2, pb.ReadRequest(journal="a/journal", offset=3))
        assert await read_all(rr) == b""
        warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert any("stopped at offset 3, below the broker's write head 10" in m for m in warned)

        # At the real end of the journal, nothing is said.
        caplog.clear()
        rr = client.RetryReader(jc2, pb.ReadRequest(journal="a/journal", offset=6))
        assert await read_all(rr) == b"6789"
        assert not [r for r in caplog.records if "write head" in r.getMessage()]


async def test_reads_take_the_native_path_unless_told_not_to(
    fake: FakeBroker, jc: client.JournalClient, native: bool
) -> None:
    fake.chunk_size = 7  # Many responses, taken a batch at a time.
    body = b"0123456789abcdef" * 40
    fake.content["a/journal"] += body
    async with client.RetryReader(jc, pb.ReadRequest(journal="a/journal")) as rr:
        assert await read_all(rr) == body
    # Native reads dial no grpc.aio channel; grpc.aio ones dial the broker's.
    assert (not jc._channels) == native
