"""The Framing contract: how messages become journal bytes and back.

A journal's ``content-type`` label names its Framing (Gazette
`message/interfaces.go`). A Framing marshals one message into one complete
frame, and makes a :class:`Decoder` for a read. Decoders work on a buffer
of bytes that the reader fills chunk by chunk: each call decodes the frame
starting at ``pos`` and returns where it ends, so the reader knows the exact
byte offsets of every message and never reads a frame twice. They split
frames with ``bytes.find`` and slicing and decode with C parsers: no Python
loop ever walks the bytes one by one.

The message-side contracts of the built-in framings are the ``*Frameable``
protocols below; :class:`~gazette.message.JSONMessage`,
:class:`~gazette.message.CSVRecord` and :class:`~gazette.message.ProtoMessage`
implement them.
"""

from __future__ import annotations

from typing import Any, Protocol

__all__ = [
    "CLEAN_END",
    "NEED_MORE",
    "CSVFrameable",
    "Decoder",
    "Framing",
    "JSONFrameable",
    "ProtoFrameable",
]

#: :meth:`Decoder.decode` found no complete frame at ``pos``: more bytes are needed.
NEED_MORE = -1
#: :meth:`Decoder.decode`, called with ``final``, found only ignorable bytes (a clean end).
CLEAN_END = -2


class Decoder(Protocol):
    """Splits and decodes the frames of one read (it may keep state across frames)."""

    def decode(self, buf: bytes, pos: int, final: bool, msg: Any) -> int:
        """Decode the frame starting at ``buf[pos]`` into ``msg``; return the index just past it.

        ``pos < len(buf)`` unless ``final``. Returns :data:`NEED_MORE` when the
        frame is incomplete (never when ``final``: no more bytes will come),
        :data:`CLEAN_END` when ``final`` and only ignorable bytes remain.
        Raises :class:`~gazette.message.errors.FramingError`, whose ``resume``
        tells where decoding can go on past the bad bytes.
        """
        ...


class Framing(Protocol):
    """Marshals messages into frames, and makes decoders, for one content-type."""

    @property
    def content_type(self) -> str: ...

    def marshal(self, msg: Any) -> bytes:
        """One complete frame of ``msg``. Raises FramingError if it cannot be framed."""
        ...

    def new_decoder(self) -> Decoder: ...


class JSONFrameable(Protocol):
    """A message of the JSON-lines framing."""

    def marshal_json(self) -> bytes:
        """The JSON document, UTF-8, on one line, without the trailing newline."""
        ...

    def unmarshal_json(self, data: bytes) -> None:
        """Take the document of one line (which ends with its newline)."""
        ...


class ProtoFrameable(Protocol):
    """A message of the fixed protobuf framing."""

    def marshal_proto(self) -> bytes: ...

    def unmarshal_proto(self, data: bytes) -> None: ...


class CSVFrameable(Protocol):
    """A message of the CSV framing: one record."""

    def marshal_csv(self) -> list[str]: ...

    def unmarshal_csv(self, fields: list[str]) -> None: ...
