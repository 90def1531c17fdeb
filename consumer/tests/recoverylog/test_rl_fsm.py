"""The recovery-log FSM, segments, op frames and hints (Gazette consumer/recoverylog/*_test.go)."""

from __future__ import annotations

import json
import pathlib

import pytest

from gazette.consumer import recoverylog as rl
from gazette.consumer.recoverylog import errors
from gazette.consumer.recoverylog.recorded_op_pb2 import FSMHints, RecordedOp, Segment

LOG = "examples/recovery/log"


def test_first_op_frame_and_checksum_match_gazette() -> None:
    # Gazette's recorder_test.go: author 1234, the first op creates /path/to/file.
    op = RecordedOp(seq_no=1, author=1234)
    op.create.path = "/path/to/file"
    frame, payload = rl.encode_op(op)
    assert payload.hex() == "08011dd2040000220f0a0d2f706174682f746f2f66696c65"
    assert frame[:8].hex() == "6633933618000000" and len(frame) == 32
    assert rl.checksum_update(0, payload) == 0x568E8E4E
    back, again, end = rl.decode_op(frame + b"extra")
    assert back == op and again == payload and end == 32
    with pytest.raises(errors.RecoveryLogError):
        rl.decode_op(frame[:20])
    with pytest.raises(ValueError, match="meta fields"):
        rl.encode_op(RecordedOp(seq_no=1, author=1, log="x"))


def test_author_registers_are_base32() -> None:
    assert rl.format_author(1234) == "16i"
    assert rl.format_author(5678) == "5he"


class Log:
    """Records ops into an FSM as a recorder would (sequence and checksum chained)."""

    def __init__(self, fsm: rl.FSM, author: int = 100) -> None:
        self.fsm = fsm
        self.author = author
        self.offset = 0

    def op(self, **kind: dict[str, object]) -> RecordedOp:
        op = RecordedOp(seq_no=self.fsm.next_seq_no, checksum=self.fsm.next_checksum)
        op.author = self.author
        for name, fields in kind.items():
            part = getattr(op, name)
            part.MergeFrom(type(part)(**fields))
        return op

    def apply(self, **kind: dict[str, object]) -> RecordedOp:
        op = self.op(**kind)
        frame, payload = rl.encode_op(op)
        op.first_offset, op.last_offset, op.log = self.offset, self.offset + len(frame), LOG
        self.offset += len(frame)
        self.fsm.apply(op, payload)
        return op


def test_create_link_write_unlink_and_hints() -> None:
    fsm = rl.FSM(FSMHints(log=LOG))
    log = Log(fsm)
    log.apply(create={"path": "/a"})  # fnode 1
    log.apply(create={"path": "/b"})  # fnode 2
    log.apply(write={"fnode": 1, "offset": 0, "length": 0})
    log.apply(link={"fnode": 1, "path": "/a2"})
    assert fsm.links == {"/a": 1, "/b": 2, "/a2": 1}
    with pytest.raises(errors.LinkExists):
        fsm.apply(log.op(create={"path": "/b"}), b"")
    with pytest.raises(errors.NoSuchLink):
        fsm.apply(log.op(unlink={"fnode": 2, "path": "/a"}), b"")
    with pytest.raises(errors.FnodeNotTracked):
        log.apply(write={"fnode": 9})
    log.apply(unlink={"fnode": 2, "path": "/b"})  # fnode 2 is dead
    log.apply(property={"path": "/IDENTITY", "content": "id"})
    assert set(fsm.live_nodes) == {1}

    hints = fsm.build_hints(LOG)
    (node,) = hints.live_nodes
    assert node.fnode == 1
    assert [(s.first_seq_no, s.last_seq_no, s.log) for s in node.segments] == [(1, 4, "")]
    assert [(p.path, p.content) for p in hints.properties] == [("/IDENTITY", "id")]

    # A player from these hints skips the dead fnode 2 and starts at seq 1.
    again = rl.FSM(hints)
    assert (again.next_seq_no, again.next_checksum) == (1, 0)


def test_wrong_sequence_and_checksum_are_refused_without_change() -> None:
    fsm = rl.FSM(FSMHints(log=LOG))
    log = Log(fsm)
    log.apply(create={"path": "/a"})
    op = log.op(create={"path": "/b"})
    op.seq_no += 1
    with pytest.raises(errors.WrongSeqNo):
        fsm.apply(op, b"")
    op = log.op(create={"path": "/b"})
    op.checksum ^= 1
    with pytest.raises(errors.ChecksumMismatch):
        fsm.apply(op, b"")
    assert fsm.next_seq_no == 2 and set(fsm.links) == {"/a"}


def test_hinted_author_and_fnodes_steer_playback() -> None:
    # Hints: live fnodes 1 and 3, written by author 100 in seqs 1..3; author 200 took
    # over and wrote fnode 1 at seq 5 (seq 4 is of no live file).
    hints = FSMHints(log=LOG)
    node = hints.live_nodes.add(fnode=1)
    node.segments.add(author=100, first_seq_no=1, last_seq_no=3, first_offset=0, last_offset=30)
    node.segments.add(author=200, first_seq_no=5, last_seq_no=5, first_offset=40, last_offset=50)
    hints.live_nodes.add(fnode=3).segments.add(
        author=100, first_seq_no=3, last_seq_no=3, first_offset=20, last_offset=30
    )
    fsm = rl.FSM(hints)
    zombie = RecordedOp(seq_no=1, checksum=0, author=999)
    zombie.create.path = "/a"
    with pytest.raises(errors.NotHintedAuthor):
        fsm.apply(zombie, b"")
    log = Log(fsm, author=100)
    log.apply(create={"path": "/a"})
    # A create the hints don't track (its file died later): applied, but no file.
    with pytest.raises(errors.FnodeNotTracked):
        log.apply(create={"path": "/tmp"})
    assert "/tmp" not in fsm.links
    log.apply(create={"path": "/c"})
    # The hinted segment ended at seq 3: the FSM jumps to the next one (seq 5).
    assert fsm.next_seq_no == 5 and fsm.has_remaining_hints
    log.author = 200
    log.apply(write={"fnode": 1, "offset": 0, "length": 0})
    assert not fsm.has_remaining_hints
    assert set(fsm.live_nodes) == {1, 3}


def test_segment_set_merges_and_refuses_disorder() -> None:
    s = rl.SegmentSet()
    s.add(Segment(author=1, first_seq_no=1, last_seq_no=3, first_offset=0, last_offset=30, log=LOG))
    s.add(
        Segment(author=1, first_seq_no=4, last_seq_no=6, first_offset=30, last_offset=60, log=LOG)
    )
    s.add(
        Segment(author=2, first_seq_no=7, last_seq_no=9, first_offset=60, last_offset=90, log=LOG)
    )
    assert [(x.first_seq_no, x.last_seq_no) for x in s] == [(1, 6), (7, 9)]
    with pytest.raises(errors.SegmentError, match="monotonic FirstOffset"):
        s.add(
            Segment(
                author=2, first_seq_no=10, last_seq_no=11, first_offset=5, last_offset=99, log=LOG
            )
        )
    with pytest.raises(errors.SegmentError, match="Author equality"):
        s.add(Segment(author=3, first_seq_no=8, last_seq_no=8, first_offset=70, log=LOG))
    assert [(x.first_seq_no, x.last_seq_no) for x in s.intersect(LOG, 50, 70)] == [(1, 6), (7, 9)]
    assert [(x.first_seq_no, x.last_seq_no) for x in s.intersect(LOG, 61, 70)] == [(7, 9)]


def test_hints_json_is_gos_shape_and_reads_back() -> None:
    # The hints of Gazette's TestFileAppends, as etcd holds them.
    go = (
        '{"log":"examples/integration-tests/recovery-log","live_nodes":[{"fnode":1,'
        '"segments":[{"author":1234,"first_seq_no":1,"last_seq_no":4}]}],"properties":null}'
    )
    hints = rl.hints_from_value(go.encode())
    assert hints.log == "examples/integration-tests/recovery-log"
    assert rl.hints_to_json(hints).decode() == go
    assert rl.hints_from_value(hints.SerializeToString()) == hints
    fnodes, segments = rl.live_log_segments(hints)
    assert fnodes == [1] and segments[0].log == hints.log
    bad = json.loads(go)
    bad["live_nodes"][0]["fnode"] = 2
    with pytest.raises(errors.HintsError, match="FirstSeqNo"):
        rl.FSM(rl.hints_from_value(json.dumps(bad).encode()))
    with pytest.raises(errors.HintsError, match="hinted log"):
        rl.FSM(FSMHints())


def test_player_jumps_only_gaps_that_no_hinted_segment_needs(tmp_path: pathlib.Path) -> None:
    """Pruned fragments leave gaps in a log: playback seeks over those between hinted
    segments (as Gazette's player does) and refuses any other."""
    from gazette.consumer.recoverylog.player import Player
    from gazette.consumer.recoverylog.recorded_op_pb2 import FSMHints

    hints = FSMHints(log="a/log")
    for fnode, first_offset in ((1, 100), (5, 900)):
        node = hints.live_nodes.add(fnode=fnode)
        node.segments.add(
            author=7,
            first_seq_no=fnode,
            first_checksum=0,
            last_seq_no=fnode + 1,
            first_offset=first_offset,
        )
    player = Player(None, hints, tmp_path / "d")  # type: ignore[arg-type]
    # Mid-way through the first hinted segment: nothing may be skipped.
    with pytest.raises(errors.RecoveryLogError, match="skips from 150 to 400"):
        player._jump("a/log", 150, 400)
    # Once it is played, up to the next one's first offset is dead: skipped...
    player.fsm.hinted_segments.pop(0)
    player._buf += b"partial op"
    player._jump("a/log", 300, 900)
    assert player._offset == 900 and not player._buf
    # ...but not past it, nor backwards, nor once no hints remain.
    with pytest.raises(errors.RecoveryLogError):
        player._jump("a/log", 900, 901)
    with pytest.raises(errors.RecoveryLogError):
        player._jump("a/log", 900, 800)
    player.fsm.hinted_segments.clear()
    with pytest.raises(errors.RecoveryLogError):
        player._jump("a/log", 1000, 2000)
