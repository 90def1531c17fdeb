"""RecordedOps as the log holds them: fixed frames (magic word, length), write data after.

A recorder writes each op as Gazette's fixed protobuf frame (``66 33 93 36``
and the payload's length, little-endian, then the payload); a ``write`` op's
frame is followed by its ``length`` raw data bytes, unframed. The payload is
what the FSM's checksum chains over. Recorders never set the meta fields
(``first_offset``, ``last_offset``, ``log``): players fill them from where
they read the op.
"""

from __future__ import annotations

import struct

from gazette.consumer.recoverylog import errors
from gazette.consumer.recoverylog.recorded_op_pb2 import RecordedOp

__all__ = ["HEADER_LEN", "MAGIC", "decode_op", "encode_op", "format_author"]

MAGIC = b"\x66\x33\x93\x36"
HEADER_LEN = 8
_DIGITS = "0123456789abcdefghijklmnopqrstuv"


def encode_op(op: RecordedOp) -> tuple[bytes, bytes]:
    """(frame, payload) of ``op``; the frame is what goes to the log before any write data."""
    if op.first_offset or op.last_offset or op.log:
        raise ValueError("RecordedOp meta fields (first_offset, last_offset, log) must be unset")
    payload = op.SerializeToString()
    return MAGIC + struct.pack("<I", len(payload)) + payload, payload


def decode_op(buf: bytes | memoryview, pos: int = 0) -> tuple[RecordedOp, bytes, int]:
    """The op framed at ``buf[pos:]``: (op, payload, end of its frame).

    Raises RecoveryLogError when the bytes there are not a whole frame.
    """
    header = bytes(buf[pos : pos + HEADER_LEN])
    if len(header) < HEADER_LEN or header[:4] != MAGIC:
        raise errors.RecoveryLogError(f"no RecordedOp frame at {pos}")
    (size,) = struct.unpack("<I", header[4:])
    end = pos + HEADER_LEN + size
    payload = bytes(buf[pos + HEADER_LEN : end])
    if len(payload) != size:
        raise errors.RecoveryLogError(f"RecordedOp frame at {pos} is cut short")
    return RecordedOp.FromString(payload), payload, end


def format_author(author: int) -> str:
    """An author as the ``author`` register value Gazette fences logs with (base 32, 0-9a-v)."""
    if author <= 0:
        raise ValueError("author must be positive")
    out = ""
    while author:
        author, d = divmod(author, 32)
        out = _DIGITS[d] + out
    return out
