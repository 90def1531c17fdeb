"""Segment and FSMHints validity (consumer.md §5.3, §5.4)."""

import pytest

from gazette.broker import protocol as pb
from gazette.consumer import recoverylog
from gazette.consumer.protocol import validate

LOG = "recovery/logs/a-shard"


def _seg(**kw) -> recoverylog.Segment:
    base = {
        "author": 0x1234,
        "first_seq_no": 10,
        "first_offset": 100,
        "last_seq_no": 20,
        "last_offset": 200,
        "log": LOG,
    }
    base.update(kw)
    return recoverylog.Segment(**base)


@pytest.mark.parametrize(
    ("seg", "expect"),
    [
        (_seg(), None),
        (_seg(last_offset=0), None),  # Open / unknown last offset.
        (_seg(last_seq_no=10), None),
        (_seg(first_offset=0), None),
        (_seg(author=0), "Author is zero"),
        (_seg(first_seq_no=0), "FirstSeqNo <= 0"),
        (_seg(first_seq_no=-1), "FirstSeqNo <= 0"),
        (_seg(first_offset=-1), "FirstOffset < 0"),
        (_seg(last_seq_no=9), "LastSeqNo < segment.FirstSeqNo"),
        (_seg(last_offset=100), "LastOffset <= segment.FirstOffset"),
        (_seg(last_offset=50), "LastOffset <= segment.FirstOffset"),
        (_seg(log="bad log"), "Log: not a valid token (bad log)"),
        (_seg(log=""), "Log: invalid length (0; expected 4 <= length <= 512)"),
    ],
)
def test_segments(seg: recoverylog.Segment, expect: str | None) -> None:
    if expect is None:
        recoverylog.validate_segment(seg)
        validate(seg)
    else:
        with pytest.raises(pb.ValidationError) as info:
            recoverylog.validate_segment(seg)
        assert str(info.value) == expect


def _hints() -> recoverylog.FSMHints:
    hints = recoverylog.FSMHints(log=LOG)
    n1 = hints.live_nodes.add(fnode=10)
    n1.segments.add(author=1, first_seq_no=10, last_seq_no=12)
    n1.segments.add(author=2, first_seq_no=15, first_offset=10, last_seq_no=16, log="other/log")
    n2 = hints.live_nodes.add(fnode=20)
    n2.segments.add(author=1, first_seq_no=20, last_seq_no=20)
    return hints


def _err(hints: recoverylog.FSMHints) -> str:
    with pytest.raises(pb.ValidationError) as info:
        recoverylog.validate_fsm_hints(hints)
    return str(info.value)


def test_fsm_hints() -> None:
    recoverylog.validate_fsm_hints(_hints())
    recoverylog.validate_fsm_hints(recoverylog.FSMHints())  # No live nodes.

    h = _hints()
    h.live_nodes[0].segments[0].log = LOG
    assert _err(h) == "contained segment.Log duplicates FSMHints.Log"

    h = _hints()
    h.live_nodes[1].segments[0].author = 0
    assert _err(h) == "Segment: Author is zero"

    h = _hints()
    h.live_nodes[0].segments[1].log = "x"
    assert _err(h) == "Segment.Log: invalid length (1; expected 4 <= length <= 512)"

    h = _hints()
    h.log = ""  # Segments without a log then have none.
    assert _err(h) == "Segment.Log: invalid length (0; expected 4 <= length <= 512)"

    h = _hints()
    h.live_nodes[0].segments[0].last_seq_no = 1
    assert _err(h) == "Segment: LastSeqNo < segment.FirstSeqNo"
    # The hints themselves are left untouched (empty logs stay empty).
    assert h.live_nodes[0].segments[0].log == ""
