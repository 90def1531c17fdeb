"""Spool file I/O off the event loop, bounded in time (``files.DiskWorker``).

A stalled disk is played by file objects whose ``pwrite`` (or a ``create``)
waits on a ``threading.Event``. Every test opens its gate and stops the
worker threads at teardown, and checks that no ``spool-disk`` thread is left.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import threading
import time
from collections.abc import Awaitable, Iterator

import pytest
from fragment_helpers import JOURNAL, RecordingObserver, content, proposal

from gazette.broker import protocol as pb
from gazette.broker.fragment import errors, files, spool

TIMEOUT = 0.3


def _disk_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("spool-disk")]


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    """Holds every gated operation until set; set at teardown whatever happened."""
    ev = threading.Event()
    yield ev
    ev.set()


@pytest.fixture
def workers(gate: threading.Event) -> Iterator[files.DiskWorkers]:
    ws = files.DiskWorkers()
    yield ws
    gate.set()  # Before joining: a gated thread only exits once released.
    assert ws.close(timeout=5), "a spool-disk thread did not stop"


@pytest.fixture(autouse=True)
def _no_thread_left() -> Iterator[None]:
    # Spools of other tests may still have idle threads (they exit on their own).
    before = set(_disk_threads())
    yield
    left = [t for t in _disk_threads() if t not in before]
    assert not left, left


class GatedFile(files.SpoolFile):
    """A real spool file whose writes wait for ``gate`` while it is closed."""

    def __init__(self, real: files.SpoolFile, gate: threading.Event) -> None:
        super().__init__(real.fileno())
        self._real = real  # Keeps the descriptor open as long as this object lives.
        self._gate = gate
        self.started = threading.Event()
        self.writes: list[tuple[bytes, int]] = []

    def pwrite(self, data: bytes | memoryview, offset: int) -> None:
        self.started.set()
        assert self._gate.wait(30), "the test never opened the gate"
        super().pwrite(data, offset)
        self.writes.append((bytes(data), offset))

    def close(self) -> None:
        self._fd = -1  # The real file closes the descriptor, once.

    def __del__(self) -> None:
        pass


async def _released(worker: files.DiskWorker) -> None:
    """Wait until the worker's stuck operation has returned (the gate just opened).

    Until then its thread still counts as stuck, and a write fails fast: the
    moment between the disk answering and the thread noticing.
    """
    deadline = time.monotonic() + 5
    while worker.busy_for():
        assert time.monotonic() < deadline, "the released operation did not return"
        await asyncio.sleep(0.01)


def _frag(begin: int, end: int, data: bytes = b"") -> pb.Fragment:
    f = pb.Fragment(journal=JOURNAL, begin=begin, end=end, compression_codec=pb.NONE)
    if data:
        f.sum.CopyFrom(pb.sha1sum_from_digest(hashlib.sha1(data).digest()))
    return f


def _spool(workers: files.DiskWorkers, directory: str) -> spool.Spool:
    cfg = spool.SpoolConfig(directory=directory, write_timeout=TIMEOUT, workers=workers)
    return spool.Spool(JOURNAL, RecordingObserver(), config=cfg)


async def _longest_pause(aw: Awaitable[object]) -> tuple[float, BaseException | None]:
    """Await ``aw`` while a ticker runs: (the loop's longest pause, what ``aw`` raised)."""
    gaps: list[float] = []
    stop = asyncio.Event()

    async def tick() -> None:
        last = time.monotonic()
        while not stop.is_set():
            await asyncio.sleep(0.005)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    ticker = asyncio.create_task(tick())
    raised: BaseException | None = None
    try:
        await aw
    except Exception as e:  # noqa: BLE001  # returned to the test, which checks it
        raised = e
    finally:
        stop.set()
        await ticker
    return max(gaps, default=0.0), raised


async def test_a_stuck_write_times_out_later_ones_fail_fast_and_release_recovers(
    tmp_path: object, gate: threading.Event, workers: files.DiskWorkers
) -> None:
    sp = _spool(workers, str(tmp_path))
    await sp.apply(content(b"abc", 0))
    assert (await sp.apply(proposal(_frag(0, 3, b"abc")))).status == pb.OK
    assert sp.file is not None
    real = sp.file
    stuck = GatedFile(real, gate)
    sp.file = stuck

    # The write times out, naming the journal, the directory and the timeout; the
    # loop kept running meanwhile (a write on the loop would have frozen it).
    start = time.monotonic()
    pause, raised = await _longest_pause(sp.apply(content(b"STUCK", 0)))
    took = time.monotonic() - start
    assert isinstance(raised, errors.SpoolWriteError), raised
    assert TIMEOUT <= took < TIMEOUT + 1.0, took
    assert pause < 0.25, pause
    message = str(raised)
    assert JOURNAL in message and str(tmp_path) in message and f"{TIMEOUT:g}s" in message, message
    assert isinstance(raised.__cause__, TimeoutError)
    assert sp.delta == 0  # Nothing of it counts.
    assert stuck.started.is_set()

    # While it stays stuck, a later write fails at once rather than queueing behind it.
    start = time.monotonic()
    with pytest.raises(errors.SpoolWriteError, match="is stalled"):
        await sp.apply(content(b"xy", 0))
    assert time.monotonic() - start < TIMEOUT / 2
    assert sp.delta == 0

    # The disk answers: the late write lands past the commit point, and the spool's
    # next write to the same offsets lands after it.
    gate.set()
    await _released(workers.for_directory(str(tmp_path)))
    await sp.apply(content(b"de", 0))
    assert (await sp.apply(proposal(_frag(0, 5, b"abcde")))).status == pb.OK
    assert stuck.writes[0] == (b"STUCK", 3)
    assert real.pread(5, 0) == b"abcde"
    assert sp.end == 5


async def test_a_stuck_file_creation_is_bounded_too(
    tmp_path: object,
    gate: threading.Event,
    workers: files.DiskWorkers,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # mkstemp on a stalled disk blocks like a write: it goes the same way.
    created: list[files.SpoolFile] = []
    real_create = files.SpoolFile.create

    def gated_create(directory: str | None = None) -> files.SpoolFile:
        assert gate.wait(30), "the test never opened the gate"
        f = real_create(directory)
        created.append(f)
        return f

    monkeypatch.setattr(files.SpoolFile, "create", staticmethod(gated_create))
    sp = _spool(workers, str(tmp_path))
    with pytest.raises(errors.SpoolWriteError, match=r"no answer within 0\.3s"):
        await sp.apply(content(b"abc", 0))
    assert sp.file is None and sp.delta == 0

    gate.set()
    await _released(workers.for_directory(str(tmp_path)))
    await sp.apply(content(b"abc", 0))
    assert sp.file is not None and sp.file is created[-1]
    assert len(created) == 2  # The late one was dropped, not used.
    assert (await sp.apply(proposal(_frag(0, 3, b"abc")))).status == pb.OK
    assert sp.file.pread(3, 0) == b"abc"


async def test_operations_run_in_order_and_a_timed_out_queued_one_never_runs(
    gate: threading.Event, workers: files.DiskWorkers
) -> None:
    worker = workers.for_directory("/nowhere")
    ran: list[str] = []
    started = threading.Event()

    def op(name: str, wait: bool = False) -> str:
        if wait:
            started.set()
            assert gate.wait(30)
        ran.append(name)
        return name

    first = asyncio.create_task(worker.run(functools.partial(op, "first", True), 0.2))
    # "first" is running (held by the gate): wait for it, however loaded the machine.
    assert await asyncio.to_thread(started.wait, 10)
    with pytest.raises(TimeoutError, match=r"no answer within 0\.1s"):
        await worker.run(functools.partial(op, "queued"), 0.1)
    with pytest.raises(TimeoutError):
        await first
    assert worker.busy_for() > 0.2
    with pytest.raises(TimeoutError, match="is stalled"):
        await worker.run(functools.partial(op, "refused"), 0.2)
    gate.set()
    await _released(worker)
    assert await worker.run(functools.partial(op, "after"), 5) == "after"
    assert ran == ["first", "after"]
    assert worker.busy_for() == 0.0


async def test_a_cancelled_caller_drops_the_outcome(workers: files.DiskWorkers) -> None:
    worker = workers.for_directory("/nowhere")
    release = threading.Event()

    def fails() -> None:
        assert release.wait(30)
        raise OSError("late failure")

    task = asyncio.create_task(worker.run(fails, 5))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    release.set()
    await _released(worker)
    # The worker is free again, and its dropped failure raised nowhere.
    assert await worker.run(lambda: 7, 5) == 7


async def test_errors_of_the_operation_reach_the_caller(workers: files.DiskWorkers) -> None:
    worker = workers.for_directory("/nowhere")

    def boom() -> None:
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        await worker.run(boom, 5)


async def test_an_idle_thread_exits_and_the_next_operation_starts_another() -> None:
    worker = files.DiskWorker("/nowhere", idle_exit=0.05)
    assert not worker.alive
    assert await worker.run(lambda: 1, 5) == 1
    deadline = time.monotonic() + 5
    while worker.alive:
        assert time.monotonic() < deadline, "the idle thread did not exit"
        await asyncio.sleep(0.02)
    assert await worker.run(lambda: 2, 5) == 2
    assert worker.close(timeout=5)


def test_a_stuck_operation_outliving_its_loop_ends_quietly(gate: threading.Event) -> None:
    # A broker stopped while its disk is stuck: the write ends after the loop closed.
    worker = files.DiskWorker("/nowhere")
    loop = asyncio.new_event_loop()
    try:
        with pytest.raises(TimeoutError):
            loop.run_until_complete(worker.run(lambda: gate.wait(30), 0.05))
    finally:
        loop.close()
    gate.set()
    assert worker.close(timeout=5)


def test_the_timeout_is_a_broker_flag() -> None:
    from gazette.broker.server import config

    assert config.parse([], env={}).broker.spool_write_timeout_s == 10.0
    assert spool.SpoolConfig().write_timeout == 10.0
    cfg = config.parse(["--broker.spool-write-timeout", "2500ms"], env={})
    assert cfg.broker.spool_write_timeout_s == 2.5
    env = {"BROKER_SPOOL_WRITE_TIMEOUT": "1m"}
    assert config.parse([], env=env).broker.spool_write_timeout_s == 60.0
    for bad in ("0s", "-1s", "soon"):
        with pytest.raises(SystemExit):
            config.parse(["--broker.spool-write-timeout", bad], env={})
    helps = {a.dest: a.help or "" for a in config.build_parser(env={})._actions}
    text = helps["broker.spool_write_timeout_s"]
    assert "[$BROKER_SPOOL_WRITE_TIMEOUT]" in text and text.endswith("(default: 10s)"), text


def test_spool_configs_compare_by_settings_not_by_their_threads() -> None:
    assert spool.SpoolConfig() == spool.SpoolConfig()
    assert "workers" not in repr(spool.SpoolConfig())
