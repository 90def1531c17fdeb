"""Local files behind fragments: unlinked spool files and positional readers.

A :class:`SpoolFile` is a temporary file whose only directory entry is removed
as soon as it is created: the open descriptor is the file. Readers of a local
fragment share it through :meth:`SpoolFile.pread` (positional, so concurrent
readers and the writer never disturb a shared offset). The descriptor closes
when the last reference goes away, as Gazette leaves closing to its GC
finalizer: an index drops a local fragment once it is durable, but a read of
it may still be streaming.

Writes and creations of spool files can block for as long as the disk
likes (a stalled device, a hung network volume). They therefore never run on
the event loop: a :class:`DiskWorker` runs them on a thread of its own, one
per spool directory (:class:`DiskWorkers` keeps them, made on first use), and
its caller waits a bounded time::

    workers = DiskWorkers()
    worker = workers.for_directory(directory)
    f = await worker.run(functools.partial(SpoolFile.create, directory), timeout=10.0)
    await worker.run(functools.partial(f.pwrite, b"data", 0), timeout=10.0)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import struct
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

# Positional reads/copies move data in blocks of this size.
COPY_BLOCK = 1 << 20


class ReaderAt(Protocol):
    """Anything readable at an offset, like Go's io.ReaderAt."""

    def pread(self, size: int, offset: int) -> bytes: ...


class SpoolFile:
    """A read-write spool file: anonymous (already unlinked), or recoverable.

    A recoverable file (:meth:`create_recoverable`) keeps its name in the spool
    directory beside a :class:`SpoolRecord`, so that a broker that was killed
    finds it when it starts again (:mod:`gazette.broker.fragment.recovery`);
    :meth:`unlink` removes both once its content is stored.
    """

    __slots__ = ("_fd", "path", "record")

    def __init__(self, fd: int, path: str | None = None, record: SpoolRecord | None = None) -> None:
        self._fd = fd
        self.path = path
        self.record = record

    @classmethod
    def create_recoverable(cls, directory: str, journal: str, begin: int, codec: int) -> SpoolFile:
        """Create ``<directory>/<journal, quoted>/<begin>-<random>.spool`` and its record."""
        folder = os.path.join(directory, urllib.parse.quote(journal, safe=""))
        os.makedirs(folder, exist_ok=True)
        fd, path = tempfile.mkstemp(prefix=f"{begin:016x}-", suffix=SPOOL_SUFFIX, dir=folder)
        try:
            record = SpoolRecord.create(path + RECORD_SUFFIX, journal, begin, codec)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(path)
            raise
        return cls(fd, path, record)

    def unlink(self) -> None:
        """Remove a recoverable file's names (its content is stored); readers keep it open."""
        path, self.path = self.path, None
        record, self.record = self.record, None
        for name in (path, record.path if record is not None else None):
            if name is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name)
        if record is not None:
            record.close()

    @classmethod
    def create(cls, directory: str | None = None) -> SpoolFile:
        """Create an unlinked temporary file in ``directory`` (default: the OS temp dir)."""
        fd, name = tempfile.mkstemp(prefix="spool", dir=directory)
        try:
            os.unlink(name)
        except BaseException:
            os.close(fd)
            raise
        return cls(fd)

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def fileno(self) -> int:
        return self._fd

    def pwrite(self, data: bytes | memoryview, offset: int) -> None:
        """Write all of ``data`` at ``offset``."""
        view = memoryview(data)
        while view:
            n = os.pwrite(self._fd, view, offset)
            view, offset = view[n:], offset + n

    def pread(self, size: int, offset: int) -> bytes:
        """Read up to ``size`` bytes at ``offset`` (fewer only at end of file)."""
        parts: list[bytes] = []
        while size > 0:
            chunk = os.pread(self._fd, size, offset)
            if not chunk:
                break
            parts.append(chunk)
            size -= len(chunk)
            offset += len(chunk)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def size(self) -> int:
        return os.fstat(self._fd).st_size

    def close(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)

    def __del__(self) -> None:
        # Intended: the last holder of a spool file releases it (see module docstring).
        # Linux frees the descriptor even when close() reports an error (EIO, or
        # ENOTCONN once a FUSE server is gone), and no one here could act on it.
        if getattr(self, "_fd", -1) >= 0:
            with contextlib.suppress(OSError):
                self.close()


SPOOL_SUFFIX = ".spool"
RECORD_SUFFIX = ".record"
_RECORD_MAGIC = b"GZSPOOL1"
# magic, begin, confirmed end, codec, journal name length; then the name.
_RECORD_HEAD = struct.Struct("<8sqqiI")
_CONFIRMED_AT = 16  # Offset of the confirmed end within the record.


class SpoolRecord:
    """The sidecar of a recoverable spool file: whose content it is, and how much is confirmed.

    Written once when the spool file is made (journal, first offset, codec),
    then only its confirmed end, an 8-byte write in place, before a primary
    acknowledges the append that confirms it: a broker killed afterwards finds
    on its disk everything it acknowledged, and that it may publish.
    """

    __slots__ = ("_fd", "path")

    def __init__(self, fd: int, path: str) -> None:
        self._fd = fd
        self.path = path

    @classmethod
    def create(cls, path: str, journal: str, begin: int, codec: int) -> SpoolRecord:
        name = journal.encode()
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            data = _RECORD_HEAD.pack(_RECORD_MAGIC, begin, begin, codec, len(name)) + name
            os.pwrite(fd, data, 0)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(path)
            raise
        return cls(fd, path)

    @classmethod
    def named(cls, path: str) -> SpoolRecord:
        """The record at ``path`` by its name alone, for :meth:`SpoolFile.unlink` to remove:
        another writer (the native data plane) keeps its confirmed end. Nothing is
        opened, so a stalled disk never holds up the caller."""
        return cls(-1, path)

    def set_confirmed(self, end: int, sync: bool = False) -> None:
        os.pwrite(self._fd, struct.pack("<q", end), _CONFIRMED_AT)
        if sync:
            os.fdatasync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)

    def __del__(self) -> None:
        if getattr(self, "_fd", -1) >= 0:
            with contextlib.suppress(OSError):
                self.close()

    @staticmethod
    def read(path: str) -> tuple[str, int, int, int]:
        """(journal, begin, confirmed end, codec) of the record at ``path``; ValueError if torn."""
        with open(path, "rb") as f:
            data = f.read()
        if len(data) < _RECORD_HEAD.size:
            raise ValueError(f"spool record {path} is {len(data)} bytes, too short")
        magic, begin, confirmed, codec, n = _RECORD_HEAD.unpack_from(data)
        name = data[_RECORD_HEAD.size : _RECORD_HEAD.size + n]
        if magic != _RECORD_MAGIC or len(name) != n or not begin <= confirmed:
            raise ValueError(f"spool record {path} is not one of ours, or torn")
        return name.decode(), begin, confirmed, codec


class BytesReaderAt:
    """A ReaderAt over bytes in memory (small objects such as health-check probes)."""

    __slots__ = ("_data",)

    def __init__(self, data: bytes) -> None:
        self._data = data

    def pread(self, size: int, offset: int) -> bytes:
        return self._data[offset : offset + size]


# A worker thread idle this long exits; the next operation starts another.
IDLE_EXIT = 5.0


class _Op:
    """One operation handed to a :class:`DiskWorker`, and where its outcome goes."""

    __slots__ = ("abandoned", "done", "fn", "loop", "timed_out")

    def __init__(
        self,
        fn: Callable[[], Any],
        loop: asyncio.AbstractEventLoop | None,
        done: asyncio.Future[Any] | None,
    ) -> None:
        self.fn: Callable[[], Any] | None = fn
        self.loop = loop
        self.done = done
        # Set, under the worker's lock, once the caller stopped waiting (timeout or
        # cancellation): an operation not yet started is then skipped, and the
        # outcome of a started one is dropped.
        self.abandoned = False
        # Set, under the worker's lock, when its caller's timeout ran out: while it
        # still runs, the directory counts as stalled.
        self.timed_out = False


# Tells a worker's thread to exit once nothing else is queued (DiskWorker.close).
_STOP = None


def _deliver(op: _Op, result: Any, exc: BaseException | None) -> None:
    """Runs on the caller's loop: hand over the outcome unless the caller gave up."""
    if op.done is None or op.done.done():
        return
    if exc is not None:
        op.done.set_exception(exc)
    else:
        op.done.set_result(result)


class DiskWorker:
    """Runs the blocking file operations of one spool directory, in order, on one thread.

    A caller waits at most its ``timeout`` (:meth:`run` then raises
    ``TimeoutError``), but the operation itself can't be interrupted: a
    ``pwrite`` stuck in the kernel finishes when the disk answers, if ever.
    Spools tolerate that because everything here runs first in, first out: a
    write that timed out touched only offsets past the spool's commit point,
    and the spool's next write to those offsets, queued behind it, lands after
    it. Several threads could reorder the two.

    While an operation has run longer than a caller's timeout, that caller
    fails at once instead of queueing: it could only wait behind the stuck one.
    So appends to a stalled directory fail fast until the disk answers again,
    and nothing piles up behind it meanwhile.

    The thread is made on first use, exits after ``idle_exit`` seconds without
    work, and is a daemon: a disk that never answers must not keep the process
    from exiting (``concurrent.futures`` would join it at exit, forever).
    The hand-off is a ``SimpleQueue`` one way and ``call_soon_threadsafe`` the
    other, the least a thread hop costs (``bench/bench_fragment.py`` measures it).
    """

    def __init__(self, directory: str, *, idle_exit: float = IDLE_EXIT) -> None:
        self.directory = directory
        self._idle_exit = idle_exit
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[_Op | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._running: _Op | None = None
        self._running_since = 0.0

    @property
    def name(self) -> str:
        return self.directory or "the system temporary directory"

    @property
    def alive(self) -> bool:
        """Whether the worker has a thread (idle or busy)."""
        with self._lock:
            return self._thread is not None

    def busy_for(self) -> float:
        """Seconds the running operation has been running (0.0 when none runs)."""
        with self._lock:
            return 0.0 if self._running is None else time.monotonic() - self._running_since

    async def run(self, fn: Callable[[], T], timeout: float) -> T:  # noqa: ASYNC109
        """``fn()`` on the worker's thread; raises TimeoutError after ``timeout`` seconds.

        A timed-out ``fn`` that has not started yet never runs; one that has
        started runs to its end, and its outcome is dropped. ``timeout`` is a
        parameter rather than the caller's ``asyncio.timeout`` because it is also
        the bound past which a running operation counts as stuck.
        """
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._running is not None:
                running_for = time.monotonic() - self._running_since
                # timed_out as well: it may have started a moment after its caller
                # began to wait, so have run a hair less than the timeout.
                if self._running.timed_out or running_for > timeout:
                    raise TimeoutError(
                        f"spool directory {self.name} is stalled: an earlier operation has run "
                        f"{running_for:.1f}s, past the {timeout:g}s timeout"
                    )
            done: asyncio.Future[T] = loop.create_future()
            op = _Op(fn, loop, done)
            self._queue.put(op)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._serve, name=f"spool-disk {self.name}", daemon=True
                )
                self._thread.start()
        # A timer handle rather than asyncio.wait_for: this is on every append's path.
        timer = loop.call_later(timeout, self._expire, op, timeout)
        try:
            result: T = await done
        except BaseException:
            self._abandon(op)
            raise
        finally:
            timer.cancel()
        return result

    def post(self, fn: Callable[[], object]) -> None:
        """Queue ``fn`` without waiting for it: in order with the rest, its failure logged.

        For writes nobody needs to wait for (a replica's record of a confirmation)
        and that must not land before the writes queued ahead of them.
        """
        with self._lock:
            self._queue.put(_Op(fn, None, None))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._serve, name=f"spool-disk {self.name}", daemon=True
                )
                self._thread.start()

    def close(self, timeout: float | None = None) -> bool:
        """Let the thread exit once the queue is empty; whether it exited within ``timeout``.

        A thread stuck in an operation exits only after the operation returns.
        The worker stays usable: a later :meth:`run` starts a new thread.
        """
        with self._lock:
            thread = self._thread
            if thread is None:
                return True
            self._queue.put(_STOP)
        thread.join(timeout)
        return not thread.is_alive()

    def _expire(self, op: _Op, timeout: float) -> None:
        with self._lock:
            op.timed_out = True
        if op.done is not None and not op.done.done():
            op.done.set_exception(
                TimeoutError(
                    f"spool directory {self.name}: no answer within {timeout:g}s "
                    "(is its disk stalled?)"
                )
            )

    def _abandon(self, op: _Op) -> None:
        with self._lock:
            op.abandoned = True
            if op is not self._running:
                op.fn = None  # Not started: release what it holds (an append's content).

    def _serve(self) -> None:
        while True:
            try:
                op = self._queue.get(timeout=self._idle_exit)
            except queue.Empty:
                op = _STOP
            with self._lock:
                if op is _STOP:
                    # Exit only with nothing queued: run() starts a thread only when
                    # there is none, so whatever it queued under the lock is served.
                    if self._queue.empty():
                        self._thread = None
                        return
                    continue
                if op.abandoned or op.fn is None:
                    continue
                fn = op.fn
                self._running, self._running_since = op, time.monotonic()
            result: Any = None
            exc: BaseException | None = None
            try:
                result = fn()
            except BaseException as e:  # noqa: BLE001  # handed to the caller's loop
                exc = e
            with self._lock:
                self._running = None
                took = time.monotonic() - self._running_since
                abandoned = op.abandoned
            if op.done is None:
                if exc is not None:
                    log.warning("spool directory %s: a queued write failed: %s", self.name, exc)
            elif abandoned:
                log.warning(
                    "spool directory %s: an operation its caller gave up on finished after %.1fs%s",
                    self.name,
                    took,
                    f" ({exc})" if exc is not None else "",
                    extra={"directory": self.name, "seconds": took},
                )
            else:
                # A closed loop (RuntimeError) has nobody left waiting for the outcome.
                assert op.loop is not None
                with contextlib.suppress(RuntimeError):
                    op.loop.call_soon_threadsafe(_deliver, op, result, exc)
            # Drop references now: a file created for a caller that gave up closes
            # here, not whenever this thread next gets work.
            del op, fn, result, exc


class DiskWorkers:
    """The :class:`DiskWorker` of each spool directory, made on first use."""

    def __init__(self, *, idle_exit: float = IDLE_EXIT) -> None:
        self._idle_exit = idle_exit
        self._lock = threading.Lock()
        self._workers: dict[str, DiskWorker] = {}

    def for_directory(self, directory: str | None) -> DiskWorker:
        """The worker of ``directory`` (None or "": the system temporary directory)."""
        key = directory or ""
        with self._lock:
            worker = self._workers.get(key)
            if worker is None:
                worker = self._workers[key] = DiskWorker(key, idle_exit=self._idle_exit)
            return worker

    def close(self, timeout: float | None = None) -> bool:
        """Stop every worker's thread (see :meth:`DiskWorker.close`); whether all stopped.

        ``timeout`` bounds the whole call, not each worker.
        """
        with self._lock:
            workers = list(self._workers.values())
        deadline = None if timeout is None else time.monotonic() + timeout
        stopped = True
        for w in workers:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            stopped = w.close(left) and stopped
        return stopped
