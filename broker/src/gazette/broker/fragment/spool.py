"""Spool: a replica's transactional journal state (Gazette `broker/fragment/spool.go`).

A spool is the fragment being written: its committed span and SHA-1, bytes
written past the commit point but not yet committed (``delta``), the journal
registers and, on the primary, an incrementally compressed copy. It changes
only through :meth:`Spool.apply` of a ReplicateRequest, which is either

- *content*: bytes at ``content_delta`` past the commit point, written to the
  spool's unlinked local file and hashed; or
- a *proposal*: a fragment and registers that roll, roll back or commit the
  spool, or are refused with PROPOSAL_MISMATCH.

Content is never held in memory beyond one request: it lives in the spool
file, and compression reads it back in blocks. The SHA-1 of the committed
content is kept as a hashlib copy, so a rollback is a ``.copy()``.

The primary compresses committed content in batches, in a worker thread,
behind the commits: a commit that makes a batch starts its compression and
returns without waiting for it (Gazette's `compressThrough` runs inside the
commit). At most one batch is in flight: the next batch, a roll and the
persister wait for it. Compression only reads committed spans of the spool
file, which later content and rollbacks never write, so it can run beside
them.

:func:`maybe_roll` decides the primary's next proposal (Gazette's
`maybeRollFragment`, `broker/replica.go`).
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import datetime
import functools
import hashlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from gazette.broker import protocol as pb
from gazette.broker.fragment import codecs, cover_set, errors, files, metrics

log = logging.getLogger(__name__)

# Go's zero time.Time as Unix seconds: what a never-appended spool buckets into.
_GO_ZERO_TIME_UNIX = -62135596800


@dataclass(frozen=True)
class SpoolConfig:
    """Settings of spools (Gazette's constants, overridable for tests)."""

    # Directory of spool files (None: the OS temporary directory).
    directory: str | None = None
    # The primary compresses incrementally once this much committed content is pending.
    compression_batch_size: int = 1 << 20
    # Pause before retrying a failed spool file-system operation (retried forever).
    retry_interval: float = 5.0
    # Content of at least this many bytes is hashed in a worker thread.
    threaded_write_size: int = 1 << 20
    # Seconds a spool file write or creation may take before its request fails
    # (``--broker.spool-write-timeout``). The disk may still finish it later.
    write_timeout: float = 10.0
    # The threads that spool file writes and creations run on, one per directory:
    # never the event loop, which a stalled disk would freeze for the whole broker.
    # Shared by every spool made with this config.
    workers: files.DiskWorkers = dataclasses.field(
        default_factory=files.DiskWorkers, compare=False, repr=False
    )
    # Spool files keep their names in ``directory`` beside a record of how much of
    # them is confirmed, to be found again after a crash (``--broker.spool-dir``).
    recoverable: bool = False
    # Each confirmation flushes the spool file and its record to the device
    # (fdatasync: ``--broker.spool-sync``), for power loss; a crash of the process
    # alone loses nothing the kernel was given.
    sync: bool = False


class SpoolObserver(Protocol):
    """Told of spool events: commits (the index) and completions (the persister)."""

    def spool_commit(self, fragment: cover_set.Fragment) -> None: ...

    def spool_complete(self, spool: Spool, primary: bool) -> None: ...


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def fragments_equal(a: pb.Fragment, b: pb.Fragment) -> bool:
    """Field-by-field equality of all 8 Fragment fields.

    Message ``==`` would tell an unset ``sum`` from a zero one; Gazette's value
    comparison does not, and neither may we.
    """
    return (
        a.begin == b.begin
        and a.end == b.end
        and a.journal == b.journal
        and a.sum.part1 == b.sum.part1
        and a.sum.part2 == b.sum.part2
        and a.sum.part3 == b.sum.part3
        and a.compression_codec == b.compression_codec
        and a.backing_store == b.backing_store
        and a.mod_time == b.mod_time
        and a.path_postfix == b.path_postfix
    )


def label_sets_equal(a: pb.LabelSet, b: pb.LabelSet) -> bool:
    return len(a.labels) == len(b.labels) and all(
        x.name == y.name and x.value == y.value and x.prefix == y.prefix
        for x, y in zip(a.labels, b.labels, strict=True)
    )


def _copy_fragment(f: pb.Fragment) -> pb.Fragment:
    out = pb.Fragment()
    out.CopyFrom(f)
    return out


def _copy_labels(labels: pb.LabelSet) -> pb.LabelSet:
    out = pb.LabelSet()
    out.CopyFrom(labels)
    return out


class Spool:
    """The fragment a replica is writing; see the module docstring.

    Attributes: ``spec`` (the committed pb.Fragment; do not mutate),
    ``file`` (local uncompressed content, None until the first content),
    ``registers``, ``first_append_time`` (UTC time of the first commit, or None).
    The caller holds a spool exclusively while applying requests to it.
    """

    def __init__(
        self,
        journal: str,
        observer: SpoolObserver,
        *,
        config: SpoolConfig = SpoolConfig(),
        now: Callable[[], datetime.datetime] = utc_now,
    ) -> None:
        self.observer = observer
        self.config = config
        self._now = now
        self.spec = pb.Fragment(journal=journal, compression_codec=pb.NONE)
        self.file: files.SpoolFile | None = None
        self.registers = pb.LabelSet()
        self.first_append_time: datetime.datetime | None = None
        # How far this fragment's content is known to be the journal's: every member
        # of a route this spool served committed it (see confirm()). Only that part
        # may be published by a member that is cut off or deposed.
        self.confirmed_end = 0
        # On a completed copy: whether the spool was rolled at exactly its end (the
        # journal may go on from this content) rather than forward past it.
        self.continued = False
        self._reset_content()

    def _reset_content(self) -> None:
        """Fresh per-fragment state. Assigns new objects: a completed copy may share the old."""
        self._delta = 0
        self._summer = hashlib.sha1()
        self._sum_state = hashlib.sha1()
        # Compressed form (under spec.compression_codec): file, compressor, how far the
        # content is compressed, and the compressed length once the compressor is closed.
        self.compressed_file: files.SpoolFile | None = None
        self._compressor: codecs.Compressor | None = None
        self._compressed_pos = 0
        self._compressed_to = 0
        self.compressed_length = 0
        # The compression running in a worker thread (None when idle), and the content
        # offset through which compression is started: batches are counted from there.
        # While a job runs, the thread alone touches the compression fields above.
        self._compressing: asyncio.Future[None] | None = None
        self._compress_target = 0

    # -- Views --------------------------------------------------------------------------

    @property
    def journal(self) -> str:
        return self.spec.journal

    @property
    def begin(self) -> int:
        return self.spec.begin

    @property
    def end(self) -> int:
        return self.spec.end

    @property
    def delta(self) -> int:
        """Uncommitted bytes written past ``end``."""
        return self._delta

    @property
    def content_length(self) -> int:
        return self.spec.end - self.spec.begin

    @property
    def fragment(self) -> cover_set.Fragment:
        """The committed fragment with its local file, as the index holds it."""
        return cover_set.Fragment(self.spec, self.file)

    @property
    def confirmed(self) -> bool:
        """Whether all committed content is known to be the journal's."""
        return self.confirmed_end >= self.spec.end

    def confirm(self, end: int) -> None:
        """Every member of the route committed this fragment through ``end``.

        The primary calls it once every peer acknowledged a proposal; a replica
        once the primary sends the proposal after one it accepted (our primary
        sends a proposal only after the previous one's acknowledgements are all
        in). An ``end`` outside this fragment (it rolled since) is ignored.
        """
        if self.spec.begin <= end <= self.spec.end and end > self.confirmed_end:
            self.confirmed_end = end

    async def record_confirmed(
        self, file: files.SpoolFile | None = None, end: int | None = None, *, wait: bool = True
    ) -> None:
        """Write the confirmed end into a recoverable spool file's record (see confirm).

        A primary awaits it before it acknowledges the append that confirmed it (a
        replica, which acknowledges nothing to clients, only queues it: ``wait``);
        ``file`` and ``end`` name what to record when the spool may have rolled
        since (the confirmation's file and end, taken when it happened).
        A failure is logged, not raised: every member holds the content, and only
        its recovery after the whole route crashed depends on the record.
        """
        write = self._confirmed_writer(file, end)
        if write is None:
            return
        worker = self.config.workers.for_directory(self.config.directory)
        if not wait:
            worker.post(write)
            return
        try:
            await worker.run(write, self.config.write_timeout)
        except (OSError, TimeoutError) as e:
            log.warning(
                "journal %s: confirmed end %d not recorded on disk: %s",
                self.journal,
                self.confirmed_end if end is None else end,
                e,
            )

    def post_confirmed(self) -> None:
        """Queue writing the confirmed end into the file's record (see record_confirmed)."""
        if (write := self._confirmed_writer(None, None)) is not None:
            self.config.workers.for_directory(self.config.directory).post(write)

    def _confirmed_writer(
        self, file: files.SpoolFile | None, end: int | None
    ) -> Callable[[], None] | None:
        f = self.file if file is None else file
        if f is None or f.record is None:
            return None
        record = f.record
        at = self.confirmed_end if end is None else end
        sync = self.config.sync

        def write() -> None:
            if sync:
                os.fdatasync(f.fileno())
            record.set_confirmed(at, sync=sync)

        return write

    async def forget_file(self) -> None:
        """Remove a recoverable spool file's names: its content is stored (or dropped)."""
        f = self.file
        if f is None or f.path is None:
            return
        worker = self.config.workers.for_directory(self.config.directory)
        try:
            await worker.run(f.unlink, self.config.write_timeout)
        except (OSError, TimeoutError) as e:
            log.warning("journal %s: spool file %s not removed: %s", self.journal, f.path, e)

    def next(self) -> pb.Fragment:
        """The fragment a commit of the pending ``delta`` would produce."""
        f = _copy_fragment(self.spec)
        f.end += self._delta
        if f.begin == f.end:
            # Empty fragments carry the zero sum (not SHA-1 of nothing).
            f.sum.Clear()
        else:
            f.sum.CopyFrom(pb.sha1sum_from_digest(self._summer.digest()))
        return f

    def __repr__(self) -> str:
        return (
            f"Spool<{self.journal}:[{self.begin}, {self.end}) +{self._delta}, "
            f"codec {self.spec.compression_codec}, registers {list(self.registers.labels)}>"
        )

    # -- Transitions --------------------------------------------------------------------

    async def apply(
        self, req: pb.ReplicateRequest, *, primary: bool = False
    ) -> pb.ReplicateResponse:
        """Apply a content or proposal request.

        Content raises ``pb.ValidationError`` on a wrong ``content_delta``;
        proposals answer OK or PROPOSAL_MISMATCH (with this spool's fragment and
        registers).
        """
        if req.HasField("proposal"):
            return await self._apply_proposal(req.proposal, req.registers, primary)
        await self._apply_content(req.content, req.content_delta)
        return pb.ReplicateResponse()

    async def must_apply(self, req: pb.ReplicateRequest) -> None:
        """Apply a request that cannot fail (e.g. a rollback derived from this spool)."""
        resp = await self.apply(req, primary=False)
        if resp.status != pb.OK:
            raise AssertionError(f"spool refused {req}: status {resp.status}")

    async def _apply_content(self, content: bytes, content_delta: int) -> None:
        if content_delta != self._delta:
            raise pb.ValidationError(
                f"invalid ContentDelta ({content_delta}; expected {self._delta})"
            )
        offset = self.content_length + self._delta
        directory = self.config.directory
        worker = self.config.workers.for_directory(directory)
        timeout = self.config.write_timeout
        try:
            if self.file is None:
                if self.content_length != 0:
                    raise AssertionError("spool fragment not empty, but has no file")
                if self.config.recoverable and directory is not None:
                    create = functools.partial(
                        files.SpoolFile.create_recoverable,
                        directory,
                        self.journal,
                        self.spec.begin,
                        self.spec.compression_codec,
                    )
                else:
                    create = functools.partial(files.SpoolFile.create, directory)
                self.file = await worker.run(create, timeout)
            # Even a small write goes to the directory's thread: on a stalled disk a
            # 1-byte pwrite blocks like any other, and inline it would freeze the loop.
            await worker.run(functools.partial(self.file.pwrite, content, offset), timeout)
        except TimeoutError as e:
            # As below, the delta is unchanged. The write may still land later, past
            # the commit point; the worker's order puts any rewrite of it after.
            metrics.SPOOL_WRITE_FAILURES_TOTAL.inc()
            raise errors.SpoolWriteError(
                f"writing spool content of {self.journal}: {e} (--broker.spool-write-timeout)"
            ) from e
        except OSError as e:
            # Nothing is counted as written: the delta is unchanged, so the rollback
            # that follows the failed append ignores whatever part reached the file.
            metrics.SPOOL_WRITE_FAILURES_TOTAL.inc()
            raise errors.SpoolWriteError(
                f"writing spool content of {self.journal}: {e.strerror or e}"
            ) from e
        if len(content) >= self.config.threaded_write_size:
            await asyncio.to_thread(self._summer.update, content)
        else:
            self._summer.update(content)
        self._delta += len(content)

    async def _apply_proposal(
        self, proposal: pb.Fragment, registers: pb.LabelSet, primary: bool
    ) -> pb.ReplicateResponse:
        # Roll forward when the proposal is beyond anything we hold (a new peer catching
        # up, or recovery after a partition), or is the empty fragment at our end (the
        # primary telling replicas to start a new fragment).
        if proposal.end > self.spec.end + self._delta or (
            proposal.end == self.spec.end and proposal.begin == proposal.end
        ):
            await self._roll(proposal, registers, primary)

        # An exact proposal of our fragment and registers rolls back pending content.
        if fragments_equal(self.spec, proposal) and label_sets_equal(self.registers, registers):
            if self._delta != 0:
                metrics.SPOOL_ROLLBACKS_TOTAL.inc()
                metrics.SPOOL_ROLLBACK_BYTES_TOTAL.inc(self._delta)
            self._delta = 0
            self._summer = self._sum_state.copy()
            return pb.ReplicateResponse(status=pb.OK)

        # Our fragment extended by the pending content commits it.
        if self._delta != 0 and fragments_equal(self.next(), proposal):
            metrics.SPOOL_COMMITS_TOTAL.inc()
            metrics.SPOOL_COMMIT_BYTES_TOTAL.inc(self._delta)
            uncompressed = (proposal.end - self.spec.begin) - self._compress_target
            if (
                primary
                and self.spec.compression_codec != pb.NONE
                and uncompressed >= self.config.compression_batch_size
            ):
                self._compress_target = proposal.end - self.spec.begin
                await self._start_compression(self._compress_through, proposal.end)
            self.spec = _copy_fragment(proposal)
            self.observer.spool_commit(self.fragment)
            if self.first_append_time is None:
                self.first_append_time = self._now()
            self.registers = _copy_labels(registers)
            self._delta = 0
            self._sum_state = self._summer.copy()
            return pb.ReplicateResponse(status=pb.OK)

        resp = pb.ReplicateResponse(status=pb.PROPOSAL_MISMATCH)
        resp.fragment.CopyFrom(self.spec)
        resp.registers.CopyFrom(self.registers)
        return resp

    async def _roll(self, proposal: pb.Fragment, registers: pb.LabelSet, primary: bool) -> None:
        await self._compression_idle()
        if self._compressor is not None or (primary and self.spec.compression_codec != pb.NONE):
            await self._start_compression(self.finish_compression)
            await self._compression_idle()
        if self.content_length != 0:
            metrics.SPOOL_COMPLETED_TOTAL.inc()
            completed = copy.copy(self)
            completed.registers = _copy_labels(self.registers)
            completed.continued = proposal.end == self.spec.end
            self.observer.spool_complete(completed, primary)
        # Only a proposal strictly beyond our fragment brings its registers.
        if proposal.end > self.spec.end:
            self.registers = _copy_labels(registers)
        self.spec = pb.Fragment(
            journal=self.spec.journal,
            begin=proposal.end,
            end=proposal.end,
            compression_codec=proposal.compression_codec,
        )
        self.file = None
        self.first_append_time = None
        self.confirmed_end = proposal.end
        self.continued = False
        self._reset_content()

    # -- Compression ----------------------------------------------------------------------

    async def _start_compression(self, job: Callable[..., None], *args: object) -> None:
        """Run ``job(*args)`` in a worker thread once the previous job finished."""
        await self._compression_idle()
        self._compressing = asyncio.get_running_loop().run_in_executor(None, job, *args)

    async def _compression_idle(self) -> None:
        """Wait for the running compression job, if any (raising what it raised)."""
        fut = self._compressing
        if fut is None:
            return
        try:
            # Shielded: a cancelled caller leaves the job running and recorded, so the
            # next caller waits for it rather than starting a second job beside it.
            await asyncio.shield(fut)
        finally:
            if fut.done():
                self._compressing = None

    # Blocking: these run in a worker thread.

    def _compress_through(self, end: int) -> None:
        """Compress committed content through offset ``end`` into ``compressed_file``."""
        codec = self.spec.compression_codec
        if codec == pb.NONE:
            raise AssertionError("compression of a NONE spool")
        assert self.file is not None
        stop = end - self.spec.begin
        if self._compressor is not None:
            # Garden path: extend the existing compression with the newly committed span.
            try:
                self._compress_span(self._compressed_to, stop)
                if codec == pb.GZIP:
                    self._write_compressed(self._compressor.close())  # One member per batch.
                self._compressed_to = stop
                return
            except OSError as e:
                log.error("incremental compression failed; rebuilding: %s", e)
                self._compressor = None
        # Build (or rebuild) the compressed file from the start of the fragment.
        while True:
            try:
                if self.compressed_file is None:
                    self.compressed_file = files.SpoolFile.create(self.config.directory)
                self._compressed_pos = 0
                self._compressor = codecs.new_compressor(codec)
                self._compress_span(0, stop)
                if codec == pb.GZIP:
                    self._write_compressed(self._compressor.close())
                self._compressed_to = stop
                return
            except OSError as e:
                log.error("failed to compress spool (will retry): %s", e)
                self._compressor = None
                time.sleep(self.config.retry_interval)

    def _compress_span(self, start: int, stop: int) -> None:
        assert self.file is not None and self._compressor is not None
        pos = start
        while pos < stop:
            chunk = self.file.pread(min(files.COPY_BLOCK, stop - pos), pos)
            if not chunk:
                raise OSError(f"spool file ended at {pos}, before {stop}")
            self._write_compressed(self._compressor.compress(chunk))
            pos += len(chunk)

    def _write_compressed(self, data: bytes) -> None:
        if data:
            assert self.compressed_file is not None
            self.compressed_file.pwrite(data, self._compressed_pos)
            self._compressed_pos += len(data)

    def finish_compression(self) -> None:
        """Compress any remaining content and close the compressor (idempotent).

        Afterwards ``compressed_file`` holds exactly ``compressed_length`` bytes
        of the whole fragment's encoding (none for an empty fragment).
        """
        if self.spec.compression_codec == pb.NONE:
            raise AssertionError("compression of a NONE spool")
        if self.compressed_length != 0:
            return  # Already finished.
        if self._compressed_to < self.content_length:
            self._compress_through(self.spec.end)
        elif self._compressor is None:
            return  # Empty fragment.
        assert self._compressor is not None
        while True:
            try:
                assert self._compressor is not None
                self._write_compressed(self._compressor.close())
                self._compressor = None
                self.compressed_length = self._compressed_pos
                return
            except OSError as e:
                log.error("failed to finish compression (will retry): %s", e)
                time.sleep(self.config.retry_interval)
                self._compressor = None
                self._compress_through(self.spec.end)


def maybe_roll(
    spool: Spool, roll_to_offset: int, spec: pb.JournalSpec.Fragment, now: float
) -> pb.Fragment:
    """The primary's next proposal for ``spool`` (Gazette's `maybeRollFragment`).

    A new empty fragment at ``max(spool.end, roll_to_offset)`` under the spec's
    codec when the spool is empty, longer than ``spec.length``, asked to roll
    to another offset, or its first append fell in an earlier flush interval
    (UTC epoch buckets of ``spec.flush_interval``); otherwise the spool's own
    fragment. ``now`` is Unix seconds.
    """
    cl = spool.content_length
    flush = cl == 0 or cl > spec.length or (roll_to_offset not in (0, spool.begin))
    interval = spec.flush_interval.seconds
    if interval > 0:
        first = (
            int(spool.first_append_time.timestamp() // 1)
            if spool.first_append_time is not None
            else _GO_ZERO_TIME_UNIX
        )
        if _trunc_div(first, interval) != _trunc_div(int(now // 1), interval):
            flush = True

    nxt = _copy_fragment(spool.spec)
    if not flush:
        return nxt
    if roll_to_offset != 0:
        if nxt.end > roll_to_offset:
            raise ValueError(f"invalid roll_to_offset {roll_to_offset} (< end {nxt.end})")
        nxt.end = roll_to_offset
    nxt.begin = nxt.end
    nxt.ClearField("sum")
    nxt.compression_codec = spec.compression_codec
    return nxt


def _trunc_div(a: int, b: int) -> int:
    """Integer division truncating toward zero, as Go's ``/``."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q
