"""Recorder: a store's file operations, appended to its recovery log as they happen.

Gazette's ``consumer/recoverylog/recorder.go``. Each operation becomes a
RecordedOp (sequence number and checksum from the :class:`FSM`, the
recorder's author) appended to the log through the shard's
:class:`~gazette.broker.client.AppendService`, in order, and applied to the
FSM so :meth:`Recorder.build_hints` knows which segments hold live files.

Fencing: every append checks the log's ``author`` register equals this
recorder's author. A newer primary's player sets that register when it takes
over (its hand-off), so a zombie's appends never land: the append service
retries them until the zombie's shard is cancelled, and its commits never
resolve.

Paths are recorded relative to the recorder's directory, as ``/name``, so a
log replays into any directory.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
from collections.abc import Iterator

from gazette.broker import client
from gazette.broker import protocol as pb
from gazette.consumer.recoverylog import errors
from gazette.consumer.recoverylog.fsm import FSM
from gazette.consumer.recoverylog.ops import encode_op, format_author
from gazette.consumer.recoverylog.recorded_op_pb2 import FSMHints, Property, RecordedOp

__all__ = ["PROPERTY_FILES", "Recorder", "author_selector"]

#: Paths recorded as properties (their whole content in one op) rather than as
#: files, as Gazette's recorder does: RocksDB's ``IDENTITY``, written once.
PROPERTY_FILES = frozenset({"/IDENTITY"})


def author_selector(author: int) -> pb.LabelSelector:
    """The register check of a recorder: ``author=<base32 author>``."""
    sel = pb.LabelSelector()
    sel.include.labels.add(name="author", value=format_author(author))
    return sel


class Recorder:
    """Records file operations under ``directory`` into journal ``log``."""

    def __init__(
        self,
        fsm: FSM,
        author: int,
        directory: str | os.PathLike[str],
        appends: client.AppendService,
        log: str,
    ) -> None:
        path = pathlib.Path(directory)
        if not path.is_absolute():
            raise ValueError(f"recorder directory must be absolute: {path}")
        self.fsm = fsm
        self.author = author
        self.directory = path
        self.appends = appends
        self.log = log
        self._request = pb.AppendRequest(journal=log)
        self._request.check_registers.CopyFrom(author_selector(author))
        self._write_head = 0
        self._tracked: client.AsyncAppend | None = None
        # Set while ops are gathered into one append (see _one_append).
        self._open: client.AsyncAppend | None = None

    async def start(self) -> None:
        """Learn the log's write head; when recording into a log other than the one
        recovered from, take it over by setting its ``author`` register."""
        head = await client.append(self.appends.client, self.log, b"", through_head_gaps=True)
        self._write_head = int(head.commit.end)
        if self.log != self.fsm.last_log:
            request = pb.AppendRequest(journal=self.log)
            request.union_registers.labels.add(name="author", value=format_author(self.author))
            op = RecordedOp(
                seq_no=self.fsm.next_seq_no, checksum=self.fsm.next_checksum, author=self.author
            )
            frame, payload = encode_op(op)
            aa = self.appends.append(request, frame)
            self._apply(op, payload)
            await aa

    def rel(self, path: str | os.PathLike[str]) -> str:
        """``path`` as recorded: relative to the directory, rooted at ``/``."""
        p = pathlib.Path(path)
        if p.is_absolute():
            p = p.relative_to(self.directory)
        return "/" + p.as_posix().lstrip("/")

    # -- operations -------------------------------------------------------

    def record_create(self, path: str | os.PathLike[str]) -> int:
        """A new (or truncated) file at ``path``; returns its fnode."""
        rel = self.rel(path)
        if rel in self.fsm.properties or rel in PROPERTY_FILES:
            raise errors.RecoveryLogError(f"{rel} is a property, not a file")
        old = self.fsm.links.get(rel)
        op = RecordedOp(create=RecordedOp.Create(path=rel))
        with self._one_append():
            if old is not None:
                self._record(RecordedOp(unlink=RecordedOp.Link(fnode=old, path=rel)))
            self._record(op)
        return int(op.seq_no)

    def record_write_at(self, fnode: int, data: bytes, offset: int) -> None:
        """``data`` written at ``offset`` of file ``fnode``."""
        if fnode not in self.fsm.live_nodes:
            raise errors.RecoveryLogError(f"fnode {fnode} is not a live file")
        op = RecordedOp(write=RecordedOp.Write(fnode=fnode, offset=offset, length=len(data)))
        self._record(op, data)

    def record_remove(self, path: str | os.PathLike[str]) -> None:
        rel = self.rel(path)
        fnode = self._fnode(rel)
        self._record(RecordedOp(unlink=RecordedOp.Link(fnode=fnode, path=rel)))

    def record_link(self, src: str | os.PathLike[str], target: str | os.PathLike[str]) -> None:
        fnode = self._fnode(self.rel(src))
        self._record(RecordedOp(link=RecordedOp.Link(fnode=fnode, path=self.rel(target))))

    def record_rename(self, src: str | os.PathLike[str], target: str | os.PathLike[str]) -> None:
        """``src`` renamed over ``target`` (already done on disk: a property's content
        is read from ``target``)."""
        s, t = self.rel(src), self.rel(target)
        fnode = self._fnode(s)
        replaced = self.fsm.links.get(t)
        # One append: a log never ends between the old target's unlink and the new
        # link (a replay would find no file at ``target`` at all).
        with self._one_append():
            if replaced is not None:
                self._record(RecordedOp(unlink=RecordedOp.Link(fnode=replaced, path=t)))
            if t in PROPERTY_FILES:
                content = (self.directory / t.lstrip("/")).read_text()
                self._record(RecordedOp(property=Property(path=t, content=content)))
            else:
                self._record(RecordedOp(link=RecordedOp.Link(fnode=fnode, path=t)))
            self._record(RecordedOp(unlink=RecordedOp.Link(fnode=fnode, path=s)))

    def record_property(self, path: str | os.PathLike[str], content: str) -> None:
        """Small text file ``path`` now holds ``content``, whole, in one op.

        For files replaced as a whole whose every version must be complete in any
        replay (a pointer such as RocksDB's ``CURRENT``): a player writes the last
        content recorded. A path is a property or a file, never both.
        """
        rel = self.rel(path)
        if rel in self.fsm.links:
            raise errors.RecoveryLogError(f"{rel} is a file, not a property")
        self._record(RecordedOp(property=Property(path=rel, content=content)))

    def barrier(self, wait_for: list[client.AsyncOperation] | None = None) -> client.AsyncAppend:
        """An empty append after everything recorded so far (and after ``wait_for``)."""
        with self.appends.start_append(self._request, wait_for or ()) as aa:
            pass
        return aa

    async def build_hints(self) -> FSMHints:
        """Hints of the live files, once every op they name is durably in the log."""
        hints = self.fsm.build_hints(self.log)
        await self.barrier()
        return hints

    def _fnode(self, rel: str) -> int:
        fnode = self.fsm.links.get(rel)
        if fnode is None:
            raise errors.RecoveryLogError(f"{rel} is not a recorded file")
        return fnode

    @contextlib.contextmanager
    def _one_append(self) -> Iterator[None]:
        """Ops recorded inside go to the log in one append: all of them, or none."""
        if self._open is not None:
            yield
            return
        with self.appends.start_append(self._request) as aa:
            self._open = aa
            try:
                yield
            finally:
                self._open = None

    def _record(self, op: RecordedOp, data: bytes = b"") -> None:
        op.author = self.author
        op.seq_no = self.fsm.next_seq_no
        op.checksum = self.fsm.next_checksum
        frame, payload = encode_op(op)
        with self._one_append():
            aa = self._open
            assert aa is not None
            aa.write(frame)
            if data:
                aa.write(data)
        # The op is somewhere after the write head we know of (a lower bound).
        tracked = self._tracked
        if tracked is not None and tracked.done() and tracked.error is None:
            self._write_head = max(self._write_head, int(tracked.response.commit.end))
        if tracked is None or tracked.done():
            self._tracked = aa
        self._apply(op, payload)

    def _apply(self, op: RecordedOp, payload: bytes) -> None:
        op.first_offset, op.last_offset, op.log = self._write_head, 0, self.log
        self.fsm.apply(op, payload)
