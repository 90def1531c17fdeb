"""Errors of the message layer.

Hierarchy::

    Exception
     └── MessageError                 anything this package raises on purpose
          ├── InvalidUUID              a UUID's text does not parse (also a ValueError)
          ├── UnknownContentType       no Framing is registered for a content-type
          ├── EmptyListResponse        a mapping found no journal to map onto
          ├── FramingError             a frame could not be encoded or decoded
          │    ├── UnexpectedEOF            content ended inside a frame
          │    └── DesyncDetected           fixed framing: bytes that are not a frame
          ├── ReadError                reading messages of ``journal`` at ``offset`` failed
          │    └── DecodeError              the frame at ``offset`` does not parse
          └── ReplayError              a Sequencer's replay read the wrong messages, or failed

Framings raise :class:`FramingError` without knowing where the bytes came
from; the read iterators wrap them (``raise DecodeError(...) from e``) so
that every failure of a read names the journal and the byte offset of the
frame: ``examples/foo@1234: invalid JSON: ...``. A consumer fails on them
loudly; an iterator which raised one stays usable, positioned after the
bad bytes, for tools that want to go on (Gazette `message/reader.go` does
the same with its wrapped errors).
"""

from __future__ import annotations

__all__ = [
    "DecodeError",
    "DesyncDetected",
    "EmptyListResponse",
    "FramingError",
    "InvalidUUID",
    "MessageError",
    "ReadError",
    "ReplayError",
    "UnexpectedEOF",
    "UnknownContentType",
]


class MessageError(Exception):
    """Base of every error raised on purpose by :mod:`gazette.message`."""


class InvalidUUID(MessageError, ValueError):
    """A UUID's text form does not parse (Go ``uuid.Parse`` wording)."""


class UnknownContentType(MessageError):
    """No Framing is registered for ``content_type``."""

    def __init__(self, content_type: str) -> None:
        self.content_type = content_type
        super().__init__(f"unrecognized content-type ({content_type})")


class EmptyListResponse(MessageError):
    """A mapping's partitions listed no journal (Gazette ``ErrEmptyListResponse``)."""

    def __init__(self) -> None:
        super().__init__("empty ListResponse")


class FramingError(MessageError):
    """A frame could not be encoded or decoded.

    ``resume`` is, for decoding, the buffer index where the next frame may
    start: the bad bytes (a whole JSON line, a whole CSV record, the
    garbage before a fixed frame's magic word) are consumed.
    """

    def __init__(self, message: str, *, resume: int = -1) -> None:
        self.resume = resume
        super().__init__(message)


class UnexpectedEOF(FramingError):
    """The content ended after some bytes of a frame but before its end."""


class DesyncDetected(FramingError):
    """Fixed framing: ``skipped`` bytes before the next magic word are not a frame."""

    def __init__(self, skipped: int, *, resume: int) -> None:
        self.skipped = skipped
        super().__init__(f"detected de-synchronization (skipped {skipped} bytes)", resume=resume)


class ReadError(MessageError):
    """Reading messages of ``journal`` failed at byte ``offset`` (the cause is chained)."""

    def __init__(self, journal: str, offset: int, detail: str) -> None:
        self.journal = journal
        self.offset = offset
        self.detail = detail
        super().__init__(f"{journal}@{offset}: {detail}")


class DecodeError(ReadError):
    """The frame of ``journal`` beginning at byte ``offset`` does not parse."""


class ReplayError(MessageError):
    """A Sequencer replay iterator failed or returned envelopes outside the replay range."""
