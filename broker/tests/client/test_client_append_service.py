"""AppendService: batching, per-journal order, dependencies, sticky failures, rollback."""

from __future__ import annotations

import asyncio

import pytest
from client_fakes import FakeBroker, InstantClock

from gazette.broker import client
from gazette.broker import protocol as pb
from gazette.broker.client import errors


@pytest.fixture(params=[True, False], ids=["native", "grpc.aio"])
def native(request: pytest.FixtureRequest) -> bool:
    """Every test here appends through the native data plane, then through grpc.aio."""
    return bool(request.param)


async def test_records_are_batched_and_ordered(fake: FakeBroker, jc: client.JournalClient) -> None:
    fake.append_delay = 0.02  # While one batch is in flight, the next gathers records.
    async with client.AppendService(jc) as svc:
        batches = []
        for i in range(200):
            batches.append(svc.append("a/journal", b"%d\n" % i))
            if i % 50 == 0:
                await asyncio.sleep(0.005)
    assert bytes(fake.content["a/journal"]) == b"".join(b"%d\n" % i for i in range(200))
    # Far fewer RPCs than records, and each record's batch committed a span holding it.
    assert 2 <= len(fake.appends) < 20
    ends = [(await aa).commit.end for aa in batches]
    assert ends == sorted(ends)
    assert all(aa.done() and aa.error is None for aa in batches)


async def test_journals_are_independent_and_each_ordered(
    fake: FakeBroker, jc: client.JournalClient
) -> None:
    journals = [f"many/j{i:02d}" for i in range(12)]

    async def writer(n: int) -> None:
        for i in range(100):
            svc.append(journals[(n + i) % len(journals)], b"w%d:%d\n" % (n, i))
            if i % 7 == 0:
                await asyncio.sleep(0)

    async with client.AppendService(jc) as svc, asyncio.TaskGroup() as tg:
        for n in range(4):
            tg.create_task(writer(n))

    total = 0
    for j in journals:
        lines = bytes(fake.content[j]).splitlines()
        total += len(lines)
        # Each writer's records appear in the order it wrote them.
        for n in range(4):
            mine = [int(line.split(b":")[1]) for line in lines if line.startswith(b"w%d:" % n)]
            assert mine == sorted(mine)
    assert total == 400


async def test_write_block_rolls_back_on_error(fake: FakeBroker, jc: client.JournalClient) -> None:
    async with client.AppendService(jc) as svc:
        svc.append("a/journal", b"kept\n")
        with pytest.raises(ValueError, match="serialize"), svc.start_append("a/journal") as aa:
            aa.write(b"half a rec")
            raise ValueError("failed to serialize")
        svc.append("a/journal", b"also kept\n")
    assert bytes(fake.content["a/journal"]) == b"kept\nalso kept\n"


async def test_held_batch_is_not_sent_until_released(
    fake: FakeBroker, jc: client.JournalClient
) -> None:
    async with client.AppendService(jc) as svc:
        with svc.start_append("a/journal") as aa:
            aa.write(b"first half, ")
            await asyncio.sleep(0.05)  # The journal's server must wait for us.
            assert fake.appends == []
            aa.write(b"second half\n")
        await aa
    assert fake.appends == [("a/journal", b"first half, second half\n")]


async def test_transient_failures_retry_then_succeed(
    fake: FakeBroker, jc: client.JournalClient, clock: InstantClock
) -> None:
    fake.append_outcomes = [pb.NOT_JOURNAL_PRIMARY_BROKER, pb.INSUFFICIENT_JOURNAL_BROKERS]
    async with client.AppendService(jc) as svc:
        resp = await svc.append("a/journal", b"record\n")
    assert resp.commit.end == 7
    assert clock.sleeps == [0.05, 0.05]


async def test_terminal_failure_sticks_to_its_journal(
    fake: FakeBroker, jc: client.JournalClient
) -> None:
    fake.append_outcomes = [pb.JOURNAL_NOT_FOUND]
    async with client.AppendService(jc) as svc:
        first = svc.append("gone/journal", b"one\n")
        with pytest.raises(errors.JournalNotFound):
            await first
        later = svc.append("gone/journal", b"two\n")
        with pytest.raises(errors.JournalNotFound):
            await later
        assert isinstance(svc.journal_error("gone/journal"), errors.JournalNotFound)
        # Other journals are unaffected.
        assert (await svc.append("ok/journal", b"fine\n")).commit.end == 5
    assert "gone/journal" not in fake.content or not fake.content["gone/journal"]
    assert len([r for r in fake.append_requests if r.journal == "gone/journal"]) == 1


async def test_dependencies_order_appends_across_journals(
    fake: FakeBroker, jc: client.JournalClient
) -> None:
    fake.append_delay = 0.02
    async with client.AppendService(jc) as svc:
        data = svc.append("data/journal", b"payload\n")
        ack = svc.append("acks/journal", b"ack\n", dependencies=svc.pending_except("acks/journal"))
        assert data in ack.dependencies
        await ack
    order = [j for j, _ in fake.appends]
    assert order == ["data/journal", "acks/journal"]


async def test_failed_dependency_fails_the_dependent(
    fake: FakeBroker, jc: client.JournalClient
) -> None:
    fake.append_outcomes = [pb.NOT_ALLOWED]
    async with client.AppendService(jc) as svc:
        data = svc.append("data/journal", b"payload\n")
        ack = svc.append("acks/journal", b"ack\n", dependencies=[data])
        with pytest.raises(errors.DependencyFailed) as info:
            await ack
        assert isinstance(info.value.cause, errors.NotAllowed)
    assert fake.appends == []


async def test_requires_running_service(jc: client.JournalClient) -> None:
    svc = client.AppendService(jc)
    with pytest.raises(RuntimeError, match="not running"):
        svc.append("a/journal", b"x")


async def test_a_head_gap_is_waited_out(
    fake: FakeBroker,
    jc: client.JournalClient,
    clock: InstantClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Our brokers resume a journal past a head gap by themselves (a member lease + 2 s
    # later): the service retries, warning each time, rather than failing the journal.
    fake.append_outcomes = [pb.INDEX_HAS_GREATER_OFFSET] * 3
    async with client.AppendService(jc) as svc:
        resp = await svc.append("a/journal", b"record\n")
    assert resp.commit.end == 7 and svc.journal_error("a/journal") is None
    assert len(clock.sleeps) == 3
    warnings = [r for r in caplog.records if "INDEX_HAS_GREATER_OFFSET" in r.getMessage()]
    assert len(warnings) == 3
