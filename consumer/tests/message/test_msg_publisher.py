"""The Publisher against a recording fake of the AppendService (Gazette message/publisher_test.go)."""

from __future__ import annotations

import time

import pytest
from msg_helpers import FakeAppends, TMsg

from gazette import message
from gazette.broker import protocol as pb
from gazette.message import errors, json_framing

P = b"\x01\x02\x03\x04\x05\x06"
F = message.Flags


def to(journal: str, content_type: str = pb.CONTENT_TYPE_JSON_LINES) -> message.MappingFunc[TMsg]:
    return lambda msg: (journal, content_type)


def line(u: object, s: str = "") -> bytes:
    doc = {"UUID": str(u)} | ({"Str": s} if s else {})
    return json_framing.encode_json(doc) + b"\n"


def test_publish_committed() -> None:
    appends = FakeAppends()
    pub = message.Publisher(appends, message.Clock(), producer=P)  # type: ignore[arg-type]
    assert pub.producer == P
    for s in ("hello", "world", "beer!"):
        aa = pub.publish_committed(to("a/journal"), TMsg(s=s))
        assert aa is appends.appends["a/journal"]
    assert appends.content("a/journal") == (
        line(message.build_uuid(P, 160, F.OUTSIDE_TXN), "hello")
        + line(message.build_uuid(P, 320, F.OUTSIDE_TXN), "world")
        + line(message.build_uuid(P, 480, F.OUTSIDE_TXN), "beer!")
    )
    assert pub.build_ack_intents() == []  # Committed messages need no ACK.


def test_validation_fails_before_mapping() -> None:
    pub = message.Publisher(FakeAppends(), message.Clock())  # type: ignore[arg-type]

    def mapping(msg: TMsg) -> tuple[str, str]:
        raise AssertionError("not mapped")

    with pytest.raises(ValueError, match="whoops!"):
        pub.publish_committed(mapping, TMsg(err=ValueError("whoops!")))
    assert pub.clock.value == 0  # Nor ticked.


def test_publish_uncommitted_and_ack_intents() -> None:
    appends = FakeAppends()
    pub = message.Publisher(appends, message.Clock(), producer=P)  # type: ignore[arg-type]

    pub.publish_uncommitted(to("journal/one"), TMsg(s="value one"))
    pub.publish_uncommitted(to("journal/two"), TMsg(s="value two"))
    intents = pub.build_ack_intents()
    assert intents == [
        message.AckIntent("journal/one", line(message.build_uuid(P, 480, F.ACK_TXN))),
        message.AckIntent("journal/two", line(message.build_uuid(P, 640, F.ACK_TXN))),
    ]
    for i in intents:
        appends.start_append(i.journal).write(i.content)

    # First-publish order decides the order (and clocks) of the next ACKs.
    pub.publish_uncommitted(to("journal/three"), TMsg(s="value three"))
    pub.publish_uncommitted(to("journal/one"), TMsg(s="value four"))
    intents = pub.build_ack_intents()
    assert [i.journal for i in intents] == ["journal/three", "journal/one"]
    for i in intents:
        appends.start_append(i.journal).write(i.content)
    assert pub.build_ack_intents() == []

    assert appends.content("journal/one") == (
        line(message.build_uuid(P, 160, F.CONTINUE_TXN), "value one")
        + line(message.build_uuid(P, 480, F.ACK_TXN))
        + line(message.build_uuid(P, 960, F.CONTINUE_TXN), "value four")
        + line(message.build_uuid(P, 1280, F.ACK_TXN))
    )
    assert appends.content("journal/two") == (
        line(message.build_uuid(P, 320, F.CONTINUE_TXN), "value two")
        + line(message.build_uuid(P, 640, F.ACK_TXN))
    )
    assert appends.content("journal/three") == (
        line(message.build_uuid(P, 800, F.CONTINUE_TXN), "value three")
        + line(message.build_uuid(P, 1120, F.ACK_TXN))
    )


def test_ack_intents_use_each_journals_framing() -> None:
    pub = message.Publisher(FakeAppends(), message.Clock(), producer=P)  # type: ignore[arg-type]
    u = "0000000a-0000-1000-8000-010203040506"
    pub.publish_uncommitted(
        to("csv/journal", pb.CONTENT_TYPE_CSV), message.CSVRecord([u, "a", "b"])
    )
    (intent,) = pub.build_ack_intents()
    assert intent.content == b"00000014-0000-1000-8002-010203040506,,\n"


def test_clocks() -> None:
    # A caller's clock is only ticked.
    clock = message.Clock(1000 << 4)
    pub = message.Publisher(FakeAppends(), clock)  # type: ignore[arg-type]
    pub.publish_committed(to("a/journal"), TMsg())
    assert clock.value == (1000 << 4) + 160
    assert pub.clock is clock

    # An own clock follows the time of day.
    pub = message.Publisher(FakeAppends())  # type: ignore[arg-type]
    before = time.time_ns()
    msg = TMsg()
    pub.publish_committed(to("a/journal"), msg)
    at = message.Clock(message.get_clock(msg.get_uuid())).as_unix_ns()
    assert before - 1000 <= at <= time.time_ns() + 1000
    assert message.get_producer(msg.get_uuid()) == pub.producer
    assert pub.producer[0] & 0x01


def test_publish_errors() -> None:
    appends = FakeAppends()
    pub = message.Publisher(appends, message.Clock())  # type: ignore[arg-type]
    with pytest.raises(errors.UnknownContentType, match=r"^unrecognized content-type \(foo/bar\)$"):
        pub.publish_committed(to("a/journal", "foo/bar"), TMsg())
    with pytest.raises(errors.EmptyListResponse):
        pub.publish_committed(message.ModuloMapping(lambda m: b"", lambda: None), TMsg())

    class Unframeable(TMsg):
        def marshal_json(self) -> bytes:
            raise errors.FramingError("nope")

    pub.publish_committed(to("a/journal"), TMsg(s="kept"))
    with pytest.raises(errors.FramingError, match="nope"):
        pub.publish_committed(to("a/journal"), Unframeable())
    # What the failed publish began to write is rolled back.
    assert appends.content("a/journal").count(b"\n") == 1
    with pytest.raises(ValueError, match="6 bytes"):
        message.Publisher(appends, producer=b"\x01")  # type: ignore[arg-type]
