"""A recovery log laid out byte for byte as Gazette's Go recorder writes it, and its hints.

The log below was written by hand from Go's layout (``recorder.go``,
``recorded_op.proto`` and ``message.EncodeFixedProtoFrame``), not by our
recorder, so these tests hold our FSM and Player to Go's bytes rather than to
our own round trip. ``consumer/tests/interop/test_interop_go_recoverylog.py``
feeds the same bytes to Go's Player, which must agree with ours.

The story it records, as two Go shards would:

* author A (1234) takes the empty log over (a Player hand-off: a no-op), then
  records ``/data/a.txt`` in two writes, hard-links it as
  ``/data/a-link.txt``, writes and removes ``/tmp.txt``, and renames a file
  onto ``/IDENTITY`` (which Go records as a *property*, not a file);
* author B (5678) recovers it, hands off to itself (another no-op), creates
  ``/b.bin``, overwrites the start of fnode 2 and unlinks ``/data/a.txt``.

Every frame is ``66 33 93 36`` (Gazette's fixed-frame magic word), the
payload length as a little-endian uint32, then the RecordedOp protobuf; a
write op's data follows its frame raw. Each op carries the CRC-32C
(Castagnoli) of all previous payloads, chained (headers and write data are
not covered). The payload fields, in the order Go's generated marshaller
writes them (ascending field number):

====  =====  ===========================================================
tag   field  encoding
====  =====  ===========================================================
08    1      seq_no, varint
15    2      checksum, fixed32 little-endian (absent when 0, as proto3 omits zeros)
1d    3      author, fixed32 little-endian: 1234 = d2 04 00 00, 5678 = 2e 16 00 00
22    4      create {0a path}
2a    5      link {08 fnode, 12 path}
32    6      unlink {08 fnode, 12 path}
3a    7      write {08 fnode, 10 offset (absent when 0), 18 length}
42    8      property {0a path, 12 content}
====  =====  ===========================================================

Fields 9 to 11 (first_offset, last_offset, log) are meta fields a player
fills in while reading; no recorder ever writes them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import pathlib
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from gazette.broker import client, testing
from gazette.broker import protocol as pb
from gazette.broker.server import testing as server_testing
from gazette.consumer import recoverylog as rl
from gazette.consumer.recoverylog import errors
from gazette.consumer.recoverylog.recorded_op_pb2 import FSMHints, Property, RecordedOp
from gazette.keyspace import testing as ks_testing

LOG = "examples/recoverylog/fixture"
A, B = 1234, 5678  # Author registers "16i" and "5he".
MAGIC = "66339336"


@dataclasses.dataclass(frozen=True)
class Frame:
    """One op as the log holds it: ``payload`` is hex (spaces between fields)."""

    op: RecordedOp  # The same op, from explicit field values.
    payload: str
    data: bytes = b""

    @property
    def payload_bytes(self) -> bytes:
        return bytes.fromhex(self.payload)

    @property
    def encoded(self) -> bytes:
        size = len(self.payload_bytes).to_bytes(4, "little")
        return bytes.fromhex(MAGIC) + size + self.payload_bytes + self.data


def _op(seq_no: int, checksum: int, author: int, **kind: Any) -> RecordedOp:
    return RecordedOp(seq_no=seq_no, checksum=checksum, author=author, **kind)


Create, Link, Write = RecordedOp.Create, RecordedOp.Link, RecordedOp.Write

FRAMES = [
    # At offset 0. A's Player found the log empty and appended its hand-off:
    # a no-op (no operation field) at seq 1 with the initial checksum 0,
    # which proto3 leaves out. 7 bytes: 08 01, then 1d and the author.
    Frame(_op(1, 0, A), "08 01  1d d2040000"),
    # At 15. A creates /data/a.txt; the file's fnode is this op's seq_no, 2.
    # 15 07e7e9b9 is CRC-32C of frame 1's payload; 22 0d wraps Create {0a 0b path}.
    Frame(
        _op(2, 0xB9E9E707, A, create=Create(path="/data/a.txt")),
        "08 02  15 07e7e9b9  1d d2040000  22 0d 0a 0b 2f646174612f612e747874",
    ),
    # At 50. Write {fnode 2, length 6}: offset 0 is left out; "hello "
    # follows the frame unframed, so this op ends at 50 + 8 + 18 + 6 = 82.
    Frame(
        _op(3, 0x453E7031, A, write=Write(fnode=2, offset=0, length=6)),
        "08 03  15 31703e45  1d d2040000  3a 04 08 02 18 06",
        b"hello ",
    ),
    # At 82. The second write, at offset 6 (10 06), again 6 bytes of data.
    Frame(
        _op(4, 0x402FE9E3, A, write=Write(fnode=2, offset=6, length=6)),
        "08 04  15 e3e92f40  1d d2040000  3a 06 08 02 10 06 18 06",
        b"world!",
    ),
    # At 116. A hard link of fnode 2: Link {08 02, 12 10 path}.
    Frame(
        _op(5, 0x420C2FA3, A, link=Link(fnode=2, path="/data/a-link.txt")),
        "08 05  15 a32f0c42  1d d2040000  2a 14 08 02 12 10 2f646174612f612d6c696e6b2e747874",
    ),
    # At 158. A file that dies later (fnode 6): hints leave it out, and a
    # player from hints skips its ops.
    Frame(
        _op(6, 0x7894FED9, A, create=Create(path="/tmp.txt")),
        "08 06  15 d9fe9478  1d d2040000  22 0a 0a 08 2f746d702e747874",
    ),
    # At 190. Three bytes into fnode 6.
    Frame(
        _op(7, 0x9D115FB2, A, write=Write(fnode=6, length=3)),
        "08 07  15 b25f119d  1d d2040000  3a 04 08 06 18 03",
        b"tmp",
    ),
    # At 219. Its only link removed: fnode 6 is dead.
    Frame(
        _op(8, 0x0CD0E880, A, unlink=Link(fnode=6, path="/tmp.txt")),
        "08 08  15 80e8d00c  1d d2040000  32 0c 08 06 12 08 2f746d702e747874",
    ),
    # At 253. A rename onto /IDENTITY: Go's recorder reads the file and
    # records its content as a Property {0a path, 12 content}.
    Frame(
        _op(9, 0x3A59D979, A, property=Property(path="/IDENTITY", content="fixture-identity\n")),
        "08 09  15 79d9593a  1d d2040000  42 1e 0a 09 2f4944454e54495459"
        " 12 11 666978747572652d6964656e746974790a",
    ),
    # At 305. B's Player, at the head, hands off: a no-op of author B
    # sequenced after everything A wrote (its append also set the log's
    # `author` register to "5he", fencing A out).
    Frame(_op(10, 0x59367FFC, B), "08 0a  15 fc7f3659  1d 2e160000"),
    # At 325. B's recorder: fnode 11.
    Frame(
        _op(11, 0x74B0B4D8, B, create=Create(path="/b.bin")),
        "08 0b  15 d8b4b074  1d 2e160000  22 08 0a 06 2f622e62696e",
    ),
    # At 355. Four binary bytes.
    Frame(
        _op(12, 0xEB911B41, B, write=Write(fnode=11, length=4)),
        "08 0c  15 411b91eb  1d 2e160000  3a 04 08 0b 18 04",
        bytes.fromhex("deadbeef"),
    ),
    # At 385. B overwrites the start of A's fnode 2: that fnode now has a
    # segment of each author.
    Frame(
        _op(13, 0xDB01BC15, B, write=Write(fnode=2, length=5)),
        "08 0d  15 15bc01db  1d 2e160000  3a 04 08 02 18 05",
        b"HELLO",
    ),
    # At 416. /data/a.txt goes; fnode 2 lives on at /data/a-link.txt.
    Frame(
        _op(14, 0x0F9FED8F, B, unlink=Link(fnode=2, path="/data/a.txt")),
        "08 0e  15 8fed9f0f  1d 2e160000  32 0f 08 02 12 0b 2f646174612f612e747874",
    ),
]

#: Where each frame starts; the log ends at 453.
OFFSETS = [0, 15, 50, 82, 116, 158, 190, 219, 253, 305, 325, 355, 385, 416]
LOG_END = 453
#: The checksum a 15th op must carry (computed by Go's crc32.Update with the
#: Castagnoli table over the 14 payloads).
FINAL_CHECKSUM = 2430398996

#: B's recorder's FSMHints after op 14, exactly as Go's encoding/json writes
#: them (Go's shards store this in etcd). Fields are in struct order; zero
#: scalars are omitted (omitempty), so are segment logs equal to "log". Fnode
#: 2's first segment came from B's playback of A's ops, so both its offsets
#: are exact; segments B recorded have a lower-bound first_offset (here, the
#: exact one: every earlier append had completed) and no last_offset. Live
#: nodes are ordered on fnode; /tmp.txt (fnode 6) is dead and absent; the
#: property travels in the hints, since a player from hints never reads op 9.
GO_HINTS_JSON = (
    b'{"log":"examples/recoverylog/fixture","live_nodes":['
    b'{"fnode":2,"segments":['
    b'{"author":1234,"first_seq_no":2,"first_offset":15,"first_checksum":3119113991,'
    b'"last_seq_no":5,"last_offset":158},'
    b'{"author":5678,"first_seq_no":13,"first_offset":385,"first_checksum":3674323989,'
    b'"last_seq_no":14}]},'
    b'{"fnode":11,"segments":['
    b'{"author":5678,"first_seq_no":11,"first_offset":325,"first_checksum":1957737688,'
    b'"last_seq_no":12}]}],'
    b'"properties":[{"path":"/IDENTITY","content":"fixture-identity\\n"}]}'
)

#: The files any correct player leaves (relative to its directory).
EXPECTED_FILES = {
    "data/a-link.txt": b"HELLO world!",
    "b.bin": bytes.fromhex("deadbeef"),
    "IDENTITY": b"fixture-identity\n",
}

# Corrupt frames, in hex as well (each checked against our encoder below).

#: Op 12 with one bit of its checksum flipped (41 -> 40): a broken chain.
BAD_CHECKSUM_12 = Frame(
    _op(12, 0xEB911B40, B, write=Write(fnode=11, length=4)),
    "08 0c  15 401b91eb  1d 2e160000  3a 04 08 0b 18 04",
    bytes.fromhex("deadbeef"),
)
#: A zombie A that never saw B's hand-off: its next op is seq 10 chained from
#: op 9, exactly as B's no-op is, but by A. Appended after B's no-op (as if
#: registers did not fence it), at offset 325.
ZOMBIE_10 = Frame(
    _op(10, 0x59367FFC, A, create=Create(path="/zombie")),
    "08 0a  15 fc7f3659  1d d2040000  22 09 0a 07 2f7a6f6d626965",
)
#: Worse: an A op that is chained correctly after B's hand-off (seq 11, the
#: checksum after op 10). Only the author tells it from B's op 11.
FORGED_11 = Frame(
    _op(11, 0x74B0B4D8, A, create=Create(path="/forged")),
    "08 0b  15 d8b4b074  1d d2040000  22 09 0a 07 2f666f72676564",
)


def log_bytes(frames: list[Frame]) -> bytes:
    return b"".join(f.encoded for f in frames)


def with_frame(at: int, frame: Frame, *, replace: bool = False) -> list[Frame]:
    """FRAMES with ``frame`` put before (or in place of) frame index ``at``."""
    return [*FRAMES[:at], frame, *FRAMES[at + (1 if replace else 0) :]]


def hints_for(log: str) -> FSMHints:
    """GO_HINTS_JSON, of journal ``log`` (the hinted log appears once in it)."""
    return rl.hints_from_value(GO_HINTS_JSON.replace(LOG.encode(), log.encode()))


# -- the bytes --------------------------------------------------------------


def test_fixture_frames_are_what_go_writes() -> None:
    offset, checksum = 0, 0
    for i, frame in enumerate(FRAMES):
        assert offset == OFFSETS[i]
        assert frame.op.seq_no == i + 1
        # Each op chains the CRC-32C of the payloads before it.
        assert frame.op.checksum == checksum, f"seq {i + 1}"
        # Our encoder writes the hand-made bytes, and decodes them back.
        header_and_payload, payload = rl.encode_op(frame.op)
        assert payload == frame.payload_bytes, f"seq {i + 1}"
        assert header_and_payload + frame.data == frame.encoded
        op, payload, end = rl.decode_op(frame.encoded)
        assert op == frame.op and end == len(frame.encoded) - len(frame.data)
        checksum = rl.checksum_update(checksum, payload)
        offset += len(frame.encoded)
    assert (offset, checksum) == (LOG_END, FINAL_CHECKSUM)
    for bad in (BAD_CHECKSUM_12, ZOMBIE_10, FORGED_11):
        assert rl.encode_op(bad.op)[1] == bad.payload_bytes
    # Recorders never write the meta fields.
    assert all(not (f.op.first_offset or f.op.last_offset or f.op.log) for f in FRAMES)


def test_go_hints_json_reads_validates_and_writes_back_byte_for_byte() -> None:
    hints = rl.hints_from_value(GO_HINTS_JSON)
    rl.validate_fsm_hints(hints)
    assert rl.hints_to_json(hints) == GO_HINTS_JSON
    fnodes, segments = rl.live_log_segments(hints)
    assert fnodes == [2, 11]
    # B's two segments touch (12, 13) and merge: A's 2..5, then B's 11..14.
    assert [(s.author, s.first_seq_no, s.last_seq_no, s.first_offset) for s in segments] == [
        (A, 2, 5, 15),
        (B, 11, 14, 325),
    ]
    # The same hints as protobuf bytes (Go also stores them that way) read alike.
    assert rl.hints_from_value(hints.SerializeToString()) == hints


def test_hints_json_escapes_strings_as_go_does() -> None:
    # Printed by Go 1.26's json.Marshal of these hints (HTML-safe escaping is its default).
    go = (
        b'{"log":"a/b","live_nodes":null,"properties":'
        b'[{"path":"/x\\u003c\\u0026\\u003e","content":"\xc3\xa9\\u2028\\n"}]}'
    )
    hints = rl.hints_from_value(go)  # Reading Go's form works...
    assert hints.properties[0].path == "/x<&>" and hints.properties[0].content == "é\u2028\n"
    # ...but writing it back differs in bytes (semantically equal JSON).
    assert rl.hints_to_json(hints) == go, "hints_to_json does not escape strings like Go"


# -- the FSM ----------------------------------------------------------------


def read_ops(log: bytes, offset: int = 0) -> Iterator[tuple[RecordedOp, bytes]]:
    """Ops of ``log`` from ``offset`` with their meta fields, as a player reads them.

    Bytes that are no frame are skipped up to the next magic word, as both
    players do on a de-synchronization.
    """
    magic = bytes.fromhex(MAGIC)
    while offset < len(log):
        if log[offset : offset + 4] != magic:
            nxt = log.find(magic, offset + 1)
            offset = nxt if nxt != -1 else len(log)
            continue
        op, payload, end = rl.decode_op(log, offset)
        if op.HasField("write"):
            end += op.write.length
        op.first_offset, op.last_offset, op.log = offset, end, LOG
        yield op, payload
        offset = end


def apply_all(fsm: rl.FSM, log: bytes, offset: int = 0) -> dict[int, str]:
    """Apply every op; map each seq_no not applied to the FSM's refusal."""
    refused: dict[int, str] = {}
    for op, payload in read_ops(log, offset):
        try:
            fsm.apply(op, payload)
        except errors.FSMError as e:
            refused[op.seq_no] = type(e).__name__
    return refused


def test_fsm_from_the_start_applies_everything_and_builds_gos_hints() -> None:
    fsm = rl.FSM(FSMHints(log=LOG))
    for op, payload in read_ops(log_bytes(FRAMES)):
        if op.author == B and op.seq_no > 10:
            # B's own ops went through its recorder, which knows no last_offset.
            op.last_offset = 0
        fsm.apply(op, payload)
    assert (fsm.next_seq_no, fsm.next_checksum) == (15, FINAL_CHECKSUM)
    assert fsm.links == {"/data/a-link.txt": 2, "/b.bin": 11}
    assert fsm.properties == {"/IDENTITY": "fixture-identity\n"}
    assert rl.hints_to_json(fsm.build_hints(LOG)) == GO_HINTS_JSON


def test_fsm_from_gos_hints_skips_the_dead_branch() -> None:
    fsm = rl.FSM(rl.hints_from_value(GO_HINTS_JSON))
    assert (fsm.next_seq_no, fsm.next_checksum) == (2, 0xB9E9E707)
    # Playback starts at the first hinted offset, 15: op 1 is never read.
    refused = apply_all(fsm, log_bytes(FRAMES), 15)
    # A's ops 6-9 are not of the next hinted author (B), and B's no-op is
    # before B's first hinted seq_no (Go's player logs none of these).
    assert refused == {
        6: "NotHintedAuthor",
        7: "NotHintedAuthor",
        8: "NotHintedAuthor",
        9: "NotHintedAuthor",
        10: "WrongSeqNo",
    }
    assert not fsm.has_remaining_hints
    assert (fsm.next_seq_no, fsm.next_checksum) == (15, FINAL_CHECKSUM)
    assert fsm.links == {"/data/a-link.txt": 2, "/b.bin": 11}
    assert fsm.properties == {"/IDENTITY": "fixture-identity\n"}  # From the hints.


def test_fsm_refuses_a_broken_checksum_and_everything_after_it() -> None:
    log = log_bytes(with_frame(11, BAD_CHECKSUM_12, replace=True))
    # From the start: the chain breaks at 12; 13 and 14 no longer follow.
    fsm = rl.FSM(FSMHints(log=LOG))
    assert apply_all(fsm, log) == {
        12: "ChecksumMismatch",
        13: "WrongSeqNo",
        14: "WrongSeqNo",
    }
    assert fsm.next_seq_no == 12
    assert fsm.links == {"/data/a.txt": 2, "/data/a-link.txt": 2, "/b.bin": 11}
    # From Go's hints: the hinted ops 12-14 are never applied, so hints remain
    # (Go's player then fails: "FSM has unused hints; possible data loss").
    fsm = rl.FSM(rl.hints_from_value(GO_HINTS_JSON))
    assert apply_all(fsm, log, 15)[12] == "ChecksumMismatch"
    assert fsm.has_remaining_hints


def test_fsm_refuses_the_old_author_after_a_hand_off() -> None:
    # A zombie's op repeating B's no-op seq_no and checksum is refused either
    # way: by author from hints, by sequence from the start.
    log = log_bytes(with_frame(10, ZOMBIE_10))
    fsm = rl.FSM(rl.hints_from_value(GO_HINTS_JSON))
    assert apply_all(fsm, log, 15)[10] == "NotHintedAuthor"
    assert fsm.links == {"/data/a-link.txt": 2, "/b.bin": 11}
    fsm = rl.FSM(FSMHints(log=LOG))
    assert apply_all(fsm, log) == {10: "WrongSeqNo"}  # B's no-op came first.
    assert "/zombie" not in fsm.links

    # A correctly chained op of A after the hand-off: only hints, which name
    # B as the author from seq 11 on, refuse it...
    log = log_bytes(with_frame(10, FORGED_11))
    fsm = rl.FSM(rl.hints_from_value(GO_HINTS_JSON))
    assert apply_all(fsm, log, 15)[11] == "NotHintedAuthor"
    assert fsm.links == {"/data/a-link.txt": 2, "/b.bin": 11}
    # ...while the FSM without hints follows the branch it read first, as Go's
    # does (authors are checked against hints only; registers fence writers).
    fsm = rl.FSM(FSMHints(log=LOG))
    refused = apply_all(fsm, log)
    assert refused == {11: "WrongSeqNo", 12: "ChecksumMismatch", 13: "WrongSeqNo", 14: "WrongSeqNo"}
    assert fsm.links == {"/data/a.txt": 2, "/data/a-link.txt": 2, "/forged": 11}


# -- the Player, on a real broker -------------------------------------------


@pytest.fixture
async def jc(
    etcd: Any, etcd_server: ks_testing.EtcdServer, tmp_path: pathlib.Path
) -> AsyncIterator[client.JournalClient]:
    async with (
        server_testing.InProcessCluster(
            etcd_server.endpoint, work_dir=tmp_path / "b", brokers=1
        ) as c,
        client.JournalClient(client.ClientConfig(address=c[0].endpoint)) as jc,
    ):
        yield jc


async def write_log(jc: client.JournalClient, name: str, content: bytes) -> None:
    """Create recovery log ``name`` and append ``content`` to it, raw, in one append."""
    spec = testing.journal_spec(name, labels=[(pb.LABEL_CONTENT_TYPE, pb.CONTENT_TYPE_RECOVERYLOG)])
    await client.apply_journals(jc, pb.ApplyRequest(changes=[pb.ApplyRequest.Change(upsert=spec)]))
    deadline = time.monotonic() + 30
    while True:
        try:
            await asyncio.wait_for(client.append(jc, name, b""), 5)
            break
        except (client.errors.ClientError, TimeoutError):
            assert time.monotonic() < deadline, f"{name} never became writable"
            await asyncio.sleep(0.1)
    resp = await client.append(jc, name, content)
    assert (resp.commit.begin, resp.commit.end) == (0, len(content))


def files_of(root: pathlib.Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.integration
@pytest.mark.timeout(120)
async def test_player_replays_the_fixture_and_hands_off_as_go_does(
    jc: client.JournalClient, tmp_path: pathlib.Path
) -> None:
    await write_log(jc, LOG, log_bytes(FRAMES))

    from_hints = tmp_path / "hints"
    fsm = await rl.Player(jc, hints_for(LOG), from_hints).play()
    assert files_of(from_hints) == EXPECTED_FILES
    assert (fsm.next_seq_no, fsm.next_checksum) == (15, FINAL_CHECKSUM)

    from_start = tmp_path / "start"
    await rl.Player(jc, FSMHints(log=LOG), from_start).play()
    assert files_of(from_start) == EXPECTED_FILES

    # A hand-off to C appends Go's no-op: seq 15, the final checksum, author
    # C (9012 = 34 23 00 00), 12 bytes of payload.
    c = 9012
    fsm = await rl.Player(jc, hints_for(LOG), tmp_path / "heir").play(handoff_author=c)
    tail, _ = await read_raw(jc, LOG, LOG_END)
    assert tail == bytes.fromhex(
        MAGIC + "0c000000" + "080f" + "15" + "14f2dc90" + "1d" + "34230000"
    )
    assert (fsm.next_seq_no, fsm.last_log) == (16, LOG)
    # ...and its append set the register a Go recorder of C checks ("8pk").
    sel = rl.author_selector(c)
    assert [(lb.name, lb.value) for lb in sel.include.labels] == [("author", "8pk")]
    request = pb.AppendRequest(journal=LOG)
    request.check_registers.CopyFrom(sel)
    resp = await client.append(jc, request, b"")
    assert resp.commit.end == LOG_END + len(tail)


async def read_raw(jc: client.JournalClient, name: str, offset: int) -> tuple[bytes, int]:
    """Journal bytes from ``offset`` to the head."""
    head = int((await client.append(jc, name, b"")).commit.end)
    out = bytearray()
    request = pb.ReadRequest(journal=name, offset=offset, end_offset=head, block=True)
    async with client.RetryReader(jc, request) as rr:
        async for chunk in rr:
            out += chunk
    return bytes(out), head


@pytest.mark.integration
@pytest.mark.timeout(120)
async def test_player_fails_on_a_broken_chain_of_hinted_ops_and_cleans_up(
    jc: client.JournalClient, tmp_path: pathlib.Path
) -> None:
    bad = f"{LOG}-bad-checksum"
    await write_log(jc, bad, log_bytes(with_frame(11, BAD_CHECKSUM_12, replace=True)))
    # From Go's hints, the hinted ops 12-14 never apply: playback fails at the
    # head (Go: "offset >= readThrough, but FSM has unused hints; possible data loss").
    out = tmp_path / "bad-hints"
    player = rl.Player(jc, hints_for(bad), out)
    try:
        with pytest.raises(errors.RecoveryLogError, match="hinted segments remain"):
            await player.play()
        # Go's playLog, failing, closes its staged files and removes the
        # directory (cleanupOnAbort), so no half-played store is left behind.
        leftover = sorted(p.relative_to(out).as_posix() for p in out.rglob("*"))
        assert not out.exists() and not player._files, (
            "INCOMPATIBILITY: Player.play (player.py:125) raises without closing its staged"
            f" files or removing {out.name}/ as Go's cleanupOnAbort does; left: {leftover},"
            f" open fnodes: {sorted(player._files)}"
        )
    finally:
        for f in player._files.values():  # Contain the leak this test reports.
            f.close()


@pytest.mark.integration
@pytest.mark.timeout(120)
async def test_player_on_corrupt_fixtures(jc: client.JournalClient, tmp_path: pathlib.Path) -> None:
    # A broken chain, played from the start, stops at the last op that chains:
    # b.bin is created but never written, /data/a.txt is not yet unlinked.
    bad = f"{LOG}-bad-checksum"
    await write_log(jc, bad, log_bytes(with_frame(11, BAD_CHECKSUM_12, replace=True)))
    await rl.Player(jc, FSMHints(log=bad), tmp_path / "bad-start").play()
    assert files_of(tmp_path / "bad-start") == {
        "data/a.txt": b"hello world!",
        "data/a-link.txt": b"hello world!",
        "b.bin": b"",
        "IDENTITY": b"fixture-identity\n",
    }

    # The old author after the hand-off (a zombie, then a correctly chained
    # forgery): from hints, neither lands.
    for name, frame in (("zombie", ZOMBIE_10), ("forged", FORGED_11)):
        journal = f"{LOG}-{name}"
        await write_log(jc, journal, log_bytes(with_frame(10, frame)))
        out = tmp_path / name
        await rl.Player(jc, hints_for(journal), out).play()
        assert files_of(out) == EXPECTED_FILES, name

    # Bytes that are no frame (a de-synchronization) are skipped, up to the
    # next magic word (Go: UnpackFixedFrame's ErrDesyncDetected, then on).
    garbage = f"{LOG}-garbage"
    frames = log_bytes(FRAMES)
    await write_log(jc, garbage, frames[:190] + b"\x00garbage\x66\x33" + frames[190:])
    await rl.Player(jc, FSMHints(log=garbage), tmp_path / "garbage").play()
    assert files_of(tmp_path / "garbage") == EXPECTED_FILES
