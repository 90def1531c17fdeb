"""CSV framing and CSVRecord: Gazette message/csv_framing_test.go, and Go encoding/csv's rules.

The expected errors and records were checked against Go's ``csv.Reader``.
"""

from __future__ import annotations

import uuid

import pytest

from gazette import message
from gazette.broker import protocol as pb
from gazette.message import csv_framing, errors, framing

F = message.framing_for(pb.CONTENT_TYPE_CSV)
U = "0000000a-0000-1000-8000-010203040506"


class Fields:
    """Takes any record (CSVRecord insists on a UUID)."""

    def __init__(self) -> None:
        self.fields: list[str] = []

    def unmarshal_csv(self, fields: list[str]) -> None:
        self.fields = fields


def read_all(data: bytes, new: type = Fields, final: bool = True) -> list[object]:
    d = F.new_decoder()
    out: list[object] = []
    pos = 0
    while pos < len(data):
        msg = new()
        try:
            end = d.decode(data, pos, final, msg)
        except errors.FramingError as e:
            out.append(f"ERR({e})")
            pos = e.resume
            continue
        if end == framing.CLEAN_END:
            break
        if end == framing.NEED_MORE:
            out.append("MORE")
            break
        out.append(msg.fields if isinstance(msg, Fields) else msg)
        pos = end
    return out


def test_marshal_fixtures() -> None:
    assert F.content_type == "text/csv"
    assert F.marshal(message.CSVRecord([U, "123", 'qu"ote'])) == f'{U},123,"qu""ote"\n'.encode()
    assert F.marshal(message.CSVRecord([U, "567,891"])) == f'{U},"567,891"\n'.encode()
    with pytest.raises(errors.FramingError, match="not CSV-frameable"):
        F.marshal(object())


@pytest.mark.parametrize(
    ("field", "written"),
    [
        ("", ""),
        ("plain", "plain"),
        (" a", '" a"'),  # Leading Unicode space.
        ("\u00a0x", '"\u00a0x"'),
        ("\u2028z", '"\u2028z"'),
        ("\x1cy", "\x1cy"),  # Python calls it a space; Go doesn't.
        ("\\.", '"\\."'),
        ("a\rb", '"a\rb"'),
        ("x\ny", '"x\ny"'),
        ('q"', '"q"""'),
        ("a b", "a b"),
    ],
)
def test_go_writer_quoting(field: str, written: str) -> None:
    assert csv_framing.encode_csv_record([field, "ok"]) == f"{written},ok\n".encode()


def test_decode_fixture_and_clean_end() -> None:
    data = f"{U},bar,baz\n".encode()
    assert read_all(data, message.CSVRecord) == [message.CSVRecord([U, "bar", "baz"])]
    d = F.new_decoder()
    assert d.decode(data, len(data), True, Fields()) == framing.CLEAN_END


def test_field_count_is_fixed_by_the_first_record() -> None:
    data = f"{U},foo,bar\n{U},baz\n".encode()
    assert read_all(data, message.CSVRecord) == [
        message.CSVRecord([U, "foo", "bar"]),
        "ERR(record on line 2: wrong number of fields)",
    ]


def test_the_first_field_must_be_a_uuid() -> None:
    assert read_all(b"not-a-uuid, bar, baz\n", message.CSVRecord) == [
        "ERR(invalid UUID length: 10)"
    ]
    assert read_all(b"\n", message.CSVRecord) == []


@pytest.mark.parametrize(
    ("data", "expect"),
    [
        (b"a,b\nc,d\n", [["a", "b"], ["c", "d"]]),
        (b'a"b,c\n', ['ERR(parse error on line 1, column 2: bare " in non-quoted-field)']),
        (
            b'"ab"c,d\n',
            ['ERR(parse error on line 1, column 4: extraneous or missing " in quoted-field)'],
        ),
        (
            b'"abc',
            ['ERR(parse error on line 1, column 5: extraneous or missing " in quoted-field)'],
        ),
        (b'a,"b\nc",d\ne,f,g\n', [["a", "b\nc", "d"], ["e", "f", "g"]]),
        (
            b'a,"b\nc"x,d\n',
            [
                "ERR(record on line 1; parse error on line 2, column 2: "
                'extraneous or missing " in quoted-field)'
            ],
        ),
        (b"a,b\r\n\r\n\nc,d", [["a", "b"], ["c", "d"]]),
        (b"a,b\nc\n", [["a", "b"], "ERR(record on line 2: wrong number of fields)"]),
        (b'x,"y""z",""\n', [["x", 'y"z', ""]]),
        (
            b'"a\nb',
            [
                "ERR(record on line 1; parse error on line 2, column 2: "
                'extraneous or missing " in quoted-field)'
            ],
        ),
        (b"a,b\r", [["a", "b"]]),
        (b" a,b\n", [[" a", "b"]]),
        (
            b'a,b\nc,"d\n',
            [
                ["a", "b"],
                'ERR(parse error on line 2, column 6: extraneous or missing " in quoted-field)',
            ],
        ),
        (b'"x"\r\n', [["x"]]),
        (
            b'a,"b""\n',
            ['ERR(parse error on line 1, column 8: extraneous or missing " in quoted-field)'],
        ),
        (b"\n\n", []),
        (
            b"a,b,c\nd,e\nf,g,h\n",
            [["a", "b", "c"], "ERR(record on line 2: wrong number of fields)", ["f", "g", "h"]],
        ),
        ("é,".encode() + b"\xff\n", [["é", "\udcff"]]),  # Invalid UTF-8 kept as is.
    ],
)
def test_go_reader_rules(data: bytes, expect: list[object]) -> None:
    assert read_all(data) == expect


def test_records_spanning_chunks_wait_for_more() -> None:
    data = b'a,"b\nc",d\ne,f,g\n'
    assert read_all(data[:6], final=False) == ["MORE"]  # Inside the quoted field.
    assert read_all(data[:8], final=False) == ["MORE"]  # The closing line's newline not yet read.
    assert read_all(data[:11], final=False) == [["a", "b\nc", "d"], "MORE"]
    # Waiting changed nothing: line numbers and the field count come out right.
    d = F.new_decoder()
    for cut in (3, 6, 9):
        assert d.decode(data[:cut], 0, False, Fields()) == framing.NEED_MORE
    msg = Fields()
    assert d.decode(data, 0, False, msg) == 10
    assert d.fields_per_record == 3


def test_csv_record_message() -> None:
    u = uuid.UUID(U)
    r = message.CSVRecord(["", "x", "y"])
    assert r.get_uuid() == message.ZERO_UUID
    r.set_uuid(u)
    assert r == [U, "x", "y"] and r.get_uuid() == u
    ack = r.new_acknowledgement("a/journal")
    assert ack == ["", "", ""] and isinstance(ack, message.CSVRecord)
    ack.set_uuid(u)
    assert F.marshal(ack) == f"{U},,\n".encode()
    empty = message.CSVRecord()
    empty.set_uuid(u)
    assert empty == [U]
