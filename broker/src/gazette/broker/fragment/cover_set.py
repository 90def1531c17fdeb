"""CoverSet: the fragments of one journal that best cover its offsets (Gazette `broker/fragment/cover_set.go`).

A CoverSet is ordered on begin and end, and no member is wholly covered by
another member (it may be covered by several together). Both begins and ends
therefore strictly increase. Larger fragments win: adding one replaces every
member it covers. The algorithms follow Gazette's ``cover_set.go`` step for
step, because they decide which fragment serves a read.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator

from gazette.broker import protocol as pb
from gazette.broker.fragment import files


class Fragment:
    """A pb.Fragment and, while it lives in a spool, its local uncompressed file.

    The wrapped message must not be mutated afterwards: ``begin``, ``end`` and
    ``mod_time`` are read once, as CoverSet searches compare them constantly.
    """

    __slots__ = ("begin", "end", "file", "mod_time", "spec")

    def __init__(self, spec: pb.Fragment, file: files.SpoolFile | None = None) -> None:
        self.spec = spec
        self.file = file
        self.begin: int = spec.begin
        self.end: int = spec.end
        self.mod_time: int = spec.mod_time

    @property
    def journal(self) -> str:
        return self.spec.journal

    @property
    def content_length(self) -> int:
        return self.end - self.begin

    def __repr__(self) -> str:
        where = "local" if self.file is not None else self.spec.backing_store or "remote"
        return f"Fragment({self.spec.journal}:[{self.begin}, {self.end}) {where})"


def _end_key(f: Fragment) -> int:
    return f.end


class CoverSet:
    """Fragments of one journal, none covered by another; begins and ends increase."""

    __slots__ = ("_frags",)

    def __init__(self, fragments: Iterable[Fragment] = ()) -> None:
        self._frags: list[Fragment] = []
        for f in fragments:
            self.add(f)

    def __len__(self) -> int:
        return len(self._frags)

    def __iter__(self) -> Iterator[Fragment]:
        return iter(self._frags)

    def __getitem__(self, i: int) -> Fragment:
        return self._frags[i]

    def __repr__(self) -> str:
        return f"CoverSet({self._frags!r})"

    def copy(self) -> CoverSet:
        out = CoverSet()
        out._frags = list(self._frags)
        return out

    def begin_offset(self) -> int:
        """Lowest begin of any fragment, or 0 when empty."""
        return self._frags[0].begin if self._frags else 0

    def end_offset(self) -> int:
        """Highest end of any fragment, or 0 when empty."""
        return self._frags[-1].end if self._frags else 0

    def add(self, fragment: Fragment) -> bool:
        """Add ``fragment`` in place; True when an offset span now maps to it."""
        s = self._frags
        n = len(s)
        if n and fragment.spec.journal != s[0].spec.journal:
            raise ValueError(
                f"journal mismatch: {fragment.spec.journal!r} added to {s[0].spec.journal!r}"
            )
        # Fast paths: empty fragments never cover anything; an empty set takes anything.
        if fragment.end == fragment.begin:
            return False
        if n == 0:
            s.append(fragment)
            return True
        # The fragment ends after the last one: it replaces it or follows it.
        last = s[-1]
        if last.end < fragment.end:
            if last.begin < fragment.begin:
                s.append(fragment)
                return True
            if n == 1 or s[-2].begin < fragment.begin:
                s[-1] = fragment
                return True
            # It also covers earlier members. Gazette's fast path would replace only the
            # last one and leave a covered member behind (breaking the invariant; reads
            # are unaffected as they pick the longest cover); the slow path replaces all.

        # Slow path: find the run [r_begin, r_end) of members this fragment replaces.
        r_begin = bisect.bisect_right(s, fragment.begin, key=_end_key)  # first end > begin
        while r_begin != n:
            e = s[r_begin]
            # A member that covers the fragment without equalling its span keeps its place.
            if (e.begin <= fragment.begin and e.end > fragment.end) or (
                e.begin < fragment.begin and e.end >= fragment.end
            ):
                return False
            if e.begin >= fragment.begin:
                break
            r_begin += 1
        r_end = r_begin
        while r_end != n and s[r_end].end <= fragment.end:
            r_end += 1
        s[r_begin:r_end] = [fragment]
        return True

    def longest_overlapping(self, offset: int) -> tuple[int, bool]:
        """Index of the fragment covering ``offset`` that extends furthest.

        Returns ``(ind, found)``. When no fragment covers ``offset``, ``ind`` is
        that of the next fragment after it (possibly ``len(self)``).
        """
        return _longest_overlapping(self._frags, offset, 0)


def _longest_overlapping(s: list[Fragment], offset: int, lo: int) -> tuple[int, bool]:
    ind = bisect.bisect_right(s, offset, lo=lo, key=_end_key)  # first end > offset
    found = ind < len(s) and s[ind].begin <= offset
    while ind + 1 < len(s) and s[ind + 1].begin <= offset:
        ind += 1
    return ind, found


def difference(a: CoverSet, b: CoverSet) -> CoverSet:
    """Fragments of ``a`` covering some offset that no contiguous run of ``b`` covers."""
    out = CoverSet()
    bs = b._frags
    n = len(bs)
    lo = 0  # No fragment of bs[:lo] overlaps an offset >= the current a-fragment's begin.
    for f in a:
        lo, _ = _longest_overlapping(bs, f.begin, lo)
        i = lo
        # Let a run of contiguous or overlapping b-fragments cover f together.
        while i + 1 < n and bs[i].end < f.end and bs[i + 1].begin <= bs[i].end:
            i += 1
        if lo == n or f.begin < bs[lo].begin or f.end > bs[i].end:
            out._frags.append(f)  # Not covered; a's invariants carry over to a subset.
    return out
