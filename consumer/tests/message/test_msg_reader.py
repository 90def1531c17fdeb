"""Read iterators over scripted readers (Gazette message/reader_test.go, and offsets across chunks)."""

from __future__ import annotations

import logging

import pytest
from msg_helpers import JOURNAL, FakeReader, TMsg, spec

from gazette import message
from gazette.broker import protocol as pb
from gazette.broker.client import errors as client_errors
from gazette.message import errors

A = b"\x01\xaa\xaa\xaa\xaa\xaa"
B = b"\x01\xbb\xbb\xbb\xbb\xbb"
F = message.Flags
JSON = message.framing_for(pb.CONTENT_TYPE_JSON_LINES)


def new_msg(s: pb.JournalSpec) -> TMsg:
    return TMsg()


def it_of(
    reader: FakeReader,
    offset: int = 0,
    journal: str = JOURNAL,
    content_type: str = pb.CONTENT_TYPE_JSON_LINES,
) -> message.ReadUncommittedIter:
    req = pb.ReadRequest(journal=journal, offset=offset)
    return message.ReadUncommittedIter(
        None, req, new_msg, spec=spec(journal, content_type), reader=reader
    )


async def collect(it: message.ReadUncommittedIter) -> list[tuple[int, int, str]]:
    return [(e.begin, e.end, e.message.s) async for e in it]


async def test_many_frames_per_chunk_and_frames_across_chunks() -> None:
    frames = [JSON.marshal(TMsg(s=f"m{i}")) for i in range(50)]
    content = b"".join(frames)
    chunks = [content[i : i + 100] for i in range(0, len(content), 100)]
    reader = FakeReader(chunks, offset=5000)
    got = await collect(it_of(reader, offset=5000))
    offset, expect = 5000, []
    for i, f in enumerate(frames):
        expect.append((offset, offset + len(f), f"m{i}"))
        offset += len(f)
    assert got == expect
    assert reader.reads == len(chunks) + 1  # One read per chunk, and the one saying it ended.
    assert reader.closed


async def test_offset_jumps_and_a_clean_end(caplog: pytest.LogCaptureFixture) -> None:
    # The broker serves from 1000 when 1 was asked: content below was deleted.
    m1, m2 = b'{"Str":"abcdefghijk"}\n', b'{"Str":"lmnopqrstuvwxyz"}\n'
    reader = FakeReader([("jump", 1000), m1, m2[:7], m2[7:]], offset=1)
    with caplog.at_level(logging.WARNING, logger="gazette.message.reader"):
        got = await collect(it_of(reader, offset=1))
    assert got == [(1000, 1022, "abcdefghijk"), (1022, 1048, "lmnopqrstuvwxyz")]
    assert "offset jump (journal test/journal, from 1, to 1000)" in caplog.text


async def test_a_read_from_the_write_head_learns_it_quietly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reader = FakeReader([("jump", 777), b'{"Str":"x"}\n'], offset=-1)
    with caplog.at_level(logging.WARNING):
        got = await collect(it_of(reader, offset=-1))
    assert got == [(777, 789, "x")]
    assert caplog.text == ""


async def test_an_end_offset_inside_a_frame_is_an_error() -> None:
    reader = FakeReader([b'{"no":"newline"}'], offset=1000)
    it = it_of(reader, offset=1000)
    with pytest.raises(errors.DecodeError) as exc:
        await it.next()
    assert str(exc.value) == "test/journal@1000: unexpected EOF"
    assert (exc.value.journal, exc.value.offset) == (JOURNAL, 1000)
    assert isinstance(exc.value.__cause__, errors.UnexpectedEOF)
    with pytest.raises(StopAsyncIteration):
        await it.next()


async def test_a_bad_frame_names_journal_and_offset_and_reading_can_go_on() -> None:
    reader = FakeReader([b'{"Str":"a"}\n{"Str":\n{"Str":"c"}\n'], offset=10)
    it = it_of(reader, offset=10, journal="examples/foo;meta")
    first = await it.next()
    assert (first.begin, first.end, first.message.s) == (10, 22, "a")
    assert first.journal.name == "examples/foo;meta"
    with pytest.raises(errors.DecodeError, match=r"^examples/foo;meta@22: invalid JSON: ") as exc:
        await it.next()
    assert exc.value.offset == 22
    third = await it.next()
    assert (third.begin, third.end, third.message.s) == (30, 42, "c")


async def test_an_offset_jump_inside_a_frame_is_an_error() -> None:
    reader = FakeReader([b'{"Str":"a"}\n{"Str', ("jump", 500), b'{"Str":"b"}\n'])
    it = it_of(reader)
    assert (await it.next()).message.s == "a"
    with pytest.raises(errors.DecodeError) as exc:
        await it.next()
    assert str(exc.value) == "test/journal@12: frame cut short by an offset jump (to 500)"
    env = await it.next()
    assert (env.begin, env.end, env.message.s) == (500, 512, "b")


async def test_a_non_blocking_read_ends_at_the_write_head() -> None:
    reader = FakeReader([b'{"Str":"a"}\n'], non_blocking_end=True)
    assert await collect(it_of(reader)) == [(0, 12, "a")]


async def test_reader_errors_are_wrapped() -> None:
    boom = client_errors.status_error(pb.SUSPENDED, journal=JOURNAL)
    reader = FakeReader([b'{"Str":"a"}\n{', boom])
    it = it_of(reader)
    await it.next()
    with pytest.raises(errors.ReadError) as exc:
        await it.next()
    assert exc.value.journal == JOURNAL and exc.value.offset == 12
    assert exc.value.__cause__ is boom
    assert not isinstance(exc.value, errors.DecodeError)


async def test_spec_errors() -> None:
    it = message.ReadUncommittedIter(
        None, pb.ReadRequest(journal="a/j"), new_msg, spec=pb.JournalSpec(name="a/j")
    )
    with pytest.raises(errors.ReadError) as exc:
        await it.next()
    assert str(exc.value) == "a/j@0: determining framing: unrecognized content-type ()"
    assert isinstance(exc.value.__cause__, errors.UnknownContentType)

    def failing(s: pb.JournalSpec) -> TMsg:
        raise LookupError("which type?")

    it = message.ReadUncommittedIter(
        None,
        pb.ReadRequest(journal=JOURNAL),
        failing,
        spec=spec(),
        reader=FakeReader([b"{}\n"]),
    )
    with pytest.raises(errors.ReadError, match="new_message: which type"):
        await it.next()


async def test_fixed_frames_with_garbage() -> None:
    fixed = message.framing_for(pb.CONTENT_TYPE_PROTOBUF_FIXED)

    class Raw:
        def __init__(self) -> None:
            self.s = b""

        def get_uuid(self) -> object:
            return message.ZERO_UUID

        def unmarshal_proto(self, data: bytes) -> None:
            self.s = data

    frame = message.encode_fixed_frame(b"payload")
    content = frame + b"garbage!" + frame + b"\n"
    reader = FakeReader([content[:5], content[5:20], content[20:]])
    it = message.ReadUncommittedIter(
        None,
        pb.ReadRequest(journal=JOURNAL),
        lambda s: Raw(),  # type: ignore[arg-type,return-value]
        spec=spec(content_type=pb.CONTENT_TYPE_PROTOBUF_FIXED),
        reader=reader,
    )
    env = await it.next()
    assert (env.begin, env.end, env.message.s) == (0, 15, b"payload")
    with pytest.raises(errors.DecodeError) as exc:
        await it.next()
    assert str(exc.value) == "test/journal@15: detected de-synchronization (skipped 8 bytes)"
    env = await it.next()
    assert (env.begin, env.end) == (23, 38)
    with pytest.raises(StopAsyncIteration):  # The trailing newline is a clean end.
        await it.next()
    assert fixed.content_type == pb.CONTENT_TYPE_PROTOBUF_FIXED


async def test_close_and_context_manager() -> None:
    reader = FakeReader([b'{"Str":"a"}\n{"Str":"b"}\n'])
    async with it_of(reader) as it:
        assert (await it.next()).message.s == "a"
        assert it.offset == 12
    assert reader.closed
    assert it.offset == 12
    with pytest.raises(StopAsyncIteration):
        await it.next()


async def test_read_committed_replays_through_new_readers() -> None:
    # A writes a transaction it never acknowledges; B writes one it does,
    # interleaved. A ring of one forces B's span to be replayed.
    clock = message.Clock()
    msgs = [
        TMsg(message.build_uuid(A, clock.tick(), F.CONTINUE_TXN), "A1"),
        TMsg(message.build_uuid(B, clock.tick(), F.CONTINUE_TXN), "B1"),
        TMsg(message.build_uuid(A, clock.tick(), F.CONTINUE_TXN), "A2"),
        TMsg(message.build_uuid(B, clock.tick(), F.CONTINUE_TXN), "B2"),
        TMsg(message.build_uuid(B, clock.tick(), F.ACK_TXN)),
        TMsg(message.build_uuid(A, clock.tick(), F.OUTSIDE_TXN), "A3"),
    ]
    content = b"".join(JSON.marshal(m) for m in msgs)
    requests: list[pb.ReadRequest] = []

    def open_reader(req: pb.ReadRequest) -> FakeReader:
        requests.append(req)
        lo, hi = req.offset, req.end_offset or len(content)
        return FakeReader([content[lo:hi]], offset=lo)

    seq = message.Sequencer({}, [], 0)
    it = message.ReadCommittedIter(
        None, pb.ReadRequest(journal=JOURNAL, block=True), new_msg, seq, spec=spec(),
        open_reader=open_reader,
    )  # fmt: skip
    got = [env.message async for env in it]
    assert got == [msgs[1], msgs[3], msgs[4], msgs[5]]
    b1_begin = len(JSON.marshal(msgs[0]))
    ack_begin = sum(len(JSON.marshal(m)) for m in msgs[:4])
    assert [(r.journal, r.offset, r.end_offset, r.block) for r in requests] == [
        (JOURNAL, 0, 0, True),
        (JOURNAL, b1_begin, ack_begin, True),
    ]
    offsets, states = seq.checkpoint(0)
    assert offsets == {JOURNAL: len(content)}
    assert sorted(states, key=lambda s: s.producer) == [
        message.ProducerState(JOURNAL, A, message.get_clock(msgs[5].uuid), -1),
        message.ProducerState(JOURNAL, B, message.get_clock(msgs[4].uuid), -1),
    ]
