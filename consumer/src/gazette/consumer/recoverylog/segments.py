"""Segments of a recovery log, and the ordered set of them hints describe.

Gazette's ``consumer/recoverylog/segment.go``. A Segment is a run of
consecutive ops of one author in one log: sequence numbers
``[first_seq_no, last_seq_no]`` at byte offsets from ``first_offset`` (a
lower bound) to ``last_offset`` (0: not known yet). A :class:`SegmentSet`
keeps segments ordered on sequence number, merging those that overlap or
touch (same author and log), and refuses any that would break its order.
"""

from __future__ import annotations

import bisect
import contextlib
from collections.abc import Iterator

from gazette.consumer.recoverylog import errors
from gazette.consumer.recoverylog.recorded_op_pb2 import Segment
from gazette.consumer.recoverylog.validation import validate_segment

__all__ = ["SegmentSet", "reduce_segments"]


class _NotReducible(Exception):
    pass


def _non_zero_and_less(a: int, b: int) -> bool:
    return a != 0 and a < b


def _show(s: Segment) -> str:
    return (
        f"Segment(author={s.author}, seq={s.first_seq_no}..{s.last_seq_no},"
        f" offsets={s.first_offset}..{s.last_offset}, log={s.log!r})"
    )


def reduce_segments(a: Segment, b: Segment) -> Segment:
    """``a`` and ``b`` merged into one Segment; raises SegmentError if they conflict,
    and ``_NotReducible`` if they are disjoint (or touch across authors or logs)."""
    if a.first_seq_no > b.first_seq_no or (
        a.first_seq_no == b.first_seq_no and a.last_seq_no < b.last_seq_no
    ):
        a, b = b, a
    same_log = a.log == b.log
    if a.first_seq_no < b.first_seq_no and same_log and a.first_offset > b.first_offset:
        raise errors.SegmentError(f"expected monotonic FirstOffset: {_show(a)} vs {_show(b)}")
    if a.first_seq_no < b.first_seq_no and a.last_offset == 0 and b.last_offset != 0:
        raise errors.SegmentError(
            f"expected preceding Segment to also include LastOffset: {_show(a)} vs {_show(b)}"
        )
    if a.last_offset == 0 and not same_log:
        raise errors.SegmentError(
            "Segment cannot use a different log where preceding Segment.LastOffset is zero:"
            f" {_show(a)} vs {_show(b)}"
        )
    if same_log and (
        (a.last_seq_no <= b.last_seq_no and _non_zero_and_less(b.last_offset, a.last_offset))
        or (a.last_seq_no >= b.last_seq_no and _non_zero_and_less(a.last_offset, b.last_offset))
    ):
        raise errors.SegmentError(f"expected monotonic LastOffset: {_show(a)} vs {_show(b)}")
    if a.first_seq_no == b.first_seq_no and a.first_checksum != b.first_checksum:
        raise errors.SegmentError(f"expected FirstChecksum equality: {_show(a)} vs {_show(b)}")
    if a.last_seq_no + 1 < b.first_seq_no:
        raise _NotReducible
    if a.last_seq_no + 1 == b.first_seq_no and (a.author != b.author or not same_log):
        raise _NotReducible
    if a.author != b.author:
        raise errors.SegmentError(f"expected Segment Author equality: {_show(a)} vs {_show(b)}")
    if not same_log:
        raise errors.SegmentError(f"expected Segment Log equality: {_show(a)} vs {_show(b)}")
    out = Segment()
    out.CopyFrom(a)
    if a.first_seq_no == b.first_seq_no and a.first_offset < b.first_offset:
        out.first_offset = b.first_offset
    if a.last_seq_no == b.last_seq_no and a.last_offset == 0:
        out.last_offset = b.last_offset
    if a.last_seq_no < b.last_seq_no:
        out.last_seq_no, out.last_offset = b.last_seq_no, b.last_offset
    return out


class SegmentSet:
    """Segments ordered on sequence number, merged where they overlap or touch."""

    def __init__(self) -> None:
        self.segments: list[Segment] = []

    def __len__(self) -> int:
        return len(self.segments)

    def __getitem__(self, i: int) -> Segment:
        return self.segments[i]

    def __iter__(self) -> Iterator[Segment]:
        return iter(self.segments)

    def add(self, segment: Segment) -> None:
        """Add ``segment``, merging it with its neighbours where they reduce."""
        validate_segment(segment)
        segs = self.segments
        begin = bisect.bisect_left([s.first_seq_no for s in segs], segment.first_seq_no)
        if begin > 0:
            with contextlib.suppress(_NotReducible):
                segment, begin = reduce_segments(segs[begin - 1], segment), begin - 1
        end = begin
        while end != len(segs):
            try:
                segment = reduce_segments(segs[end], segment)
            except _NotReducible:
                break
            end += 1
        segs[begin:end] = [segment]

    def intersect(self, log: str, first_offset: int, last_offset: int) -> list[Segment]:
        """Segments (all of ``log``) overlapping offsets ``[first_offset, last_offset)``."""
        if last_offset < first_offset:
            raise ValueError("invalid range")
        segs = self.segments
        for s in segs:
            if s.log != log:
                raise ValueError("segment.log != log")
        j = bisect.bisect_left([s.first_offset for s in segs], last_offset)
        i = j
        while i != 0 and (segs[i - 1].last_offset == 0 or segs[i - 1].last_offset > first_offset):
            i -= 1
        return segs[i:j]
