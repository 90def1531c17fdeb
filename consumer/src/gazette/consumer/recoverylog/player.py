"""Player: a recovery log replayed into a directory, and the hand-off to a new recorder.

Gazette's ``consumer/recoverylog/playback.go``, for one log. From hints (or
from the log's start without any), the player reads the log up to its write
head, applies each op to an :class:`FSM` and performs the file actions of
those it applied in a staging folder (``<dir>/.fnodes/<fnode>``); ops of
other authors, of dead files or repeated by a zombie are skipped as the FSM
says. At the head it either stops (:meth:`Player.play` without an author:
``gazctl shards recover``), or hands the log off: it appends a no-op whose
append sets the ``author`` register to the new author, reads on, and is done
once its own no-op applied — proof that no other writer got in between. Then
the live files are linked into place.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import pathlib
import shutil
from typing import BinaryIO

from gazette.broker import client
from gazette.broker import protocol as pb
from gazette.consumer.recoverylog import errors
from gazette.consumer.recoverylog.fsm import FSM
from gazette.consumer.recoverylog.ops import HEADER_LEN, MAGIC, decode_op, encode_op, format_author
from gazette.consumer.recoverylog.recorded_op_pb2 import FSMHints, RecordedOp

__all__ = ["Player"]

log = logging.getLogger(__name__)

#: FSM refusals that are expected in a healthy log (zombies, dead files, repeats).
_QUIET = (errors.NotHintedAuthor, errors.WrongSeqNo, errors.FnodeNotTracked)


class Player:
    """Replays ``hints.log`` into ``directory`` (which it empties first)."""

    def __init__(
        self,
        jc: client.JournalClient,
        hints: FSMHints,
        directory: str | os.PathLike[str],
    ) -> None:
        self.jc = jc
        self.hints = hints
        self.directory = pathlib.Path(directory)
        self.fsm = FSM(hints)
        self._staging = self.directory / ".fnodes"
        self._files: dict[int, BinaryIO] = {}
        self._buf = bytearray()
        self._offset = 0  # Log offset of _buf[0].
        self._last_applied = (0, 0)  # (author, seq_no) of the last op the FSM applied.

    async def play(
        self,
        handoff_author: int | None = None,
        *,
        tailing: asyncio.Event | None = None,
        tail_until: asyncio.Event | None = None,
        end_offset: int | None = None,
    ) -> FSM:
        """Replay to the write head (handing the log off to ``handoff_author`` if given).

        A hot standby passes ``tail_until``: having reached the head (``tailing``
        is set then), it goes on applying what the primary appends until the
        event is set — its promotion — and only then hands off.

        ``end_offset`` stops playback there instead (the files as they were when
        the log ended at that offset: a point in time, or a crash, replayed); it
        cannot be combined with a hand-off or with tailing.
        """
        if end_offset is not None and (handoff_author is not None or tail_until is not None):
            raise ValueError("end_offset excludes a hand-off and tailing")
        try:
            return await self._play(handoff_author, tailing, tail_until, end_offset)
        except BaseException:
            # Leave nothing half-played behind (Gazette removes the directory too).
            self._abort()
            raise

    def _abort(self) -> None:
        for staged_file in self._files.values():
            staged_file.close()
        self._files.clear()
        shutil.rmtree(self.directory, ignore_errors=True)

    async def _play(
        self,
        handoff_author: int | None,
        tailing: asyncio.Event | None,
        tail_until: asyncio.Event | None,
        end_offset: int | None,
    ) -> FSM:
        journal = self.hints.log
        if self.directory.exists():
            shutil.rmtree(self.directory)
        self._staging.mkdir(parents=True)
        # The write head of every log the hints name (a shard that recovered from one
        # log and records into another has hints spanning both).
        heads: dict[str, int] = {}
        for log_name in (journal, *(seg.log or journal for seg in self.fsm.hinted_segments)):
            if log_name not in heads:
                heads[log_name] = int(
                    (await client.append(self.jc, log_name, b"", through_head_gaps=True)).commit.end
                )
        if end_offset is not None:
            heads[journal] = min(heads[journal], end_offset)
        for seg in self.fsm.hinted_segments:
            head = heads[seg.log or journal]
            if seg.first_offset >= head or seg.last_offset > head:
                raise errors.RecoveryLogError(
                    f"{seg.log or journal}: hinted segment {seg.first_seq_no}..{seg.last_seq_no}"
                    f" lies beyond the write head {head} (possible data loss)"
                )
        # Hinted segments of other logs come first: read each where it lies.
        while self.fsm.has_remaining_hints:
            seg = self.fsm.hinted_segments[0]
            other = seg.log or journal
            if other == journal:
                break
            progress = (len(self.fsm.hinted_segments), self.fsm.next_seq_no)
            self._buf.clear()
            self._offset = seg.first_offset
            await self._read(other, seg.first_offset, seg.last_offset or heads[other])
            if (len(self.fsm.hinted_segments), self.fsm.next_seq_no) == progress:
                raise errors.RecoveryLogError(
                    f"{other}: hinted segment {seg.first_seq_no}..{seg.last_seq_no} at"
                    f" {seg.first_offset} was not found (possible data loss)"
                )
        self._buf.clear()
        head = heads[journal]
        start = self.fsm.hinted_segments[0].first_offset if self.fsm.has_remaining_hints else 0
        self._offset = start
        await self._read(journal, start, head)
        if tailing is not None:
            tailing.set()
        if tail_until is not None and not tail_until.is_set():
            follow = asyncio.ensure_future(self._read(journal, self._offset + len(self._buf), None))
            until = asyncio.ensure_future(tail_until.wait())
            try:
                await asyncio.wait((follow, until), return_when=asyncio.FIRST_COMPLETED)
            finally:
                for t in (follow, until):
                    t.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await follow
            failure = follow.exception() if not follow.cancelled() else None
            if failure is not None:
                raise failure
        while handoff_author is not None:
            op = RecordedOp(
                seq_no=self.fsm.next_seq_no,
                checksum=self.fsm.next_checksum,
                author=handoff_author,
            )
            frame, _ = encode_op(op)
            request = pb.AppendRequest(journal=journal)
            request.union_registers.labels.add(name="author", value=format_author(handoff_author))
            resp = await client.append(self.jc, request, frame, through_head_gaps=True)
            await self._read(journal, self._offset + len(self._buf), int(resp.commit.end))
            if self._last_applied == (handoff_author, op.seq_no):
                break  # Our no-op applied: nobody wrote in between, the log is ours.
            log.info("%s: another writer came first; handing off again", journal)
        if self.fsm.has_remaining_hints:
            raise errors.RecoveryLogError(f"{journal}: hinted segments remain after playback")
        self._make_live()
        return self.fsm

    async def _read(self, journal: str, offset: int, until: int | None) -> None:
        """Read and apply ``[offset, until)`` (``until`` None: for ever, following the head)."""
        if until is not None and offset >= until:
            return
        request = pb.ReadRequest(journal=journal, offset=offset, end_offset=until or 0, block=True)
        async with client.RetryReader(self.jc, request) as rr:
            async for chunk in rr:
                start, expected = rr.offset - len(chunk), self._offset + len(self._buf)
                if start != expected:
                    self._jump(journal, expected, start)
                self._buf += chunk
                self._drain(journal)

    def _jump(self, journal: str, expected: int, start: int) -> None:
        """The log's content resumes at ``start``, past ``expected`` (pruned fragments).

        Fine when nothing still to be played lies in between: the next hinted segment
        begins at or after ``start`` (``gazctl shards prune`` deletes only fragments
        that no hinted segment overlaps). Anything else is lost content.
        """
        nxt = self.fsm.hinted_segments[0] if self.fsm.has_remaining_hints else None
        if (
            start < expected
            or nxt is None
            or (nxt.log or self.hints.log) != journal
            or nxt.first_offset < start
        ):
            raise errors.RecoveryLogError(
                f"{journal}: the log skips from {expected} to {start}, over content still to"
                " be played (deleted fragments?)"
            )
        log.info("%s: skipping pruned log content from %d to %d", journal, expected, start)
        self._buf.clear()
        self._offset = start

    def _drain(self, journal: str) -> None:
        buf, pos = self._buf, 0
        while True:
            if len(buf) - pos < HEADER_LEN:
                break
            if buf[pos : pos + 4] != MAGIC:
                nxt = buf.find(MAGIC, pos + 1)
                skip = (nxt if nxt != -1 else len(buf) - 3) - pos
                log.warning("%s@%d: %d bytes of garbage skipped", journal, self._offset + pos, skip)
                pos += max(skip, 0)
                if nxt == -1:
                    break
                continue
            size = int.from_bytes(buf[pos + 4 : pos + 8], "little")
            if len(buf) - pos < HEADER_LEN + size:
                break
            op, payload, size_ = decode_op(bytes(buf[pos : pos + HEADER_LEN + size]))
            end = pos + size_
            length = op.write.length if op.HasField("write") else 0
            if len(buf) - end < length:
                break
            data = bytes(buf[end : end + length])
            op.first_offset = self._offset + pos
            op.last_offset = self._offset + end + length
            op.log = journal
            self._apply(op, payload, data)
            pos = end + length
        del buf[:pos]
        self._offset += pos

    def _apply(self, op: RecordedOp, payload: bytes, data: bytes) -> None:
        try:
            self.fsm.apply(op, payload)
        except _QUIET:
            # A zombie's or a repeated op (not applied), or one of a file that is dead
            # later (applied, but with no file action): either way, nothing to do.
            return
        except errors.FSMError as e:
            log.warning("%s: op %d not applied: %s", op.log, op.seq_no, e)
            return
        self._last_applied = (op.author, op.seq_no)
        if op.HasField("create"):
            self._files[op.seq_no] = open(  # noqa: SIM115 - kept open for its writes.
                self._staging / str(op.seq_no), "xb"
            )
        elif op.HasField("unlink"):
            fnode = op.unlink.fnode
            if fnode not in self.fsm.live_nodes:
                staged = self._files.pop(fnode, None)
                if staged is not None:
                    staged.close()
                (self._staging / str(fnode)).unlink(missing_ok=True)
        elif op.HasField("write"):
            out = self._files[op.write.fnode]
            out.seek(op.write.offset)
            out.write(data)

    def _make_live(self) -> None:
        for staged_file in self._files.values():
            staged_file.close()
        self._files.clear()
        for fnode, node in self.fsm.live_nodes.items():
            staged = self._staging / str(fnode)
            for link in node.links:
                target = self.directory / link.lstrip("/")
                target.parent.mkdir(parents=True, exist_ok=True)
                os.link(staged, target)
            staged.unlink()
        leftover = list(self._staging.iterdir())
        if leftover:
            raise errors.RecoveryLogError(f"staged files of no live file: {leftover}")
        self._staging.rmdir()
        for path, content in self.fsm.properties.items():
            target = self.directory / path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "x") as text:
                text.write(content)
