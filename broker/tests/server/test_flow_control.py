"""Flow-control arithmetic against Gazette's vectors, and the async driver."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from gazette.broker.server import errors, flow_control

LIMITS = flow_control.FlowLimits(max_append_rate=0, min_append_rate=1000)  # 1 byte / ms
SPEC_RATE = 10_000  # 10 bytes / ms


def test_over_then_underflow() -> None:
    fc = flow_control.FlowState()
    fc.reset(SPEC_RATE, LIMITS, 12345)
    assert (fc.max_rate, fc.balance, fc.min_rate, fc.spent, fc.charge) == (
        10_000,
        10_000,
        1000,
        1000,
        0,
    )

    fc.on_chunk(10_000 - 20)
    assert (fc.balance, fc.spent, fc.charge) == (20, 1000, 0)
    fc.on_chunk(40)  # Must wait for budget.
    assert (fc.balance, fc.spent, fc.charge) == (0, 1000, 20)
    fc.on_tick(fc.last_millis + 1)
    assert (fc.balance, fc.spent, fc.charge) == (0, 1000, 10)
    # A late ticker: the remaining charge is paid after accrual, without underflow.
    fc.on_tick(fc.last_millis + 100_000)
    assert (fc.balance, fc.spent, fc.charge) == (10_000 * 10 - 10, 10, 0)
    fc.on_chunk(40)
    assert (fc.balance, fc.spent, fc.charge) == (10_000 * 10 - 50, 50, 0)
    with pytest.raises(errors.FlowControlUnderflow):
        fc.on_tick(fc.last_millis + 51)
    assert (fc.balance, fc.spent, fc.charge) == (10_000 * 10, 0, 0)
    assert (fc.total_chunks, fc.delayed_chunks) == (3, 1)


def test_one_chunk_many_ticks() -> None:
    fc = flow_control.FlowState()
    fc.reset(1000, LIMITS, 12345)
    fc.on_chunk(1000 * 11)
    for i in range(10):
        assert (fc.balance, fc.spent, fc.charge) == (0, 1000, 1000 * (10 - i))
        fc.on_tick(fc.last_millis + 1000)
    assert (fc.balance, fc.spent, fc.charge) == (0, 1000, 0)
    assert (fc.total_chunks, fc.delayed_chunks) == (1, 1)


def test_balance_carries_forward() -> None:
    fc = flow_control.FlowState()
    fc.reset(SPEC_RATE, LIMITS, 12345)
    fc.on_chunk(5000)
    assert (fc.balance, fc.spent, fc.charge) == (5000, 1000, 0)
    fc.on_tick(fc.last_millis + 100)
    assert (fc.balance, fc.spent) == (6000, 900)
    fc.on_chunk(5000)
    assert (fc.balance, fc.spent, fc.charge) == (1000, 1000, 0)
    assert (fc.total_chunks, fc.delayed_chunks) == (2, 0)
    fc.reset(SPEC_RATE, LIMITS, fc.last_millis + 150)
    assert fc.balance == 2500
    assert fc.total_chunks == 0


def test_invalidate_then_chunk() -> None:
    fc = flow_control.FlowState()
    fc.reset(SPEC_RATE, LIMITS, 12345)
    fc.on_invalidate()
    assert fc.max_rate == 0
    fc.on_chunk(100_000)  # Larger than the balance, yet admitted at once.
    assert (fc.balance, fc.spent, fc.charge) == (0, 1000, 0)


def test_global_max_caps_only_non_zero_spec_rates() -> None:
    fc = flow_control.FlowState()
    fc.reset(SPEC_RATE, dataclasses.replace(LIMITS, max_append_rate=500), 1)
    assert fc.max_rate == 500
    fc = flow_control.FlowState()
    fc.reset(0, dataclasses.replace(LIMITS, max_append_rate=500), 1)
    assert fc.max_rate == 0  # Gazette's quirk: unlimited specs stay unlimited.


@dataclasses.dataclass
class Msg:
    content: bytes


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_driver_passes_messages_and_ends() -> None:
    async def source():
        for part in (b"ab", b"cd", b""):
            yield Msg(part)

    state = flow_control.FlowState()
    state.reset(0, LIMITS, 1)
    fc = flow_control.FlowControl(state, source())
    got = [m.content async for m in _drain(fc)]
    assert got == [b"ab", b"cd", b""]
    assert state.total_chunks == 3


async def _drain(fc):
    while (m := await fc.recv()) is not None:
        yield m


async def test_driver_underflows_on_a_stalled_client() -> None:
    clock = FakeClock()
    stall = asyncio.Event()

    async def source():
        yield Msg(b"x")
        await stall.wait()
        yield Msg(b"never")

    state = flow_control.FlowState()
    state.reset(0, LIMITS, int(clock() * 1000))
    fc = flow_control.FlowControl(state, source(), clock=clock)
    assert (await fc.recv()).content == b"x"

    async def advance() -> None:
        while True:
            await asyncio.sleep(0.002)
            clock.now += 0.1  # 100 ms of fake time per 2 ms of real time.

    async with asyncio.timeout(5):
        ticker = asyncio.ensure_future(advance())
        try:
            with pytest.raises(errors.FlowControlUnderflow):
                await fc.recv()
        finally:
            ticker.cancel()
            await fc.aclose()
    # About one second of fake time, the burst allowance, had to pass.
    assert clock.now - 1000.0 >= 0.9


async def test_driver_reads_ahead_while_a_chunk_is_applied() -> None:
    # The next message is already being received when recv() hands one over,
    # so the transport's delivery overlaps the append's work on this one.
    pulled: list[bytes] = []
    gate = asyncio.Event()

    async def source():
        for part in (b"ab", b"cd"):
            pulled.append(part)
            yield Msg(part)
        await gate.wait()
        pulled.append(b"end")

    state = flow_control.FlowState()
    state.reset(0, LIMITS, 1)
    fc = flow_control.FlowControl(state, source())
    assert (await fc.recv()).content == b"ab"
    await asyncio.sleep(0)  # Let the read-ahead run while "ab" would be applied.
    assert pulled == [b"ab", b"cd"]
    assert (await fc.recv()).content == b"cd"
    await asyncio.sleep(0)
    assert pulled == [b"ab", b"cd"]  # The read of EOF is pending on the source.

    # A driver that stops here (an error) cancels the read in flight.
    await fc.aclose()
    gate.set()
    await asyncio.sleep(0)
    assert pulled == [b"ab", b"cd"]
    assert state.total_chunks == 2


async def test_driver_reads_ahead_a_bounded_number_of_messages() -> None:
    pulled: list[int] = []

    async def source():
        for i in range(20):
            pulled.append(i)
            yield Msg(b"x")

    state = flow_control.FlowState()
    state.reset(0, LIMITS, 1)
    fc = flow_control.FlowControl(state, source())
    assert (await fc.recv()) is not None
    for _ in range(5):
        await asyncio.sleep(0)
    # The one handed over, and READ_AHEAD more: a slow append holds no more than that.
    assert len(pulled) == 1 + flow_control.READ_AHEAD
    got = 1
    while await fc.recv() is not None:
        got += 1
    assert got == 20 and state.total_chunks == 20
    await fc.aclose()


async def test_an_end_or_failure_of_the_source_stays() -> None:
    async def failing():
        yield Msg(b"ok")
        raise ValueError("the client sent garbage")

    state = flow_control.FlowState()
    state.reset(0, LIMITS, 1)
    fc = flow_control.FlowControl(state, failing())
    assert (await fc.recv()).content == b"ok"
    for _ in range(2):
        with pytest.raises(ValueError, match="garbage"):
            await fc.recv()
    await fc.aclose()

    async def one():
        yield Msg(b"only")

    fc = flow_control.FlowControl(state, one())
    assert (await fc.recv()).content == b"only"
    assert await fc.recv() is None
    assert await fc.recv() is None
    await fc.aclose()


async def test_a_cancellation_raised_by_the_source_reaches_recv() -> None:
    # gRPC cancels an RPC whose client went away: reading it raises CancelledError.
    async def cancelled():
        yield Msg(b"first")
        raise asyncio.CancelledError()

    state = flow_control.FlowState()
    state.reset(0, LIMITS, 1)
    fc = flow_control.FlowControl(state, cancelled())
    assert (await fc.recv()).content == b"first"
    with pytest.raises(asyncio.CancelledError):
        await fc.recv()
    await fc.aclose()
