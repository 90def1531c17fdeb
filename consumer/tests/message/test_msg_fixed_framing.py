"""Fixed protobuf framing and ProtoMessage (Gazette message/fixed_framing_test.go)."""

from __future__ import annotations

import uuid

import pytest
from google.protobuf import wrappers_pb2

from gazette import message
from gazette.broker import protocol as pb
from gazette.message import errors, fixed_framing, framing

F = message.framing_for(pb.CONTENT_TYPE_PROTOBUF_FIXED)
HEADER_28 = b"\x66\x33\x93\x36\x14\x00\x00\x00"  # A frame of a 20-byte payload.
BODY = b"test message content"
FRAME = HEADER_28 + BODY


class Raw:
    """Frames its bytes as they are (Gazette's ``frameablestring``)."""

    def __init__(self, s: bytes = b"", fail: bool = False) -> None:
        self.s, self.fail = s, fail

    def marshal_proto(self) -> bytes:
        return self.s

    def unmarshal_proto(self, data: bytes) -> None:
        self.s = data[: len(data) // 2] if self.fail else data
        if self.fail:
            raise ValueError("error!")


class Bytes(message.ProtoMessage[wrappers_pb2.BytesValue]):
    proto_type = wrappers_pb2.BytesValue
    uuid_field = "value"


def test_marshal_fixtures() -> None:
    assert F.content_type == "application/x-protobuf-fixed"
    assert F.marshal(Raw(BODY)) == FRAME
    assert F.marshal(Raw(b"foo message")) == (b"\x66\x33\x93\x36\x0b\x00\x00\x00" + b"foo message")
    assert fixed_framing.encode_fixed_frame(b"foo") == bytes(
        [0x66, 0x33, 0x93, 0x36, 0x03, 0x00, 0x00, 0x00, 0x66, 0x6F, 0x6F]
    )
    assert message.encode_fixed_frame(b"") == b"\x66\x33\x93\x36\x00\x00\x00\x00"
    with pytest.raises(errors.FramingError, match="not proto-frameable"):
        F.marshal(object())


def test_decode_consumes_exactly_one_frame() -> None:
    data = FRAME + b"extra"
    msg = Raw()
    d = F.new_decoder()
    assert d.decode(data, 0, False, msg) == len(FRAME)
    assert msg.s == BODY
    assert d.decode(data, len(FRAME), False, Raw()) == framing.NEED_MORE


def test_unmarshal_errors_consume_the_frame() -> None:
    msg = Raw(fail=True)
    with pytest.raises(errors.FramingError, match="error!") as exc:
        F.new_decoder().decode(FRAME + FRAME, 0, True, msg)
    assert exc.value.resume == len(FRAME)
    assert msg.s == b"test messa"


def test_a_trailing_newline_is_a_clean_end() -> None:
    data = FRAME + b"\n"
    d = F.new_decoder()
    assert d.decode(data, 0, True, Raw()) == len(FRAME)
    assert d.decode(data, len(FRAME), True, Raw()) == framing.CLEAN_END
    assert d.decode(data, len(FRAME), False, Raw()) == framing.NEED_MORE


def test_desync_detection() -> None:
    data = b"foobar" + FRAME
    d = F.new_decoder()
    with pytest.raises(errors.DesyncDetected) as exc:
        d.decode(data, 0, False, Raw())
    assert (exc.value.skipped, exc.value.resume) == (6, 6)
    assert str(exc.value) == "detected de-synchronization (skipped 6 bytes)"
    msg = Raw()
    assert d.decode(data, 6, False, msg) == len(data)
    assert msg.s == BODY


@pytest.mark.parametrize(
    ("lo", "hi", "err"),
    [
        (3, 10, "unexpected EOF reading frame header"),  # Part of a header.
        (0, 7, "unexpected EOF reading frame header"),  # Part of a de-synced header.
        (3, 11, "reading frame (size 28): unexpected EOF"),  # Just a header.
        (3, 22, "reading frame (size 28): unexpected EOF"),  # Part of the payload.
    ],
)
def test_incomplete_frames_at_the_end(lo: int, hi: int, err: str) -> None:
    data = (b"foo" + FRAME)[lo:hi]
    d = F.new_decoder()
    assert d.decode(data, 0, False, Raw()) == framing.NEED_MORE
    with pytest.raises(errors.UnexpectedEOF) as exc:
        d.decode(data, 0, True, Raw())
    assert str(exc.value) == err
    assert exc.value.resume == len(data)


def test_desync_without_a_magic_word_keeps_a_possible_prefix() -> None:
    # Gazette's test reads through a 16-byte buffer: garbage is discarded all but
    # its last 3 bytes (which might begin a magic word), then up to the magic word.
    data = b"x" * 21 + FRAME
    d = F.new_decoder()
    with pytest.raises(errors.DesyncDetected) as exc:
        d.decode(data[:16], 0, False, Raw())
    assert exc.value.resume == 13
    with pytest.raises(errors.DesyncDetected) as exc:
        d.decode(data, 13, False, Raw())
    assert (exc.value.skipped, exc.value.resume) == (8, 21)
    msg = Raw()
    assert d.decode(data, 21, False, msg) == len(data)
    assert msg.s == BODY


def test_proto_message_round_trip() -> None:
    u = message.build_uuid(b"\x01\x02\x03\x04\x05\x06", 160, 1)
    m = Bytes()
    assert m.get_uuid() == message.ZERO_UUID
    m.set_uuid(u)
    assert m.proto.value == u.bytes
    frame = F.marshal(m)
    assert frame == b"\x66\x33\x93\x36\x12\x00\x00\x00" + b"\x0a\x10" + u.bytes

    back = Bytes()
    assert F.new_decoder().decode(frame, 0, True, back) == len(frame)
    assert back == m and back.get_uuid() == u

    ack = m.new_acknowledgement("a/journal")
    assert type(ack) is Bytes and ack.proto == wrappers_pb2.BytesValue()
    assert repr(ack) == "Bytes()"


def test_proto_message_decode_errors() -> None:
    bad_uuid = message.encode_fixed_frame(
        wrappers_pb2.BytesValue(value=b"short").SerializeToString()
    )
    with pytest.raises(errors.FramingError, match=r"value: invalid UUID \(got 5 bytes\)"):
        F.new_decoder().decode(bad_uuid, 0, True, Bytes())
    garbage = message.encode_fixed_frame(b"\x0a\x10abc")  # A length past the payload's end.
    with pytest.raises(errors.FramingError, match="unmarshal BytesValue"):
        F.new_decoder().decode(garbage, 0, True, Bytes())


def test_proto_message_wraps_a_given_proto() -> None:
    proto = wrappers_pb2.BytesValue(value=uuid.UUID(int=5).bytes)
    assert Bytes(proto).get_uuid() == uuid.UUID(int=5)
