"""Fixed protobuf framing (``application/x-protobuf-fixed``).

Gazette `message/fixed_framing.go`. Each frame is an 8-byte header, the
magic word ``66 33 93 36`` and the payload length as a little-endian
uint32, then the payload (a marshalled protobuf message)::

    payload b"foo"  ->  66 33 93 36 03 00 00 00 66 6f 6f

The magic word lets a reader notice when it is not at a frame boundary
(de-synchronisation): it skips to the next magic word found in what it has
buffered (or all but the last 3 bytes, which may start one) and reports the
skipped bytes as :class:`~gazette.message.errors.DesyncDetected`; the next
frame decodes normally. At the end of the content, a lone trailing newline
is ignored, as Go ignores it; any other incomplete frame is an unexpected EOF.
"""

from __future__ import annotations

import struct
from typing import Any

from gazette.broker import protocol as pb
from gazette.message import errors, framing

__all__ = ["HEADER_LENGTH", "MAGIC", "FixedFraming", "encode_fixed_frame"]

#: The word which begins every fixed frame.
MAGIC = b"\x66\x33\x93\x36"
#: Bytes of a frame's header: the magic word and the uint32 length.
HEADER_LENGTH = 8

_LENGTH = struct.Struct("<I")


def encode_fixed_frame(payload: bytes) -> bytes:
    """The fixed frame of ``payload``."""
    if len(payload) > 0xFFFFFFFF:
        raise errors.FramingError(f"payload too large for a fixed frame ({len(payload)} bytes)")
    return MAGIC + _LENGTH.pack(len(payload)) + payload


class FixedFraming:
    """The fixed framing of :class:`~gazette.message.framing.ProtoFrameable` messages."""

    content_type = pb.CONTENT_TYPE_PROTOBUF_FIXED

    def marshal(self, msg: Any) -> bytes:
        marshal_proto = getattr(msg, "marshal_proto", None)
        if marshal_proto is None:
            raise errors.FramingError(
                f"{type(msg).__name__} is not proto-frameable (no marshal_proto)"
            )
        return encode_fixed_frame(marshal_proto())

    def new_decoder(self) -> _FixedDecoder:
        return _FixedDecoder()


class _FixedDecoder:
    __slots__ = ()

    def decode(self, buf: bytes, pos: int, final: bool, msg: Any) -> int:
        n = len(buf)
        if n - pos < HEADER_LENGTH:
            if not final:
                return framing.NEED_MORE
            if pos == n or (n - pos == 1 and buf[pos] == 0x0A):
                return framing.CLEAN_END
            raise errors.UnexpectedEOF("unexpected EOF reading frame header", resume=n)
        if not buf.startswith(MAGIC, pos):
            nxt = buf.find(MAGIC, pos + 1)
            if nxt < 0:
                nxt = n - (len(MAGIC) - 1)  # Keep bytes which may begin a split magic word.
            raise errors.DesyncDetected(nxt - pos, resume=nxt)
        size: int = HEADER_LENGTH + _LENGTH.unpack_from(buf, pos + 4)[0]
        end = pos + size
        if end > n:
            if not final:
                return framing.NEED_MORE
            raise errors.UnexpectedEOF(f"reading frame (size {size}): unexpected EOF", resume=n)
        try:
            msg.unmarshal_proto(buf[pos + HEADER_LENGTH : end])
        except errors.FramingError as e:
            e.resume = end
            raise
        except Exception as e:
            raise errors.FramingError(f"unmarshal_proto: {e!r}", resume=end) from e
        return end
