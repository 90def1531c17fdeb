"""Errors of recovery logs.

::

    RecoveryLogError              anything about a recovery log or its hints
    ├── SegmentError              segments that can't be ordered or merged
    ├── HintsError                hints that don't describe a replayable log
    └── FSMError                  an op the FSM did not apply (see ``.reason``)
        ├── NotHintedAuthor       the op's author isn't the next hinted one
        ├── WrongSeqNo            not the next sequence number
        ├── ChecksumMismatch      not chained to the previous op's checksum
        ├── FnodeNotTracked       applied, but its file is dead (skip the file action)
        ├── ExpectedHintedFnode   a non-create op where hints expect a create
        ├── LinkExists            a create or link over an existing path
        ├── PropertyExists        a create or link over a property
        └── NoSuchLink            an unlink of a path the file doesn't have

FSM errors are the conditions of Gazette's ``consumer/recoverylog/fsm.go``;
playback expects some of them (a zombie's ops, ops of dead files) and
ignores those quietly.
"""

from __future__ import annotations

__all__ = [
    "ChecksumMismatch",
    "ExpectedHintedFnode",
    "FSMError",
    "FnodeNotTracked",
    "HintsError",
    "LinkExists",
    "NoSuchLink",
    "NotHintedAuthor",
    "PropertyExists",
    "RecoveryLogError",
    "SegmentError",
    "WrongSeqNo",
]


class RecoveryLogError(Exception):
    """Base of recovery-log errors."""


class SegmentError(RecoveryLogError):
    """Segments that violate the ordering a SegmentSet keeps."""


class HintsError(RecoveryLogError):
    """FSMHints that don't describe a log a player could replay."""


class FSMError(RecoveryLogError):
    """An op the FSM refused (or, for FnodeNotTracked, applied without a file)."""

    text = "op not applied"

    def __init__(self, seq_no: int = 0) -> None:
        super().__init__(f"{self.text} (seq_no {seq_no})" if seq_no else self.text)
        self.seq_no = seq_no


class NotHintedAuthor(FSMError):
    text = "op author does not match the next hinted author"


class WrongSeqNo(FSMError):
    text = "wrong sequence number"


class ChecksumMismatch(FSMError):
    text = "checksum mismatch"


class FnodeNotTracked(FSMError):
    text = "fnode not tracked"


class ExpectedHintedFnode(FSMError):
    text = "op is not create, and an Fnode was hinted"


class LinkExists(FSMError):
    text = "link exists"


class PropertyExists(FSMError):
    text = "property exists"


class NoSuchLink(FSMError):
    text = "fnode has no such link"
