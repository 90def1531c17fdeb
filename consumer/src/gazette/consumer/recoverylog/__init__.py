"""Recovery logs: the journal a shard's store is recorded into, and the hints to replay it.

A recovery log is a journal (content type ``application/x-gazette-recoverylog``)
of framed `RecordedOp` messages describing file operations of a store. An
`FSMHints` names the log and, per live file node, the `Segment` ranges of the
log holding its operations, so a new replica replays only what it needs.

Key types (generated, from `recorded_op_pb2`): `RecordedOp`, `Segment`,
`FnodeSegments`, `FSMHints`, `Property`. Validation: `validate_segment`,
`validate_fsm_hints` (raising `gazette.broker.protocol.ValidationError`).

    from gazette.consumer import recoverylog

    recoverylog.validate_fsm_hints(hints)
"""

from gazette.consumer.recoverylog.recorded_op_pb2 import (
    FnodeSegments,
    FSMHints,
    Property,
    RecordedOp,
    Segment,
)
from gazette.consumer.recoverylog.validation import validate_fsm_hints, validate_segment

__all__ = [
    "FSMHints",
    "FnodeSegments",
    "Property",
    "RecordedOp",
    "Segment",
    "validate_fsm_hints",
    "validate_segment",
]
