"""The recovery-log FSM: which files exist, as a sequence of recorded ops says.

Gazette's ``consumer/recoverylog/fsm.go``. Ops are chained: each carries the
sequence number and the CRC-32C checksum the FSM expects next (the checksum
of every previous op's encoding, continued), so an op recorded by a writer
that lost the log (a zombie) or out of order is refused. Files are *fnodes*
(the sequence number of the op that created them) with one or more links
(paths); each live fnode keeps the log segments its ops are in, which is all
a player needs to replay (:meth:`FSM.build_hints`).

Playing from hints, the FSM skips what the hints say is dead: ops of other
authors between hinted segments, and files created but deleted later
(:class:`~gazette.consumer.recoverylog.errors.FnodeNotTracked`: applied, but
no file action).
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import google_crc32c

from gazette.consumer.recoverylog import errors
from gazette.consumer.recoverylog.hints import live_log_segments
from gazette.consumer.recoverylog.recorded_op_pb2 import (
    FnodeSegments,
    FSMHints,
    Property,
    RecordedOp,
    Segment,
)

__all__ = ["FSM", "FnodeState", "checksum_update"]

#: The operations a RecordedOp may carry (none: a no-op, e.g. a hand-off barrier).
_KINDS: tuple[Literal["create", "link", "unlink", "write", "property"], ...] = (
    "create",
    "link",
    "unlink",
    "write",
    "property",
)


def checksum_update(checksum: int, payload: bytes) -> int:
    """The next op's expected checksum: CRC-32C of ``payload`` continued from ``checksum``."""
    return int(google_crc32c.extend(checksum, payload))


@dataclasses.dataclass
class FnodeState:
    links: set[str]
    segments: list[Segment]


class FSM:
    """State of a recovery log's files after the ops applied so far."""

    def __init__(self, hints: FSMHints) -> None:
        if not hints.log:
            raise errors.HintsError("hinted log not provided")
        fnodes, segments = live_log_segments(hints)
        self.next_seq_no = 1
        self.next_checksum = 0
        self.last_log = hints.log
        self.properties: dict[str, str] = {p.path: p.content for p in hints.properties}
        self.live_nodes: dict[int, FnodeState] = {}
        self.links: dict[str, int] = {}
        self._hinted_fnodes = fnodes
        self._hinted_segments = list(segments)
        if self._hinted_segments:
            first = self._hinted_segments[0]
            self.next_seq_no, self.next_checksum = first.first_seq_no, first.first_checksum

    @property
    def has_remaining_hints(self) -> bool:
        return bool(self._hinted_segments)

    @property
    def hinted_segments(self) -> list[Segment]:
        """The hinted segments still to be read (the next one first)."""
        return self._hinted_segments

    def apply(self, op: RecordedOp, payload: bytes) -> None:
        """Apply ``op`` (``payload``: its encoding, without frame header or write data).

        Raises an FSMError subclass when it does not apply; FnodeNotTracked is
        raised *after* the op was applied (sequence and checksum advanced).
        """
        if self._hinted_segments and self._hinted_segments[0].author != op.author:
            raise errors.NotHintedAuthor(op.seq_no)
        if op.seq_no != self.next_seq_no:
            raise errors.WrongSeqNo(op.seq_no)
        if op.checksum != self.next_checksum:
            raise errors.ChecksumMismatch(op.seq_no)

        kind = next((k for k in _KINDS if op.HasField(k)), None)
        err: errors.FSMError | None = None
        try:
            if kind == "create":
                self._create(op)
            elif self._hinted_fnodes and self._hinted_fnodes[0] == op.seq_no:
                raise errors.ExpectedHintedFnode(op.seq_no)
            elif kind == "link":
                self._link(op)
            elif kind == "unlink":
                self._unlink(op)
            elif kind == "write":
                self._write(op)
            elif kind == "property":
                self._property(op.property)
        except errors.FnodeNotTracked as e:
            err = e

        self.next_seq_no += 1
        self.next_checksum = checksum_update(self.next_checksum, payload)
        self.last_log = op.log
        if self._hinted_segments and self._hinted_segments[0].last_seq_no < self.next_seq_no:
            self._hinted_segments.pop(0)
            if self._hinted_segments:
                first = self._hinted_segments[0]
                self.next_seq_no, self.next_checksum = first.first_seq_no, first.first_checksum
        if err is not None:
            raise err

    def _create(self, op: RecordedOp) -> None:
        path = op.create.path
        if path in self.links:
            raise errors.LinkExists(op.seq_no)
        if path in self.properties:
            raise errors.PropertyExists(op.seq_no)
        fnode = op.seq_no
        if self._hinted_fnodes:
            if self._hinted_fnodes[0] != fnode:
                raise errors.FnodeNotTracked(op.seq_no)
            self._hinted_fnodes.pop(0)
        node = FnodeState({path}, [])
        self._extend(node, op)
        self.live_nodes[fnode] = node
        self.links[path] = fnode

    def _link(self, op: RecordedOp) -> None:
        path = op.link.path
        if path in self.links:
            raise errors.LinkExists(op.seq_no)
        if path in self.properties:
            raise errors.PropertyExists(op.seq_no)
        node = self.live_nodes.get(op.link.fnode)
        if node is None:
            raise errors.FnodeNotTracked(op.seq_no)
        node.links.add(path)
        self.links[path] = op.link.fnode
        self._extend(node, op)

    def _unlink(self, op: RecordedOp) -> None:
        node = self.live_nodes.get(op.unlink.fnode)
        if node is None:
            raise errors.FnodeNotTracked(op.seq_no)
        if op.unlink.path not in node.links:
            raise errors.NoSuchLink(op.seq_no)
        del self.links[op.unlink.path]
        node.links.discard(op.unlink.path)
        self._extend(node, op)
        if not node.links:
            del self.live_nodes[op.unlink.fnode]

    def _write(self, op: RecordedOp) -> None:
        node = self.live_nodes.get(op.write.fnode)
        if node is None:
            raise errors.FnodeNotTracked(op.seq_no)
        self._extend(node, op)

    def _property(self, prop: Property) -> None:
        if prop.path in self.links:
            raise errors.LinkExists()
        self.properties[prop.path] = prop.content

    @staticmethod
    def _extend(node: FnodeState, op: RecordedOp) -> None:
        segs = node.segments
        if segs and segs[-1].author == op.author and segs[-1].log == op.log:
            segs[-1].last_seq_no = op.seq_no
            segs[-1].last_offset = op.last_offset
            return
        segs.append(
            Segment(
                author=op.author,
                first_seq_no=op.seq_no,
                first_offset=op.first_offset,
                first_checksum=op.checksum,
                last_seq_no=op.seq_no,
                last_offset=op.last_offset,
                log=op.log,
            )
        )

    def build_hints(self, log: str) -> FSMHints:
        """Hints of the live files: a player of ``log`` needs only these segments."""
        hints = FSMHints(log=log)
        for fnode in sorted(self.live_nodes):
            node = FnodeSegments(fnode=fnode)
            for s in self.live_nodes[fnode].segments:
                seg = node.segments.add()
                seg.CopyFrom(s)
                if seg.log == log:
                    seg.log = ""
            hints.live_nodes.append(node)
        for path, content in self.properties.items():
            hints.properties.add(path=path, content=content)
        return hints
