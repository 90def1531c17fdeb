"""Append flow control (Gazette ``broker/append_flow_control.go``), restated.

Two limits act on the content of an append stream:

* a per-journal *maximum* rate (``JournalSpec.max_append_rate``, capped by
  ``--broker.max-append-rate``): chunks beyond the banked balance are delayed
  until ticks refill it ("delayed chunks");
* a *minimum* rate (``--broker.min-append-rate``): a client that keeps the
  journal's pipeline while sending slower than this is cut off, because it
  blocks every other writer of the journal.

:class:`FlowState` is the pure arithmetic, driven by millisecond ticks and
chunk lengths, so tests feed it exact vectors. :class:`FlowControl` wraps an
async message source with it, ticking every 50 ms of an injected clock. The
state lives on the replica and carries over between consecutive appends.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Generic, Protocol, TypeVar

from gazette.broker.server import errors

log = logging.getLogger(__name__)

QUANTUM_S = 0.050  # Tick period.
BURST_S = 1.0  # Initial balance and minimum-rate allowance, in seconds of rate.
BANK_FACTOR = 10  # Balance is capped at this many seconds of maximum rate.
DEFAULT_MIN_APPEND_RATE = 1 << 16


@dataclasses.dataclass(frozen=True)
class FlowLimits:
    """Process-wide limits (from ``--broker.max-append-rate`` / ``--broker.min-append-rate``)."""

    max_append_rate: int = 0
    min_append_rate: int = DEFAULT_MIN_APPEND_RATE


@dataclasses.dataclass
class FlowState:
    """Token-bucket arithmetic of one journal, in bytes and milliseconds."""

    max_rate: int = 0
    min_rate: int = 0
    balance: int = 0
    spent: int = 0
    charge: int = 0
    last_millis: int = 0
    total_chunks: int = 0
    delayed_chunks: int = 0

    def reset(self, spec_max_rate: int, limits: FlowLimits, now_millis: int) -> None:
        """Begin a new append RPC at ``now_millis``, keeping balance and clock of the last one."""
        balance, last = self.balance, self.last_millis
        self.max_rate = spec_max_rate
        # Gazette quirk kept on purpose: a spec rate of 0 (unlimited) is not capped
        # by the process-wide limit, only a smaller non-zero one is.
        if limits.max_append_rate != 0 and limits.max_append_rate < self.max_rate:
            self.max_rate = limits.max_append_rate
        self.charge = 0
        self.total_chunks = 0
        self.delayed_chunks = 0
        self.balance = balance
        self.last_millis = last
        if last == 0:
            self.balance = int(self.max_rate * BURST_S)
            self.last_millis = now_millis
        else:
            # As in Gazette, catch up the balance with rates zeroed: idle time
            # between RPCs is not an underflow of the new one.
            self.min_rate = self.spent = 0
            with contextlib.suppress(errors.FlowControlUnderflow):
                self.on_tick(now_millis)
        self.min_rate = limits.min_append_rate
        self.spent = int(limits.min_append_rate * BURST_S)

    def on_tick(self, millis: int) -> None:
        """Advance to ``millis``; raises :class:`errors.FlowControlUnderflow`."""
        if millis < self.last_millis:
            return
        elapsed = millis - self.last_millis
        self.balance = min(
            self.balance + self.max_rate * elapsed // 1000, self.max_rate * BANK_FACTOR
        )
        self.spent -= min(self.min_rate * elapsed // 1000, self.spent)
        self.last_millis = millis
        self.debit()
        if self.spent <= 0:
            raise errors.FlowControlUnderflow()

    def on_chunk(self, length: int) -> None:
        """Charge a received chunk of ``length`` bytes."""
        assert self.charge == 0, "charge != 0"
        self.charge = length
        self.debit()
        if self.charge != 0:
            self.delayed_chunks += 1
        self.total_chunks += 1

    def on_invalidate(self) -> None:
        """The route changed mid-RPC: stop rate limiting for the rest of it."""
        self.max_rate = 0
        self.debit()

    def debit(self) -> None:
        d = min(self.balance, self.charge)
        self.balance -= d
        self.charge -= d
        self.spent = min(self.spent + d, self.min_rate)
        if self.max_rate == 0:
            self.spent = min(self.spent + self.charge, self.min_rate)
            self.charge = 0


class HasContent(Protocol):
    @property
    def content(self) -> bytes: ...


M = TypeVar("M", bound=HasContent)


# Messages the driver receives ahead of the one the append is applying.
READ_AHEAD = 2


class FlowControl(Generic[M]):
    """Reads messages of ``source`` through a :class:`FlowState`.

    ``recv()`` returns the next message once its bytes are paid for, ``None``
    at the end of the source, and raises :class:`errors.FlowControlUnderflow`
    if the client stalls, or :class:`errors.Cancelled` at the first tick after
    ``aborted()`` turns true (the RPC's driver gave up on its client). ``invalidated`` is polled each tick: once true the
    maximum rate is dropped (Gazette does so on a route change).

    One task per stream receives up to :data:`READ_AHEAD` messages ahead, so
    that the transport's delivery overlaps the append's work. (A task, a timer
    and done-callbacks per message cost about as much as the rest of the
    driver.) The end of the source, or its failure, stays in place for every
    later ``recv()``; a cancellation raised by the source itself (gRPC
    cancelled the RPC) reaches ``recv()`` as one. Call :meth:`aclose` when done.
    """

    def __init__(
        self,
        state: FlowState,
        source: AsyncIterator[M],
        *,
        clock: Callable[[], float] = time.time,
        invalidated: Callable[[], bool] = lambda: False,
        aborted: Callable[[], bool] = lambda: False,
    ) -> None:
        self._state = state
        self._source = source
        self._clock = clock
        self._invalidated = invalidated
        self._aborted = aborted
        self._invalidate_seen = False
        self._next_tick = clock() + QUANTUM_S
        self._buffer: collections.deque[M] = collections.deque()
        # StopAsyncIteration once the source ended, else what it raised.
        self._end: BaseException | None = None
        self._reader: asyncio.Task[None] | None = None
        self._closing = False
        # Resolved by the reader when a message or the end arrives / by recv() on room.
        self._arrival: asyncio.Future[None] | None = None
        self._room: asyncio.Future[None] | None = None

    def _millis(self) -> int:
        return int(self._clock() * 1000)

    def _tick_if_due(self) -> None:
        now = self._clock()
        if now < self._next_tick:
            return
        self._next_tick = now + QUANTUM_S
        if self._aborted():
            raise errors.Cancelled()
        if not self._invalidate_seen and self._invalidated():
            self._invalidate_seen = True
            self._state.on_invalidate()
        self._state.on_tick(int(now * 1000))

    async def _read_ahead(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                if len(self._buffer) >= READ_AHEAD:
                    self._room = loop.create_future()
                    await self._room
                    continue
                self._buffer.append(await anext(self._source))
                _resolve(self._arrival)
        except asyncio.CancelledError as e:
            if self._closing:
                raise
            self._end = e  # The source's own: gRPC cancelled the RPC.
        except Exception as e:  # noqa: BLE001 (kept for recv(), which raises it)
            self._end = e
        _resolve(self._arrival)

    async def recv(self) -> M | None:
        state = self._state
        msg: M | None = None
        while True:
            self._tick_if_due()
            if msg is None:
                if self._reader is None:
                    self._reader = asyncio.ensure_future(self._read_ahead())
                if self._buffer:
                    msg = self._buffer.popleft()
                    _resolve(self._room)
                    state.on_chunk(len(msg.content))
                elif self._end is not None:
                    if isinstance(self._end, StopAsyncIteration):
                        return None
                    if isinstance(self._end, asyncio.CancelledError):
                        raise asyncio.CancelledError()
                    raise self._end
                else:
                    self._arrival = asyncio.get_running_loop().create_future()
                    await _wait_until(self._arrival, max(self._next_tick - self._clock(), 0.001))
                    continue
            if state.charge == 0:
                return msg
            await asyncio.sleep(max(self._next_tick - self._clock(), 0.001))

    async def aclose(self) -> None:
        """End the read-ahead task, cancelling a receive in flight.

        A failure the source raised after the append stopped reading is logged
        (at debug) rather than left to asyncio's "exception was never retrieved"
        (seen on brokers whose appends were cancelled by their clients).
        """
        reader, self._reader = self._reader, None
        if reader is None:
            return
        self._closing = True
        if not reader.done():
            reader.cancel()
            # Not ``await reader``: that would also swallow our own cancellation.
            await asyncio.wait((reader,))
        end = self._end
        if end is not None and not isinstance(end, StopAsyncIteration | asyncio.CancelledError):
            # The RPC ends on whatever stopped reading first; this may have come after.
            log.debug("append read-ahead ended with a failure: %s", errors.describe(end))


def _resolve(fut: asyncio.Future[None] | None) -> None:
    if fut is not None and not fut.done():
        fut.set_result(None)


async def _wait_until(fut: asyncio.Future[Any], delay: float) -> None:
    """Wait for ``fut`` to be done, at most ``delay`` seconds, without consuming it.

    ``asyncio.wait`` does the same with sets and a callback per call: this runs
    once per chunk.
    """
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[None] = loop.create_future()

    def wake(_: object = None) -> None:
        if not waiter.done():
            waiter.set_result(None)

    timer = loop.call_later(delay, wake)
    fut.add_done_callback(wake)
    try:
        await waiter
    finally:
        timer.cancel()
        fut.remove_done_callback(wake)
