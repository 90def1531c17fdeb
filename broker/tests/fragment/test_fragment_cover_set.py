"""CoverSet: every branch of add, longest_overlapping and difference, plus properties."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gazette.broker import protocol as pb
from gazette.broker.fragment import cover_set

JOURNAL = "a/journal"


def frag(begin: int, end: int, journal: str = JOURNAL) -> cover_set.Fragment:
    return cover_set.Fragment(
        pb.Fragment(journal=journal, begin=begin, end=end, compression_codec=pb.NONE)
    )


def spans(s: cover_set.CoverSet) -> list[tuple[int, int]]:
    return [(f.begin, f.end) for f in s]


def build(*pairs: tuple[int, int]) -> cover_set.CoverSet:
    s = cover_set.CoverSet()
    for b, e in pairs:
        assert s.add(frag(b, e))
    return s


def test_add_empty_fragment_is_ignored() -> None:
    s = cover_set.CoverSet()
    assert not s.add(frag(5, 5))
    assert len(s) == 0


def test_add_rejects_other_journal() -> None:
    s = build((0, 10))
    with pytest.raises(ValueError, match="journal mismatch"):
        s.add(frag(10, 20, journal="other/journal"))


def test_add_insert_at_end() -> None:
    assert spans(build((100, 200), (200, 300), (201, 301))) == [(100, 200), (200, 300), (201, 301)]


def test_add_replace_range_at_end() -> None:
    s = build((100, 200), (200, 300), (300, 400), (400, 500), (150, 500))
    assert spans(s) == [(100, 200), (150, 500)]


def test_add_replace_one_at_end() -> None:
    assert spans(build((100, 200), (200, 300), (199, 300))) == [(100, 200), (199, 300)]
    assert spans(build((100, 200), (200, 300), (200, 301))) == [(100, 200), (200, 301)]


def test_add_replace_range_in_middle() -> None:
    s = build((100, 200), (200, 300), (300, 400), (400, 500), (150, 450))
    assert spans(s) == [(100, 200), (150, 450), (400, 500)]


def test_add_replace_one_in_middle() -> None:
    s = build((100, 200), (200, 300), (300, 400), (150, 350))
    assert spans(s) == [(100, 200), (150, 350), (300, 400)]


def test_add_insert_in_middle() -> None:
    exact = build((100, 200), (300, 400), (200, 300))
    assert spans(exact) == [(100, 200), (200, 300), (300, 400)]
    close = build((100, 200), (300, 400), (201, 299))
    assert spans(close) == [(100, 200), (201, 299), (300, 400)]


def test_add_at_beginning() -> None:
    assert spans(build((100, 200), (200, 300), (300, 400), (100, 300))) == [(100, 300), (300, 400)]
    assert spans(build((100, 200), (200, 300), (300, 400), (99, 200))) == [
        (99, 200),
        (200, 300),
        (300, 400),
    ]
    assert spans(build((200, 300), (300, 400), (199, 200))) == [(199, 200), (200, 300), (300, 400)]


def test_add_overlapping_ranges() -> None:
    s = build(
        (100, 150), (149, 201), (200, 250), (250, 300), (299, 351), (350, 400),
        (200, 300), (300, 400), (100, 200),
    )  # fmt: skip
    assert spans(s) == [(100, 200), (149, 201), (200, 300), (299, 351), (300, 400)]


def test_add_only_exact_replacements_of_covered_spans() -> None:
    s = build((100, 200), (200, 300), (300, 400))
    # Covered by a member without equalling it: first covering test (e.end > f.end) ...
    assert not s.add(frag(100, 199))
    assert not s.add(frag(200, 299))
    # ... and the second (e.begin < f.begin).
    assert not s.add(frag(101, 200))
    assert not s.add(frag(201, 300))
    assert not s.add(frag(301, 400))
    # An exact equal replaces (reported as a change).
    replacement = frag(200, 300)
    assert s.add(replacement)
    assert s[1] is replacement
    assert spans(s) == [(100, 200), (200, 300), (300, 400)]


def test_offsets() -> None:
    s = cover_set.CoverSet()
    assert (s.begin_offset(), s.end_offset()) == (0, 0)
    s.add(frag(100, 150))
    assert (s.begin_offset(), s.end_offset()) == (100, 150)
    s.add(frag(140, 250))
    assert (s.begin_offset(), s.end_offset()) == (100, 250)
    s.add(frag(50, 100))
    assert (s.begin_offset(), s.end_offset()) == (50, 250)


@pytest.mark.parametrize(
    ("offset", "found", "ind"),
    [
        (0, False, 0), (100, True, 0), (148, True, 0), (149, True, 1), (199, True, 1),
        (200, True, 2), (298, True, 2), (299, True, 3), (300, True, 4), (350, True, 4),
        (399, True, 4), (400, False, 5), (401, False, 5), (499, False, 5), (500, True, 5),
        (599, True, 5), (600, False, 6),
    ],
)  # fmt: skip
def test_longest_overlapping(offset: int, found: bool, ind: int) -> None:
    s = build((100, 200), (149, 201), (200, 300), (299, 351), (300, 400), (500, 600))
    assert s.longest_overlapping(offset) == (ind, found)


def test_difference() -> None:
    b = build((100, 200), (150, 225), (225, 250), (250, 300), (301, 400))
    a = build(
        (99, 105),  # Begins before b's first fragment.
        (100, 110),  # Inside one of b's fragments.
        (110, 120),
        (130, 210),  # Covered by two of b's fragments together.
        (150, 225),  # Exactly one of b's.
        (151, 300),  # Covered by three together.
        (152, 301),  # Not covered: a one-byte gap at 300.
        (300, 350),  # Not covered, same gap.
        (301, 360),  # Covered.
        (360, 401),  # Runs past b's coverage.
        (400, 450),  # Wholly after b.
    )
    out = cover_set.difference(a, b)
    assert spans(out) == [(99, 105), (152, 301), (300, 350), (360, 401), (400, 450)]
    assert spans(cover_set.difference(a, cover_set.CoverSet())) == spans(a)
    assert spans(cover_set.difference(cover_set.CoverSet(), b)) == []


def test_parse_with_multiple_overlaps() -> None:
    names = [
        "0000000000000000-00000000400a8d41",
        "00000000400a8d41-00000000595722d7",
        "00000000400a8d41-000000007a3fb5ee",
        "00000000400a8d41-000000007af92e59",
        "00000000595722d7-000000007af92fb4",
        "000000007a3fb5ee-000000007af92fb4",
        "000000007af92e59-000000007af92e59",
    ]
    s = cover_set.CoverSet()
    for n in names:
        s.add(
            cover_set.Fragment(pb.parse_fragment_path(n + "-" + "0" * 40 + ".raw", journal=JOURNAL))
        )
    assert spans(s) == [(0, 0x400A8D41), (0x400A8D41, 0x7AF92E59), (0x595722D7, 0x7AF92FB4)]


# -- Properties --------------------------------------------------------------------------

spans_strategy = st.lists(
    st.tuples(st.integers(0, 200), st.integers(0, 60)).map(lambda t: (t[0], t[0] + t[1])),
    max_size=40,
)


def _covered(s: cover_set.CoverSet) -> set[int]:
    return {o for f in s for o in range(f.begin, f.end)}


@settings(max_examples=300, deadline=None)
@given(spans_strategy)
def test_add_keeps_invariants(pairs: list[tuple[int, int]]) -> None:
    s = cover_set.CoverSet()
    offsets: set[int] = set()
    for b, e in pairs:
        before = _covered(s)
        s.add(frag(b, e))
        offsets |= set(range(b, e))
        # Adding never loses coverage.
        assert before <= _covered(s)
        # Begins and ends strictly increase.
        assert all(
            x.begin < y.begin and x.end < y.end for x, y in zip(s, list(s)[1:], strict=False)
        )
        # No member is covered by another.
        assert not any(x is not y and y.begin <= x.begin and x.end <= y.end for x in s for y in s)
        assert all(f.begin < f.end for f in s)
    # Every added offset stays covered.
    assert _covered(s) == offsets


@settings(max_examples=300, deadline=None)
@given(spans_strategy, st.integers(-1, 300))
def test_longest_overlapping_property(pairs: list[tuple[int, int]], offset: int) -> None:
    s = cover_set.CoverSet(frag(b, e) for b, e in pairs)
    ind, found = s.longest_overlapping(offset)
    covering = [i for i, f in enumerate(s) if f.begin <= offset < f.end]
    if covering:
        assert found
        assert ind == max(covering, key=lambda i: s[i].end)
    else:
        assert not found
        assert ind == next((i for i, f in enumerate(s) if f.begin > offset), len(s))


@settings(max_examples=300, deadline=None)
@given(spans_strategy, spans_strategy)
def test_difference_property(
    a_pairs: list[tuple[int, int]], b_pairs: list[tuple[int, int]]
) -> None:
    a = cover_set.CoverSet(frag(x, y) for x, y in a_pairs)
    b = cover_set.CoverSet(frag(x, y) for x, y in b_pairs)
    out = cover_set.difference(a, b)
    b_offsets = _covered(b)
    for f in a:
        fully = set(range(f.begin, f.end)) <= b_offsets
        assert (f in list(out)) == (not fully)


def test_add_at_end_replacing_several_members() -> None:
    # Gazette's fast path would leave (0, 1) behind, covered by (0, 3); we replace both.
    assert spans(build((0, 1), (1, 2), (0, 3))) == [(0, 3)]
    assert spans(build((0, 5), (5, 8), (8, 9), (5, 10))) == [(0, 5), (5, 10)]
