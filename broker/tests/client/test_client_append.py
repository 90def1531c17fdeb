"""Appender / append(): atomic appends, chunking, content sources and Gazette's retry policy."""

from __future__ import annotations

import asyncio
import io
import pathlib

import grpc
import pytest
from client_fakes import FakeBroker, InstantClock

from gazette.broker import client
from gazette.broker import protocol as pb
from gazette.broker.client import appender, errors
from gazette.keyspace import testing as ks_testing


@pytest.fixture(params=[True, False], ids=["native", "grpc.aio"])
def native(request: pytest.FixtureRequest) -> bool:
    """Every test here appends through the native data plane, then through grpc.aio."""
    return bool(request.param)


async def test_append_bytes_commits_one_span(fake: FakeBroker, jc: client.JournalClient) -> None:
    resp = await client.append(jc, "a/journal", b"hello\n")
    assert resp.status == pb.OK
    assert (resp.commit.begin, resp.commit.end) == (0, 6)
    resp = await client.append(jc, "a/journal", b"world\n")
    assert (resp.commit.begin, resp.commit.end) == (6, 12)
    assert bytes(fake.content["a/journal"]) == b"hello\nworld\n"


async def test_large_append_is_chunked_and_atomic(
    fake: FakeBroker, jc: client.JournalClient
) -> None:
    body = bytes(range(256)) * (3 * appender.CHUNK_SIZE // 256 + 7)
    resp = await client.append(jc, "a/journal", body)
    assert resp.commit.end == len(body)
    assert fake.appends == [("a/journal", body)]


@pytest.mark.parametrize("kind", ["path", "file", "factory", "iterator", "async-iterator"])
async def test_content_sources(
    fake: FakeBroker, jc: client.JournalClient, tmp_path: pathlib.Path, kind: str
) -> None:
    parts = [b"x" * 100_000, b"y" * 200_000, b"z"]
    body = b"".join(parts)
    path = tmp_path / "body"
    path.write_bytes(body)

    async def agen():  # type: ignore[no-untyped-def]
        for p in parts:
            yield p

    content: client.Content = {
        "path": path,
        "file": io.BytesIO(body),
        "factory": lambda: iter(parts),
        "iterator": iter(parts),
        "async-iterator": agen(),
    }[kind]
    await client.append(jc, "a/journal", content)
    assert bytes(fake.content["a/journal"]) == body


async def test_text_is_refused(jc: client.JournalClient) -> None:
    with pytest.raises(TypeError, match="not str"):
        await client.append(jc, "a/journal", "text")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "failure",
    [
        pb.NOT_JOURNAL_PRIMARY_BROKER,
        pb.NO_JOURNAL_PRIMARY_BROKER,
        pb.INSUFFICIENT_JOURNAL_BROKERS,
        grpc.StatusCode.UNAVAILABLE,
    ],
)
async def test_transient_failures_are_retried(
    fake: FakeBroker, jc: client.JournalClient, clock: InstantClock, failure: object
) -> None:
    fake.append_outcomes = [failure, failure]  # type: ignore[list-item]
    # A one-shot iterator is replayed from the client's spool on each retry.
    resp = await client.append(jc, "a/journal", iter([b"one ", b"two"]))
    assert resp.commit.end == 7
    assert fake.appends == [("a/journal", b"one two")]
    assert len(fake.append_requests) == 3
    assert clock.sleeps == [0.05, 0.05]


@pytest.mark.parametrize(
    ("status", "exc"),
    [
        (pb.JOURNAL_NOT_FOUND, errors.JournalNotFound),
        (pb.NOT_ALLOWED, errors.NotAllowed),
        (pb.WRONG_APPEND_OFFSET, errors.WrongAppendOffset),
        (pb.SUSPENDED, errors.Suspended),
    ],
)
async def test_other_statuses_raise(
    fake: FakeBroker, jc: client.JournalClient, status: int, exc: type[Exception]
) -> None:
    fake.append_outcomes = [status]
    with pytest.raises(exc) as info:
        await client.append(jc, "a/journal", b"data")
    assert isinstance(info.value, errors.StatusError)
    assert info.value.status == status and info.value.journal == "a/journal"
    assert info.value.header is not None and info.value.header.etcd.revision == 10
    assert len(fake.append_requests) == 1


async def test_grpc_errors_other_than_unavailable_raise(
    fake: FakeBroker, jc: client.JournalClient
) -> None:
    fake.append_outcomes = [grpc.StatusCode.INTERNAL]
    with pytest.raises(errors.TransportError) as info:
        await client.append(jc, "a/journal", b"data")
    assert info.value.code == grpc.StatusCode.INTERNAL
    assert "injected failure" in str(info.value)


async def test_invalid_request_is_refused_before_sending(
    fake: FakeBroker, jc: client.JournalClient
) -> None:
    with pytest.raises(pb.ValidationError, match=r"Request\.Journal"):
        await client.append(jc, "not//clean", b"data")
    assert fake.append_requests == []


async def test_aborted_appender_commits_nothing(fake: FakeBroker, jc: client.JournalClient) -> None:
    app = client.Appender(jc, pb.AppendRequest(journal="a/journal"))
    await app.write(b"partial")
    app.abort()
    await client.append(jc, "a/journal", b"whole")
    assert bytes(fake.content["a/journal"]) == b"whole"


def test_index_has_greater_offset_names_the_fix() -> None:
    err = client.errors.status_error(pb.INDEX_HAS_GREATER_OFFSET, journal="my/own/journal")
    assert isinstance(err, client.errors.IndexHasGreaterOffset)
    text = str(err)
    assert text.startswith("INDEX_HAS_GREATER_OFFSET (journal my/own/journal)")
    assert "gazctl journals reset-head -l name=my/own/journal" in text
    assert "--etcd.lease + 2s" in text


async def test_a_broker_that_ignores_the_delete_probe_is_told_apart(
    jc: client.JournalClient,
) -> None:
    # The fake answers OK without the probe's echo, as Gazette brokers before it do.
    await client.fragment_store_health(jc, "file:///")
    with pytest.raises(errors.DeleteProbeNotRun, match="delete permission is untested"):
        await client.fragment_store_health(jc, "file:///", check_delete_prefix="probe/")


async def test_head_gap_raises_unless_asked_to_wait(
    fake: FakeBroker,
    jc: client.JournalClient,
    clock: InstantClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake.append_outcomes = [pb.INDEX_HAS_GREATER_OFFSET]
    with pytest.raises(errors.IndexHasGreaterOffset):
        await client.append(jc, "a/journal", b"data")
    assert clock.sleeps == []

    fake.append_outcomes = [pb.INDEX_HAS_GREATER_OFFSET, pb.INDEX_HAS_GREATER_OFFSET]
    resp = await client.append(jc, "a/journal", b"data", through_head_gaps=True)
    assert resp.commit.end == 4 and len(clock.sleeps) == 2
    assert sum("INDEX_HAS_GREATER_OFFSET" in r.getMessage() for r in caplog.records) == 2


async def test_a_call_cut_off_with_its_connection_is_retried(
    fake: FakeBroker, jc: client.JournalClient, clock: InstantClock
) -> None:
    # grpc-core ends a call whose broker died mid-send with INTERNAL "Internal error
    # from Core" (Go's gRPC: UNAVAILABLE): retried, unlike a broker's own INTERNAL.
    fake.append_outcomes = [(grpc.StatusCode.INTERNAL, "Internal error from Core")]
    resp = await client.append(jc, "a/journal", b"data")
    assert resp.commit.end == 4 and len(clock.sleeps) == 1

    fake.append_outcomes = [(grpc.StatusCode.INTERNAL, "a bug")]
    with pytest.raises(errors.TransportError) as info:
        await client.append(jc, "a/journal", b"data")
    assert info.value.code == grpc.StatusCode.INTERNAL


async def test_appends_take_the_native_path_unless_told_not_to(
    fake: FakeBroker, jc: client.JournalClient, native: bool
) -> None:
    await client.append(jc, "a/journal", b"which way\n")
    # Native appends dial no grpc.aio channel; grpc.aio ones dial the broker's.
    assert (not jc._channels) == native
    assert bytes(fake.content["a/journal"]) == b"which way\n"


async def test_an_append_far_larger_than_what_waits_to_be_sent_commits_whole(
    fake: FakeBroker, jc: client.JournalClient
) -> None:
    # 48 messages: the writer outruns the connection and waits for room as it goes.
    body = bytes(range(256)) * (48 * appender.CHUNK_SIZE // 256)
    resp = await client.append(jc, "a/journal", body)
    assert (resp.commit.begin, resp.commit.end) == (0, len(body))
    assert fake.appends == [("a/journal", body)]


async def test_an_append_cancelled_while_it_awaits_its_answer_leaves_the_client_usable(
    fake: FakeBroker, jc: client.JournalClient
) -> None:
    loop = asyncio.get_running_loop()
    logged: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _loop, context: logged.append(context))
    try:
        fake.append_delay = 0.3
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(client.append(jc, "a/journal", b"abandoned\n"), 0.05)
        fake.append_delay = 0.0
        resp = await client.append(jc, "b/journal", b"next\n")
        assert resp.status == pb.OK and resp.commit.end == 5
        # The abandoned call's end comes to a future nobody awaits any more: it is
        # dropped quietly, where setting it would log an InvalidStateError.
        await asyncio.sleep(0.4)
        assert logged == []
    finally:
        loop.set_exception_handler(None)


async def test_an_unreachable_broker_is_unavailable(clock: InstantClock, native: bool) -> None:
    cfg = client.ClientConfig(
        address=f"http://127.0.0.1:{ks_testing.free_port()}", native_appends=native
    )
    async with client.JournalClient(cfg, clock=clock) as jc:
        app = client.Appender(jc, pb.AppendRequest(journal="a/journal"))
        with pytest.raises(errors.TransportError) as info:
            await app.write(b"nobody listens\n")
            await app.close()
        assert info.value.code == grpc.StatusCode.UNAVAILABLE
        assert info.value.method == "Append" and info.value.address == cfg.address
