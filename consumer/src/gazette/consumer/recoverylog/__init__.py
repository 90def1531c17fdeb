"""Recovery logs: the journal a shard's store is recorded into, and the hints to replay it.

A recovery log is a journal (content type ``application/x-gazette-recoverylog``)
of framed `RecordedOp` messages describing file operations of a store. An
`FSMHints` names the log and, per live file node, the `Segment` ranges of the
log holding its operations, so a new replica replays only what it needs.

Key types (generated, from `recorded_op_pb2`): `RecordedOp`, `Segment`,
`FnodeSegments`, `FSMHints`, `Property`. Validation: `validate_segment`,
`validate_fsm_hints` (raising `gazette.broker.protocol.ValidationError`).

The log's logic, as Gazette's ``consumer/recoverylog`` (the stores recorded
through them, hints in etcd and standbys come next):

* :mod:`~.ops` — ops as the log holds them (fixed frames), author registers;
* :mod:`~.fsm` — :class:`FSM`, the files a sequence of ops makes, with their
  CRC-32C-chained sequence and the segments each live file needs;
* :mod:`~.segments` — :class:`SegmentSet`, ordered and merged segments;
* :mod:`~.hints` — FSMHints and their etcd encoding (Go's JSON);
* :mod:`~.recorder` — :class:`Recorder`, file operations appended to the log,
  fenced by the log's ``author`` register;
* :mod:`~.player` — :class:`Player`, a log replayed into a directory, and the
  hand-off that makes a new recorder the log's only writer;
* :mod:`~.errors` — the error hierarchy.

Usage::

    from gazette.consumer import recoverylog

    fsm = recoverylog.FSM(recoverylog.FSMHints(log="recovery/logs/shard-000"))
    frame, payload = recoverylog.encode_op(op)
    fsm.apply(op, payload)
    etcd_value = recoverylog.hints_to_json(fsm.build_hints(fsm.last_log))
"""

from gazette.consumer.recoverylog import errors
from gazette.consumer.recoverylog.fsm import FSM, checksum_update
from gazette.consumer.recoverylog.hints import hints_from_value, hints_to_json, live_log_segments
from gazette.consumer.recoverylog.ops import decode_op, encode_op, format_author
from gazette.consumer.recoverylog.player import Player
from gazette.consumer.recoverylog.recorded_op_pb2 import (
    FnodeSegments,
    FSMHints,
    Property,
    RecordedOp,
    Segment,
)
from gazette.consumer.recoverylog.recorder import Recorder, author_selector
from gazette.consumer.recoverylog.segments import SegmentSet
from gazette.consumer.recoverylog.validation import validate_fsm_hints, validate_segment

__all__ = [
    "FSM",
    "FSMHints",
    "FnodeSegments",
    "Player",
    "Property",
    "RecordedOp",
    "Recorder",
    "Segment",
    "SegmentSet",
    "author_selector",
    "checksum_update",
    "decode_op",
    "encode_op",
    "errors",
    "format_author",
    "hints_from_value",
    "hints_to_json",
    "live_log_segments",
    "validate_fsm_hints",
    "validate_segment",
]
