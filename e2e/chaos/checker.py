"""The read-back checker: heal, read every journal from 0 to its head, account for every ack.

1. :func:`wait_writable` — zero-byte appends through any broker until one is
   acknowledged; its commit end is the journal's write head.
2. :func:`read_back` — non-blocking reads from offset 0 to the head, moving on
   to another broker on errors. A response that jumps past the offset asked
   for, or an offset the brokers don't serve (``OFFSET_NOT_YET_AVAILABLE``,
   errors) for ``stall_s`` while the head is beyond it, is a *hole*: a jump is
   recorded and read past, a stall is recorded and ends that journal's read.
3. :func:`verify` — every acknowledged append must read, at exactly its
   acknowledged offsets, as the bytes that were sent; the journal must hold
   only whole records; abandoned appends must be invisible. Records seen more
   than once are counted as duplicates (an unacknowledged retry that did land).
   Two acknowledgements whose spans overlap (:func:`acked_twice`) mean an
   offset was handed out twice: whatever a reader finds there, one of the two
   writers was told something false, and readers may have seen either.
4. :func:`check_store` — straight from the ``file://`` store's directory: every
   fragment file of a journal is decoded (per the codec its name carries) and
   must hold ``end - begin`` bytes of its SHA-1; wherever two fragments overlap
   they must hold the same bytes. Two different contents at one offset mean
   two brokers each believed they wrote the journal there (a split brain),
   whichever of them a reader happens to be served.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import hashlib
import pathlib
import time
from collections.abc import Sequence

import grpc

from chaos.records import RecordId, parse, record
from chaos.workload import Ack, Channels, Endpoints
from gazette.broker import protocol as pb
from gazette.broker import testing
from gazette.broker.fragment import codecs

__all__ = [
    "Hole",
    "ReadBack",
    "StoreCheck",
    "Verdict",
    "acked_twice",
    "cancelled_by_server",
    "check_store",
    "fragment_end",
    "read_back",
    "verify",
    "wait_writable",
]


@dataclasses.dataclass(frozen=True, slots=True)
class Hole:
    journal: str
    offset: int
    reason: str
    #: Where the read went on after jumping (None: it stalled at ``offset`` and ended).
    end: int | None = None

    def __str__(self) -> str:
        return f"{self.journal}@{self.offset}: {self.reason}"


@dataclasses.dataclass
class ReadBack:
    """What was read of ``journal``: contiguous ``segments`` of (offset, bytes), and holes."""

    journal: str
    head: int
    segments: list[tuple[int, bytes]] = dataclasses.field(default_factory=list)
    holes: list[Hole] = dataclasses.field(default_factory=list)

    @property
    def bytes_read(self) -> int:
        return sum(len(b) for _, b in self.segments)

    def slice(self, begin: int, end: int) -> bytes | None:
        """Bytes ``[begin, end)`` if one segment holds them all."""
        for base, data in self.segments:
            if base <= begin and end <= base + len(data):
                return data[begin - base : end - base]
        return None


def cancelled_by_server() -> bool:
    """Whether a CancelledError just caught is the server's CANCELLED status, not ours.

    grpc.aio raises CancelledError for a CANCELLED status from the server (the
    Go Gazette broker relays one from a proxied call whose upstream went away):
    that is an answer to retry, while a cancellation of this task must go on.
    """
    task = asyncio.current_task()
    return task is not None and not task.cancelling()


async def wait_writable(
    channels: Channels, endpoints: Endpoints, journal: str, within: float
) -> tuple[int | None, str]:
    """(write head, "") once a zero-byte append is acknowledged; (None, last error) if not."""
    deadline = time.monotonic() + within
    last = "no attempt"
    turn = 0
    while True:
        addresses = endpoints()
        stub = channels.stub(addresses[turn % len(addresses)])
        turn += 1
        try:
            remaining = max(1.0, min(10.0, deadline - time.monotonic()))
            resp = await testing.append(stub, journal, [], deadline=remaining)
            if resp.status == pb.OK:
                return resp.commit.end, ""
            last = pb.Status.Name(resp.status)
        except grpc.aio.AioRpcError as e:
            last = f"{e.code().name} {e.details()}"
        except asyncio.CancelledError:
            if not cancelled_by_server():
                raise
            last = "CANCELLED (by the server)"
        if time.monotonic() > deadline:
            return None, last
        await asyncio.sleep(0.2)


async def fragment_end(channels: Channels, endpoints: Endpoints, journal: str) -> int:
    """The largest fragment end the brokers know of (0 if none answers)."""
    for address in endpoints():
        try:
            resp = await channels.stub(address).ListFragments(
                pb.FragmentsRequest(journal=journal), timeout=10
            )
        except grpc.aio.AioRpcError:
            continue
        if resp.status == pb.OK:
            return max((f.spec.end for f in resp.fragments), default=0)
    return 0


async def read_back(
    channels: Channels,
    endpoints: Endpoints,
    journal: str,
    head: int,
    *,
    stall_s: float = 15.0,
    within: float = 120.0,
) -> ReadBack:
    """Read ``journal`` from 0 to ``head``; see the module docstring."""
    out = ReadBack(journal, head)
    offset, turn = 0, 0
    buf = bytearray()
    base = 0
    deadline = time.monotonic() + within
    progress_at = time.monotonic()
    last = "no attempt"

    def cut() -> None:
        nonlocal buf, base
        if buf:
            out.segments.append((base, bytes(buf)))
        buf = bytearray()
        base = offset

    while offset < head:
        now = time.monotonic()
        if now - progress_at > stall_s or now > deadline:
            out.holes.append(Hole(journal, offset, f"read stalls ({last}) below head {head}"))
            break
        addresses = endpoints()
        stub = channels.stub(addresses[turn % len(addresses)])
        turn += 1
        req = pb.ReadRequest(journal=journal, offset=offset, block=False, end_offset=head)
        try:
            async for resp in stub.Read(req, timeout=15):
                if resp.content:
                    if resp.offset and resp.offset != offset:
                        last = f"content at {resp.offset} when {offset} was next"
                        break
                    buf += resp.content
                    offset += len(resp.content)
                    progress_at = time.monotonic()
                elif resp.status == pb.OK:
                    if resp.offset > offset:
                        out.holes.append(
                            Hole(
                                journal,
                                offset,
                                f"offset jump to {resp.offset} (no fragment)",
                                end=resp.offset,
                            )
                        )
                        cut()
                        offset = resp.offset
                        base = offset
                        progress_at = time.monotonic()
                else:
                    last = pb.Status.Name(resp.status)
                    break
        except grpc.aio.AioRpcError as e:
            last = f"{e.code().name} {e.details()}"
        if offset < head:
            await asyncio.sleep(0.2)
    cut()
    return out


@dataclasses.dataclass
class StoreCheck:
    """What :func:`check_store` found in the ``file://`` store."""

    fragments: int = 0
    #: Pairs of fragments that overlap, and the bytes compared between them.
    overlaps: int = 0
    overlap_bytes: int = 0
    #: Overlapping fragments with different bytes at some offset, and fragment
    #: files whose content is not what their name says (length, SHA-1, codec).
    conflicts: list[str] = dataclasses.field(default_factory=list)
    #: Files under a journal's directory that are not fragments (not judged).
    strays: list[str] = dataclasses.field(default_factory=list)
    #: Per journal, the ``[begin, end)`` of every well-formed stored fragment.
    spans: dict[str, list[tuple[int, int]]] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True, slots=True)
class _Stored:
    name: str
    begin: int
    end: int
    content: bytes


def _load_fragments(directory: pathlib.Path, journal: str, out: StoreCheck) -> list[_Stored]:
    frags = []
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        rel = path.relative_to(directory).as_posix()
        try:
            spec = pb.parse_fragment_path(rel, journal=journal)
        except pb.ValidationError:
            out.strays.append(f"{journal}/{rel}")
            continue
        raw = path.read_bytes()
        try:
            content = codecs.decompress(spec.compression_codec, raw)
        except Exception as e:  # noqa: BLE001 - any decoding failure is the verdict
            out.conflicts.append(f"{journal}/{rel}: does not decode ({e!r})")
            continue
        if len(content) != spec.end - spec.begin:
            out.conflicts.append(
                f"{journal}/{rel}: holds {len(content)} bytes, its name says "
                f"{spec.end - spec.begin}"
            )
            continue
        digest = pb.sha1sum_to_digest(spec.sum)
        if spec.end > spec.begin and hashlib.sha1(content).digest() != digest:
            out.conflicts.append(f"{journal}/{rel}: content's SHA-1 is not its name's")
            continue
        frags.append(_Stored(rel, spec.begin, spec.end, content))
    return frags


def check_store(root: pathlib.Path, journals: Sequence[str]) -> StoreCheck:
    """Check the fragment files of ``journals`` under the ``file://`` root (see module docs).

    A fragment spans ``[begin, end)`` of its journal; any two whose spans
    overlap are compared on the overlap. Reads whole files: fine for the
    suite's journals of a few MiB.
    """
    out = StoreCheck()
    for journal in journals:
        directory = root / journal
        if not directory.is_dir():
            continue
        frags = sorted(_load_fragments(directory, journal, out), key=lambda f: (f.begin, f.end))
        out.fragments += len(frags)
        out.spans[journal] = [(f.begin, f.end) for f in frags]
        for i, a in enumerate(frags):
            for b in frags[i + 1 :]:
                if b.begin >= a.end:
                    break  # sorted by begin: no later fragment overlaps ``a`` either
                lo, hi = b.begin, min(a.end, b.end)
                if lo >= hi:
                    continue
                out.overlaps += 1
                out.overlap_bytes += hi - lo
                mine = a.content[lo - a.begin : hi - a.begin]
                theirs = b.content[lo - b.begin : hi - b.begin]
                if mine != theirs:
                    at = lo + next(
                        k for k, (x, y) in enumerate(zip(mine, theirs, strict=True)) if x != y
                    )
                    out.conflicts.append(
                        f"{journal}@{at}: {a.name} and {b.name} differ "
                        f"(overlap [{lo},{hi})): {mine[at - lo : at - lo + 40]!r} vs "
                        f"{theirs[at - lo : at - lo + 40]!r}"
                    )
    return out


@dataclasses.dataclass
class Verdict:
    acked: int = 0
    acked_bytes: int = 0
    bytes_verified: int = 0
    #: Acked appends not found, whole and correct, at their acknowledged offsets.
    lost: list[str] = dataclasses.field(default_factory=list)
    #: The same, as the acks themselves (say when each was acknowledged).
    lost_acks: list[Ack] = dataclasses.field(default_factory=list)
    #: Extra copies of records (each record seen n > 1 times adds n - 1).
    duplicated: int = 0
    #: Bytes of the journal that are not whole, correct records.
    garbage: list[str] = dataclasses.field(default_factory=list)
    garbage_bytes: int = 0
    #: Records of abandoned appends that can be read.
    aborted_visible: list[str] = dataclasses.field(default_factory=list)
    holes: list[Hole] = dataclasses.field(default_factory=list)
    bytes_read: int = 0
    #: The stored fragments, when they were checked (:func:`check_store`).
    store: StoreCheck | None = None
    #: Acknowledgements overlapping an earlier one (:func:`acked_twice`).
    twice: list[str] = dataclasses.field(default_factory=list)
    #: Appends read more often than their acknowledgement and the failed attempts
    #: that may have landed allow: a broker said an attempt failed, for sure, and it
    #: is in the journal.
    denied_landed: list[str] = dataclasses.field(default_factory=list)

    @property
    def conflicts(self) -> list[str]:
        """Stored fragments disagreeing at an offset, or not what their names say."""
        return self.store.conflicts if self.store is not None else []

    @property
    def unstored_holes(self) -> list[Hole]:
        """Holes a reader jumped over where the store holds no fragment at all.

        After every broker lost its disk, the journal's unpersisted tail is
        gone, and a broker resuming it past its fence leaves such a jump: it
        spans only offsets that lived on the lost disks (acknowledged appends
        that are lost with them, and offsets never acknowledged). A stall, or
        a jump over offsets some stored fragment holds, is never of that kind.
        Empty when the store was not checked.
        """
        if self.store is None:
            return []
        return [
            h
            for h in self.holes
            if h.end is not None
            and not any(b < h.end and h.offset < e for b, e in self.store.spans.get(h.journal, ()))
        ]


def acked_twice(acks: Sequence[Ack]) -> list[str]:
    """Each acknowledgement whose ``[begin, end)`` overlaps an earlier-starting one's.

    The broker handed those offsets out twice (e.g. it resumed a journal below
    offsets it had already acknowledged): one of the two writers was told its
    bytes are there when they are not, however the journal reads now.
    """
    out = []
    by_journal: dict[str, list[Ack]] = collections.defaultdict(list)
    for a in acks:
        if a.end > a.begin:
            by_journal[a.journal].append(a)
    for journal, spans in by_journal.items():
        spans.sort(key=lambda a: (a.begin, a.end))
        reach: Ack | None = None  # the earlier ack reaching furthest
        for a in spans:
            if reach is not None and a.begin < reach.end:
                out.append(
                    f"{journal}@[{a.begin},{a.end}) {a.ids[0]} overlaps "
                    f"[{reach.begin},{reach.end}) {reach.ids[0]}"
                )
            if reach is None or a.end > reach.end:
                reach = a
    return out


def verify(
    acks: Sequence[Ack],
    reads: Sequence[ReadBack],
    aborted: set[RecordId],
    store: StoreCheck | None = None,
    sent: dict[RecordId, tuple[str, int]] | None = None,
) -> Verdict:
    """Read ``reads`` against ``acks``; ``sent`` (the workload's appends by first
    record: journal and failed attempts that may have landed) bounds the copies of each."""
    v = Verdict(acked=len(acks), acked_bytes=sum(a.end - a.begin for a in acks), store=store)
    v.twice = acked_twice(acks)
    by_journal = {r.journal: r for r in reads}
    seen: collections.Counter[tuple[str, RecordId]] = collections.Counter()
    for r in reads:
        v.holes += r.holes
        v.bytes_read += r.bytes_read
        for base, data in r.segments:
            for span in parse(data, base):
                if span.rid is None:
                    v.garbage_bytes += span.end - span.begin
                    if len(v.garbage) < 10:
                        head = data[span.begin - base : span.begin - base + 60]
                        v.garbage.append(f"{r.journal}@[{span.begin},{span.end}): {head!r}")
                    continue
                seen[(r.journal, span.rid)] += 1
                if span.rid in aborted:
                    v.aborted_visible.append(f"{r.journal}@{span.begin}: {span.rid}")
    v.duplicated = sum(n - 1 for n in seen.values() if n > 1)
    acked = {a.ids[0] for a in acks}
    for first, (journal, uncertain) in (sent or {}).items():
        copies = seen[(journal, first)]
        if copies > (first in acked) + uncertain:
            v.denied_landed.append(
                f"{journal} {first}: read {copies} times, acknowledged {int(first in acked)},"
                f" {uncertain} failed attempts that may have landed"
            )
    for a in acks:
        want = b"".join(record(i) for i in a.ids)
        got = by_journal[a.journal].slice(a.begin, a.end) if a.journal in by_journal else None
        if got == want:
            v.bytes_verified += len(want)
            continue
        what = "not read (beyond the head or in a hole)" if got is None else "different bytes"
        v.lost.append(f"{a.journal}@[{a.begin},{a.end}) {a.ids[0]}+{len(a.ids) - 1}: {what}")
        v.lost_acks.append(a)
    return v
