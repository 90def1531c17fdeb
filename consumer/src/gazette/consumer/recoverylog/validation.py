"""Validity of recovery-log Segments and FSMHints (Gazette `segment.go`, `recorded_op_extensions.go`)."""

from __future__ import annotations

from gazette.broker import protocol as pb
from gazette.consumer.recoverylog import recorded_op_pb2

__all__ = ["validate_fsm_hints", "validate_segment"]


def validate_segment(s: recorded_op_pb2.Segment, log: str | None = None) -> None:
    """A Segment is consistent: non-zero author, positive sequence numbers, ordered offsets, valid log.

    `log`, if given, stands in for the segment's log (FSMHints leave it empty
    in segments of the hinted log).
    """
    if s.author == 0:
        raise pb.ValidationError("Author is zero")
    if s.first_seq_no <= 0:
        raise pb.ValidationError("FirstSeqNo <= 0")
    if s.first_offset < 0:
        raise pb.ValidationError("FirstOffset < 0")
    if s.last_seq_no < s.first_seq_no:
        raise pb.ValidationError("LastSeqNo < segment.FirstSeqNo")
    if s.last_offset != 0 and s.last_offset <= s.first_offset:
        raise pb.ValidationError("LastOffset <= segment.FirstOffset")
    try:
        pb.validate_journal(s.log if log is None else log)
    except pb.ValidationError as e:
        raise e.within("Log") from None


def validate_fsm_hints(h: recorded_op_pb2.FSMHints) -> None:
    """Every segment valid, reading an empty segment log as `h.log`, which segments must not repeat."""
    for node in h.live_nodes:
        for segment in node.segments:
            if segment.log == "":
                log = h.log
            elif segment.log == h.log:
                raise pb.ValidationError("contained segment.Log duplicates FSMHints.Log")
            else:
                log = segment.log
            try:
                validate_segment(segment, log)
            except pb.ValidationError as e:
                raise e.within("Segment") from None
