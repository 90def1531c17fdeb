"""AppendService: many small writes, batched into ordered, pipelined appends per journal.

Writers hand records to :meth:`AppendService.start_append` (or the shortcut
:meth:`AppendService.append`) and get back the :class:`AsyncAppend` their
bytes belong to. Each journal has a chain of AsyncAppends: the head is being
appended (one Append RPC at a time per journal, so the journal receives
batches in exactly the order records were written), while records written
meanwhile gather in the tail, which goes out as one atomic append as soon as
the head completes. Journals are served concurrently and independently.

An append may depend on others (``dependencies``): it is not sent before they
complete, and fails with :class:`~gazette.broker.client.errors.DependencyFailed`
if one of them fails. Transient failures are retried until they succeed.
Terminal failures (JOURNAL_NOT_FOUND, NOT_ALLOWED, WRONG_APPEND_OFFSET, ...)
resolve the append with the error, and the error *sticks* to the journal:
every later append to it fails the same way, so nothing is ever written out
of order after a gap.

Usage::

    async with client.AppendService(jc) as svc:
        aa = svc.append("examples/journal", b'{"n": 1}\\n')
        with svc.start_append("examples/journal") as aa2:   # several writes, one record
            aa2.write(b"part one, ")
            aa2.write(b"part two\\n")        # an exception here rolls both back
        await aa2                            # the AppendResponse of its batch

This mirrors Gazette's ``broker/client/append_service.go``, with an asyncio
TaskGroup owning one server task per journal that has appends in flight.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import tempfile
from collections.abc import Callable, Generator, Iterable
from types import TracebackType
from typing import Any

from gazette import task
from gazette.broker import protocol as pb
from gazette.broker.client import appender, errors, journal_client

__all__ = ["AppendService", "AppendServiceConfig", "AsyncAppend", "AsyncOperation"]

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, slots=True)
class AppendServiceConfig:
    #: A batch stops taking writes beyond this many bytes (Gazette: 64 MiB).
    batch_cutoff: int = 1 << 26
    #: A batch's buffer moves from memory to a temporary file beyond this many bytes.
    spool_memory: int = 8 << 20


class AsyncOperation:
    """An operation that completes once, successfully or with an error. Awaitable."""

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self._error: BaseException | None = None
        self._callbacks: list[Callable[[], None]] | None = None

    def resolve(self, error: BaseException | None = None) -> None:
        if self._event.is_set():
            raise RuntimeError("AsyncOperation resolved twice")
        self._error = error
        self._event.set()
        callbacks, self._callbacks = self._callbacks, None
        for callback in callbacks or ():
            callback()

    def add_done_callback(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` once the operation resolves (at once if it has).

        For waiters that multiplex many sources on one wake-up (the consumer's
        transaction loop) instead of a task per operation. Callbacks run inside
        :meth:`resolve` and must not raise.
        """
        if self._event.is_set():
            callback()
        elif self._callbacks is None:
            self._callbacks = [callback]
        else:
            self._callbacks.append(callback)

    def done(self) -> bool:
        return self._event.is_set()

    @property
    def error(self) -> BaseException | None:
        """The operation's error (None while pending, or on success)."""
        return self._error

    async def wait(self) -> None:
        """Wait for completion; never raises the operation's error."""
        await self._event.wait()

    async def result(self) -> Any:
        await self._event.wait()
        if self._error is not None:
            raise self._error
        return None

    def __await__(self) -> Generator[Any, None, Any]:
        return self.result().__await__()

    @classmethod
    def finished(cls, error: BaseException | None = None) -> AsyncOperation:
        op = cls()
        op.resolve(error)
        return op


class AsyncAppend(AsyncOperation):
    """One batch of writes to a journal, sent as a single atomic append.

    Write records with :meth:`write` inside ``with`` (an exception in the block
    rolls back what the block wrote), or use :meth:`AppendService.append`.
    ``await aa`` gives the batch's ``pb.AppendResponse`` (its ``commit`` spans
    every byte of the batch) or raises its error.
    """

    def __init__(
        self,
        service: AppendService,
        request: pb.AppendRequest,
        dependencies: frozenset[AsyncOperation],
    ) -> None:
        super().__init__()
        self._service = service
        self.request = request
        self.dependencies = dependencies
        self.response = pb.AppendResponse()
        self._buffer: tempfile.SpooledTemporaryFile[bytes] | None = None
        self._size = 0
        self._checkpoint = 0
        self._held = False
        self._released = asyncio.Event()
        self._released.set()
        self._dispatched = False

    @property
    def journal(self) -> str:
        return self.request.journal

    @property
    def size(self) -> int:
        """Bytes written to this batch so far."""
        return self._size

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._dispatched:
            raise RuntimeError("write to an AsyncAppend which is already being appended")
        if not data:
            return
        if self._buffer is None:
            self._buffer = tempfile.SpooledTemporaryFile(  # noqa: SIM115 (closed when sent)
                max_size=self._service.config.spool_memory
            )
        self._buffer.write(data)
        self._size += len(data)

    def __enter__(self) -> AsyncAppend:
        self._held = True
        self._released.clear()
        self._checkpoint = self._size
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is not None and self._size != self._checkpoint:
            assert self._buffer is not None
            self._buffer.seek(self._checkpoint)
            self._buffer.truncate()
            self._size = self._checkpoint
        self._held = False
        self._released.set()

    async def result(self) -> pb.AppendResponse:
        await super().result()
        return self.response

    def __await__(self) -> Generator[Any, None, pb.AppendResponse]:
        return self.result().__await__()

    def _chunks(self) -> Iterable[bytes]:
        if self._buffer is None:
            return
        self._buffer.seek(0)
        remaining = self._size
        while remaining > 0:
            chunk = self._buffer.read(min(appender.CHUNK_SIZE, remaining))
            if not chunk:
                break
            remaining -= len(chunk)
            yield chunk

    def _release_buffer(self) -> None:
        if self._buffer is not None:
            self._buffer.close()
            self._buffer = None


@dataclasses.dataclass
class _Journal:
    chain: collections.deque[AsyncAppend] = dataclasses.field(default_factory=collections.deque)
    task: asyncio.Task[None] | None = None
    error: BaseException | None = None


# Outcomes after which retrying can't help (unless the append checks registers,
# where Gazette's client keeps trying: the registers may yet change).
# INDEX_HAS_GREATER_OFFSET is not one of them here, although Gazette's
# broker/client/append_service.go gives up on it: our brokers close that head
# gap by themselves a member lease + 2 s later, and failing the journal for good
# would fail, say, a consumer's transactions over a pause its brokers recover
# from (test_stream_sum's SIGKILL runs). Against Gazette's brokers, which wait
# for `gazctl journals reset-head`, the append keeps retrying, warning each time.
_TERMINAL = (
    errors.FragmentStoreUnhealthy,
    errors.JournalNotFound,
    errors.NotAllowed,
    errors.RegisterMismatch,
    errors.WrongAppendOffset,
)


class AppendService:
    """Batches, orders and pipelines appends per journal. An async context manager.

    Leaving the ``async with`` block waits for every started append to complete.
    """

    def __init__(
        self,
        client: journal_client.JournalClient,
        config: AppendServiceConfig | None = None,
    ) -> None:
        self.client = client
        self.config = config or AppendServiceConfig()
        self._journals: dict[str, _Journal] = {}
        self._tg: task.Group | None = None

    async def __aenter__(self) -> AppendService:
        # A task.Group: an exception of the `async with` body leaves as itself.
        self._tg = task.Group("append service")
        await self._tg.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._tg is not None
        try:
            await self._tg.__aexit__(exc_type, exc, tb)
        finally:
            self._tg = None

    def start_append(
        self,
        request: pb.AppendRequest | str,
        dependencies: Iterable[AsyncOperation] = (),
    ) -> AsyncAppend:
        """The AsyncAppend that writes to ``request.journal`` go into now.

        Writes join the journal's pending batch when it has the same request and
        already waits on ``dependencies``; otherwise a new batch is chained after it.
        """
        if self._tg is None:
            raise RuntimeError("AppendService is not running (use `async with`)")
        if isinstance(request, str):
            request = pb.AppendRequest(journal=request)
        deps = frozenset(dependencies)
        journal = request.journal
        state = self._journals.get(journal)
        if state is None:
            state = self._journals[journal] = _Journal()
        tail = state.chain[-1] if state.chain else None
        if (
            tail is None
            or tail._dispatched
            or tail._held
            or tail._size > self.config.batch_cutoff
            or not deps <= tail.dependencies
            or tail.request != request
        ):
            tail = AsyncAppend(self, request, deps)
            state.chain.append(tail)
        if state.task is None:
            state.task = self._tg.spawn(f"append {journal}", self._serve(journal, state))
        return tail

    def append(
        self,
        request: pb.AppendRequest | str,
        data: bytes | bytearray | memoryview,
        dependencies: Iterable[AsyncOperation] = (),
    ) -> AsyncAppend:
        """Queue one record; returns the AsyncAppend (batch) that will carry it."""
        with self.start_append(request, dependencies) as aa:
            aa.write(data)
        return aa

    def pending_except(self, journal: str) -> frozenset[AsyncOperation]:
        """Operations covering every append started so far, except those of ``journal``.

        Used as ``dependencies`` to order a write after everything already written
        elsewhere (a consumer's transaction acknowledgements do this).
        """
        out: set[AsyncOperation] = set()
        for name, state in self._journals.items():
            if name == journal:
                continue
            if state.chain:
                out.add(state.chain[-1])
            elif state.error is not None:
                out.add(AsyncOperation.finished(state.error))
        return frozenset(out)

    def journal_error(self, journal: str) -> BaseException | None:
        """The error stuck to ``journal``, if any."""
        state = self._journals.get(journal)
        return state.error if state else None

    async def _serve(self, journal: str, state: _Journal) -> None:
        try:
            while state.chain:
                aa = state.chain[0]
                await aa._released.wait()
                aa._dispatched = True
                err = state.error
                for dep in aa.dependencies:
                    await dep.wait()
                    if err is None and dep.error is not None:
                        err = errors.DependencyFailed(dep.error)
                if err is None and aa._size:
                    err = await self._send(aa)
                aa._release_buffer()
                if err is not None:
                    state.error = err
                aa.resolve(err)
                state.chain.popleft()
        finally:
            state.task = None
            for aa in state.chain:  # Only when cancelled.
                aa._release_buffer()
            if not state.chain and state.error is None:
                self._journals.pop(journal, None)

    async def _send(self, aa: AsyncAppend) -> BaseException | None:
        """Append ``aa``'s batch, retrying all but terminal failures. Returns the error, if any."""
        attempt = 0
        while True:
            app = appender.Appender(self.client, aa.request)
            try:
                for chunk in aa._chunks():
                    await app.write(chunk)
                aa.response = await app.close()
                return None
            except errors.ClientError as err:
                app.abort()
                if isinstance(err, _TERMINAL) and not aa.request.HasField("check_registers"):
                    return err
                if attempt > 0 or not errors.is_transient(err):
                    log.warning(
                        "append to %s failed (attempt %d, will retry): %s",
                        aa.journal,
                        attempt,
                        err,
                    )
            except pb.ValidationError as err:
                return err  # A malformed request never gets better.
            except BaseException:
                app.abort()
                raise
            await self.client.clock.sleep(self.client.config.backoff.delay(attempt))
            attempt += 1
