"""JSON lines framing and JSONMessage (Gazette message/json_framing_test.go, and Go's bytes)."""

from __future__ import annotations

import uuid

import pytest

from gazette import message
from gazette.broker import protocol as pb
from gazette.message import errors, framing, json_framing

F = message.framing_for(pb.CONTENT_TYPE_JSON_LINES)
U = uuid.UUID("0000000a-0000-1000-8000-010203040506")


def decode_all(data: bytes, new=message.JSONMessage) -> list[object]:
    """Every frame of ``data`` (the content's end), errors included, as the reader splits them."""
    d = F.new_decoder()
    out: list[object] = []
    pos = 0
    while pos < len(data):
        msg = new()
        try:
            end = d.decode(data, pos, True, msg)
        except errors.FramingError as e:
            out.append(e)
            pos = e.resume
            continue
        if end == framing.CLEAN_END:
            break
        out.append(msg)
        pos = end
    return out


def test_marshal_fixtures() -> None:
    assert F.content_type == "application/x-ndjson"
    assert F.marshal(message.JSONMessage({"A": 42, "B": "the answer"})) == (
        b'{"A":42,"B":"the answer"}\n'
    )
    assert F.marshal(message.JSONMessage({"Bar": 63})) == b'{"Bar":63}\n'


def test_marshal_writes_what_go_writes() -> None:
    # Bytes of Go's json.Encoder for the same document (keys in struct order).
    doc = {
        "UUID": str(U),
        "Html": "<a href='x'>&</a>",
        "Seps": "\u2028\u2029",
        "Ctl": "\x01\b\f\n\t\x7f",
        "Text": "é ü 日本",
        "Floats": [1.0, 1e21, 1e-7, 123456789.0, 0.1, -0.0, 1e16, 2.5e-6],
        "Int": -12,
        "Nested": {"ok": True, "none": None, "s": "a:1.0"},
    }
    assert F.marshal(message.JSONMessage(doc)) == (
        b'{"UUID":"0000000a-0000-1000-8000-010203040506",'
        b'"Html":"\\u003ca href=\'x\'\\u003e\\u0026\\u003c/a\\u003e",'
        b'"Seps":"\\u2028\\u2029",'
        b'"Ctl":"\\u0001\\b\\f\\n\\t\x7f",'
        b'"Text":"\xc3\xa9 \xc3\xbc \xe6\x97\xa5\xe6\x9c\xac",'
        b'"Floats":[1,1e+21,1e-7,123456789,0.1,-0,10000000000000000,0.0000025],'
        b'"Int":-12,'
        b'"Nested":{"ok":true,"none":null,"s":"a:1.0"}}\n'
    )


@pytest.mark.parametrize(
    ("text", "go"),
    [
        ("1e+20", "100000000000000000000"),
        ("1e+21", "1e+21"),
        ("1.5e-07", "1.5e-7"),
        ("1e-06", "0.000001"),
        ("5e-324", "5e-324"),
        ("1.7976931348623157e+308", "1.7976931348623157e+308"),
        ("1e-05", "0.00001"),
        ("1.23e+100", "1.23e+100"),
        ("-2.0", "-2"),
    ],
)
def test_floats_as_go_writes_them(text: str, go: str) -> None:
    assert json_framing.go_float(text) == go


def test_marshal_errors() -> None:
    with pytest.raises(errors.FramingError, match=r"json: .*not JSON serializable"):
        F.marshal(message.JSONMessage({"x": object()}))
    with pytest.raises(errors.FramingError, match="json: Out of range float"):
        F.marshal(message.JSONMessage({"x": float("nan")}))
    with pytest.raises(errors.FramingError, match="not JSON-frameable"):
        F.marshal(object())

    class Newline(message.JSONMessage):
        def marshal_json(self) -> bytes:
            return b'{"a":\n1}'

    with pytest.raises(errors.FramingError, match="newline"):
        F.marshal(Newline())


def test_decode_fixture_and_clean_end() -> None:
    data = b'{"A":42,"B":"test message content"}\n'
    msg = message.JSONMessage()
    d = F.new_decoder()
    assert d.decode(data, 0, False, msg) == len(data)
    assert msg.doc == {"A": 42, "B": "test message content"}
    assert d.decode(data, len(data), True, message.JSONMessage()) == framing.CLEAN_END


def test_partial_frames() -> None:
    data = b'{"A":42,"B":"missing trailing newline"}'
    d = F.new_decoder()
    assert d.decode(data, 0, False, message.JSONMessage()) == framing.NEED_MORE
    with pytest.raises(errors.UnexpectedEOF, match="unexpected EOF") as exc:
        d.decode(data, 0, True, message.JSONMessage())
    assert exc.value.resume == len(data)


def test_a_bad_line_is_consumed_whole() -> None:
    data = b'{"A":42,"B":"missing quote but including newline}\n{"ok":1}\n'
    got = decode_all(data)
    assert isinstance(got[0], errors.FramingError)
    assert str(got[0]).startswith("invalid JSON: ")
    assert got[0].resume == data.index(b"\n") + 1
    assert got[1] == message.JSONMessage({"ok": 1})


@pytest.mark.parametrize(
    ("line", "err"),
    [
        (b"\n", "invalid JSON"),
        (b"[1,2]\n", "cannot unmarshal JSON list into JSONMessage"),
        (b'{"x":NaN}\n', "invalid JSON literal NaN"),
        (b'{"UUID":"not-a-uuid"}\n', "UUID: invalid UUID length: 10"),
        (b'{"UUID":12}\n', "UUID: UUID is not a string"),
    ],
)
def test_decode_errors(line: bytes, err: str) -> None:
    (got,) = decode_all(line)
    assert isinstance(got, errors.FramingError)
    assert err in str(got)


def test_invalid_utf8_reads_as_replacement_characters() -> None:
    (got,) = decode_all(b'{"s":"a\xffb"}\n')
    assert got == message.JSONMessage({"s": "a\ufffdb"})


class Sum(message.JSONMessage):
    key = message.JSONField("Key", "")
    count = message.JSONField("Count", 0)


def test_json_message_uuid_and_fields() -> None:
    m = Sum()
    assert m.get_uuid() == message.ZERO_UUID
    assert (m.key, m.count) == ("", 0)
    m.key, m.count = "a", 3
    m.set_uuid(U)
    assert m.doc == {"Key": "a", "Count": 3, "UUID": str(U)}
    assert m.get_uuid() == U
    # The document is the truth: a UUID written into it directly is seen.
    other = message.build_uuid(bytes(range(6)), 1600, 1)
    m.doc["UUID"] = str(other)
    assert m.get_uuid() == other
    assert Sum.key.key == "Key"

    framed = F.marshal(m)
    (back,) = decode_all(framed, Sum)
    assert isinstance(back, Sum) and back == m and back.get_uuid() == other

    ack = m.new_acknowledgement("a/journal")
    assert type(ack) is Sum and ack.doc == {}
    ack.set_uuid(U)
    assert F.marshal(ack) == b'{"UUID":"0000000a-0000-1000-8000-010203040506"}\n'


def test_uuid_field_is_configurable() -> None:
    class Lower(message.JSONMessage):
        uuid_field = "uuid"

    m = Lower({"n": 1})
    m.set_uuid(U)
    assert m.doc == {"n": 1, "uuid": str(U)}
    assert repr(m) == f"Lower({{'n': 1, 'uuid': '{U}'}})"
