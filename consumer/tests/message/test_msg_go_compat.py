"""Journal bytes as Gazette's Go Publisher writes them, read by ours; ours written as Go's.

The fixture is built by hand from the layout (spec: UUID fields, JSON lines):
Go's ``testMsg`` (``struct{UUID uuid.UUID; Str string `json:",omitempty"`}``)
published by a Publisher whose producer is 01:02:03:04:05:06 and whose clock
starts at zero (each publish ticks it by 160):

* clock 160, OUTSIDE_TXN: ``0000000a-0000-1000-8000-...`` (time_low 160 >> 4 = 0xa)
* clock 320, CONTINUE_TXN: ``00000014-0000-1000-8001-...`` (flags in the clock sequence)
* clock 480, ACK_TXN: ``0000001e-0000-1000-8002-...``, an empty testMsg but its UUID
* the first message again, as a retried append duplicates it.
"""

from __future__ import annotations

from msg_helpers import JOURNAL, FakeAppends, FakeReader, TMsg, spec

from gazette import message
from gazette.broker import protocol as pb

P = bytes.fromhex("010203040506")

GO_COMMITTED = b'{"UUID":"0000000a-0000-1000-8000-010203040506","Str":"hello"}\n'
GO_CONTINUE = b'{"UUID":"00000014-0000-1000-8001-010203040506","Str":"one"}\n'
GO_ACK = b'{"UUID":"0000001e-0000-1000-8002-010203040506"}\n'
GO_JOURNAL = GO_COMMITTED + GO_CONTINUE + GO_ACK + GO_COMMITTED

# A real clock: 2019-09-01T02:23:41.981273734Z (kept to 100 ns), ticked twice,
# CONTINUE_TXN. Fields: time_low 83fc2f95, time_mid cc5f, version 1 + time_hi 1e9.
REAL_CLOCK = 0x1E9CC5F83FC2F950
REAL_UUID = "83fc2f95-cc5f-11e9-8001-010203040506"


def new_json(s: pb.JournalSpec) -> message.JSONMessage:
    return message.JSONMessage()


async def test_go_written_journal_reads_committed_once() -> None:
    seq = message.Sequencer({}, [], 16)
    it = message.ReadCommittedIter(
        None, pb.ReadRequest(journal=JOURNAL), new_json, seq, spec=spec(),
        open_reader=lambda req: FakeReader([GO_JOURNAL[req.offset :]], offset=req.offset),
    )  # fmt: skip
    got = [(e.begin, e.end, e.message.doc) async for e in it]
    a, b, c = len(GO_COMMITTED), len(GO_CONTINUE), len(GO_ACK)
    assert got == [
        (0, a, {"UUID": "0000000a-0000-1000-8000-010203040506", "Str": "hello"}),
        (a, a + b, {"UUID": "00000014-0000-1000-8001-010203040506", "Str": "one"}),
        (a + b, a + b + c, {"UUID": "0000001e-0000-1000-8002-010203040506"}),
    ]  # The duplicate of "hello" is dropped.
    offsets, states = seq.checkpoint(0)
    assert offsets == {JOURNAL: len(GO_JOURNAL)}
    assert states == [message.ProducerState(JOURNAL, P, 480, -1)]


async def test_go_uuids_decode_to_their_parts() -> None:
    reader = FakeReader([GO_JOURNAL])
    it = message.ReadUncommittedIter(
        None, pb.ReadRequest(journal=JOURNAL), new_json, spec=spec(), reader=reader
    )
    parts = [
        (
            message.get_producer(e.message.get_uuid()),
            message.get_clock(e.message.get_uuid()),
            message.get_flags(e.message.get_uuid()),
        )
        async for e in it
    ]
    assert parts == [(P, 160, 0), (P, 320, 1), (P, 480, 2), (P, 160, 0)]
    assert str(message.build_uuid(P, REAL_CLOCK, message.Flags.CONTINUE_TXN)) == REAL_UUID
    assert message.get_clock(message.parse_uuid(REAL_UUID)) == REAL_CLOCK


def test_our_publisher_writes_gos_bytes() -> None:
    appends = FakeAppends()
    pub = message.Publisher(appends, message.Clock(), producer=P)  # type: ignore[arg-type]

    def mapping(m: object) -> tuple[str, str]:
        return JOURNAL, pb.CONTENT_TYPE_JSON_LINES

    pub.publish_committed(mapping, TMsg(s="hello"))
    pub.publish_uncommitted(mapping, TMsg(s="one"))
    (intent,) = pub.build_ack_intents()
    assert appends.content(JOURNAL) == GO_COMMITTED + GO_CONTINUE
    assert intent == message.AckIntent(JOURNAL, GO_ACK)

    # A JSONMessage writes the same bytes when its document has Go's field order.
    appends = FakeAppends()
    pub = message.Publisher(appends, message.Clock(), producer=P)  # type: ignore[arg-type]
    pub.publish_committed(mapping, message.JSONMessage({"UUID": None, "Str": "hello"}))
    assert appends.content(JOURNAL) == GO_COMMITTED


def test_fixed_frame_of_foo() -> None:
    assert message.encode_fixed_frame(b"foo") == bytes.fromhex("6633933603000000666f6f")
