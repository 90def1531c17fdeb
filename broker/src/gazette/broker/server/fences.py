"""Acknowledgement fences: how far a journal's acknowledged offsets may reach, in etcd.

A journal's content past its persisted fragments lives only in its brokers'
spools. When every broker holding it dies without its disk (nodes replaced),
the journal's next primary finds its spools behind the persisted end, and can't
tell how far appends were acknowledged beyond it: resuming at the persisted end
would hand those offsets out again, with other bytes, while readers may already
have read the first ones. Gazette refuses such appends until an operator resets
the head (INDEX_HAS_GREATER_OFFSET).

Here every primary keeps a *fence* in etcd ahead of what it acknowledges: an
offset no acknowledgement reaches past. It raises the fence (by
:data:`FENCE_STEP` past the append's end, so once in many appends) before it
answers an append that ends beyond it, and it first takes the fence over, with
its own owner name, before its first answer (so an earlier owner can't lower
it, see below). A head gap (the data plane's ``replica/head_gap.rs``) then resumes the
journal at the persisted end or at the fence, whichever is further: offsets
in between that were acknowledged are lost with the disks that held them, but
none is acknowledged twice. A journal with no fence (never written by our
brokers: new, or served by Go brokers only) can't be known safe: its head gap
is refused as Gazette does.

The fence is a step ahead of the acknowledgements, so a cluster restarted on
its disks would skip up to a step of offsets. To avoid that, a primary also
writes its owner name to ``<spool dir>/fences/``; a broker that finds its own
name still owning a fence when it restarts (nobody acknowledged anything since)
lowers the fence to the confirmed end of what it recovered
(:func:`settle_recovered`): everything it acknowledged is in there.

Keys live beside the keyspace, not under it (Gazette's brokers decode every key
under their root): ``/gazette-fences<etcd prefix>/<journal>``, whose value is
JSON ``{"offset": N, "owner": "..."}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import secrets
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import aetcd

from gazette import allocator
from gazette.allocator import txn
from gazette.broker.fragment import errors as frag_errors
from gazette.broker.server import errors, metrics

log = logging.getLogger(__name__)

FENCE_ROOT = "/gazette-fences"
# How far past an append's end a primary raises its fence: one etcd write per
# this many bytes of a journal's appends (and a gap of at most this many
# offsets after every holder of its tail died without its disk).
FENCE_STEP = 16 << 20
# How long an answer waits for the fence to be raised before failing.
FENCE_TIMEOUT = 10.0
FENCES_DIR = "fences"
# How often a broker denied the fence keys says so again.
DENIED_LOG_INTERVAL = 600.0
# How many skipped ranges a fence remembers (a few total losses' worth).
MAX_SKIPPED = 32


class FenceDenied(errors.BrokerServerError):
    """etcd refuses this broker's user the fence keys (its role covers only the root)."""


@dataclasses.dataclass(frozen=True)
class Fence:
    offset: int
    owner: str
    mod_revision: int = 0
    #: Offset ranges the journal skipped for good, resuming at its fence (the last few).
    skipped: tuple[tuple[int, int], ...] = ()

    def value(self) -> bytes:
        doc: dict[str, Any] = {"offset": self.offset, "owner": self.owner}
        if self.skipped:
            doc["skipped"] = [list(r) for r in self.skipped]
        return json.dumps(doc).encode()

    @classmethod
    def parse(cls, raw: bytes, mod_revision: int) -> Fence:
        doc = json.loads(raw)
        skipped = tuple((int(b), int(e)) for b, e in doc.get("skipped", ()))
        return cls(int(doc["offset"]), str(doc.get("owner", "")), mod_revision, skipped)


class Fences:
    """Reads and writes the fences of one cluster (one etcd prefix)."""

    def __init__(self, etcd: aetcd.Client, prefix: str, spool_dir: str | None = None) -> None:
        self.etcd = etcd
        self.prefix = prefix.rstrip("/")
        self.spool_dir = spool_dir
        self._denied_logged = -DENIED_LOG_INTERVAL

    def key(self, journal: str) -> str:
        return f"{FENCE_ROOT}{self.prefix}/{journal}"

    async def read(self, journal: str) -> Fence | None:
        """The journal's fence, or None if it has none."""
        resp = await self._commit([], [txn.get(self.key(journal))])
        return _fence_of(resp.responses[0].response_range.kvs)

    async def delete(self, *journals: str) -> None:
        """Drop the fences of deleted journals (a journal made again under a name starts
        from its stored fragments, as a new one does)."""
        if journals:
            await self._commit([], [txn.delete(self.key(j)) for j in journals])

    async def raise_to(
        self, journal: str, offset: int, owner: str, *, note_owner: bool = True
    ) -> Fence:
        """Own the fence with it at ``offset`` or beyond (never lowering it); the fence.

        ``note_owner``: first note in the spool dir that we own it (off the event
        loop: the disk may be stalled), which a later call may skip.
        """
        if note_owner and self.spool_dir is not None:
            await asyncio.to_thread(self._write_owner, journal, owner)
        fence, _ = await self._update(
            journal,
            lambda cur: Fence(
                max(offset, cur.offset if cur else 0), owner, 0, cur.skipped if cur else ()
            ),
        )
        assert fence is not None
        return fence

    async def lower(self, journal: str, offset: int, owner: str) -> bool:
        """Lower the fence to ``offset`` if ``owner`` still owns it (see the module doc)."""

        def lowered(cur: Fence | None) -> Fence | None:
            if cur is None or cur.owner != owner or cur.offset <= offset:
                return None
            return dataclasses.replace(cur, offset=offset)

        _, wrote = await self._update(journal, lowered)
        return wrote

    async def skip(self, journal: str, begin: int, end: int) -> Fence:
        """Record that the journal skipped ``[begin, end)`` for good; the fence."""

        def skipping(cur: Fence | None) -> Fence | None:
            base = cur or Fence(end, "")
            skipped = tuple(sorted({*base.skipped, (begin, end)}))[-MAX_SKIPPED:]
            if cur is not None and skipped == cur.skipped:
                return None
            return dataclasses.replace(base, skipped=skipped)

        fence, _ = await self._update(journal, skipping)
        assert fence is not None
        return fence

    async def resume_past(
        self, journal: str, index_end: int
    ) -> tuple[int, tuple[tuple[int, int], ...]] | None:
        """Where a journal whose spools trail its persisted end ``index_end`` goes on,
        and the ranges it skipped for good (readers jump them); None: refuse.

        Past its persisted fragments and its fence, recording the range in
        between as skipped. A journal without a fence had no acknowledgement
        from brokers of ours under this etcd prefix (it is new here, over a
        store that holds its past): it goes on at the persisted end. None if
        etcd denies us the fences: then nothing tells how far appends were
        acknowledged (logged by :meth:`_commit`).
        """
        try:
            fence = await self.read(journal)
            if fence is None:
                log.warning(
                    "journal %s has no acknowledgement fence: no broker of ours acknowledged"
                    " an append to it under this etcd prefix, so it goes on at %d, where its"
                    " persisted fragments end (brokers that keep no fence, such as Gazette's,"
                    " may have acknowledged more: clusters mixing them should run ours with"
                    " --broker.resume-head-gaps=false)",
                    journal,
                    index_end,
                )
                return index_end, ()
            if fence.offset <= index_end:
                return index_end, ()
            log.error(
                "journal %s: its persisted fragments end at %d, but appends may have been"
                " acknowledged up to %d (its acknowledgement fence, owned by %s): every"
                " broker that held [%d, %d) is gone. The journal goes on at %d; what was"
                " acknowledged in between is lost, and no offset of it is handed out again",
                journal,
                index_end,
                fence.offset,
                fence.owner,
                index_end,
                fence.offset,
                fence.offset,
            )
            metrics.JOURNAL_FENCE_SKIPPED_BYTES.inc(fence.offset - index_end)
            fence = await self.skip(journal, index_end, fence.offset)
            return fence.offset, fence.skipped
        except FenceDenied:
            return None

    async def skipped(self, journal: str) -> tuple[tuple[int, int], ...]:
        """The ranges ``journal`` skipped for good (none if its fence can't be read)."""
        try:
            fence = await self.read(journal)
        except FenceDenied:
            return ()
        return fence.skipped if fence is not None else ()

    async def _update(
        self, journal: str, change: Callable[[Fence | None], Fence | None]
    ) -> tuple[Fence | None, bool]:
        """Write ``change(current fence)`` unless it is None, retrying lost races.

        Returns the fence as it then stands, and whether it was written.
        """
        key = self.key(journal)
        cur = await self.read(journal)
        while True:
            want = change(cur)
            if want is None:
                return cur, False
            resp = await self._commit(
                [txn.mod_revision_is(key, cur.mod_revision if cur else 0)],
                [txn.put(key, want.value())],
                [txn.get(key)],
            )
            if resp.succeeded:
                return dataclasses.replace(want, mod_revision=int(resp.header.revision)), True
            cur = _fence_of(resp.responses[0].response_range.kvs)

    def owners_on_disk(self) -> dict[str, str]:
        """journal -> owner name, of the fences this broker's spool dir says it took."""
        if self.spool_dir is None:
            return {}
        directory = os.path.join(self.spool_dir, FENCES_DIR)
        out: dict[str, str] = {}
        for name in _listdir(directory):
            try:
                with open(os.path.join(directory, name), encoding="utf-8") as f:
                    out[urllib.parse.unquote(name)] = f.read().strip()
            except OSError as e:
                log.warning("fence owner file %s unreadable: %s", name, e)
        return out

    def forget_owner(self, journal: str) -> None:
        if self.spool_dir is None:
            return
        path = os.path.join(self.spool_dir, FENCES_DIR, _file_name(journal))
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)

    def _write_owner(self, journal: str, owner: str) -> None:
        """Note on disk that we own the journal's fence, before we do."""
        assert self.spool_dir is not None
        directory = os.path.join(self.spool_dir, FENCES_DIR)
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, _file_name(journal))
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(owner)
        os.replace(tmp, path)

    async def _commit(
        self, cmps: list[Any], ops: list[Any], failure: list[Any] | None = None
    ) -> Any:
        try:
            return await txn.commit(self.etcd, cmps, ops, failure)
        except allocator.errors.EtcdError as e:
            if "permission denied" in str(e):
                now = time.monotonic()
                if now - self._denied_logged > DENIED_LOG_INTERVAL:
                    self._denied_logged = now
                    log.error(
                        "etcd denies this broker's user the acknowledgement fences under"
                        " %s%s/ (%s): appends are acknowledged without one, and a journal"
                        " that loses every broker holding its tail refuses appends until"
                        " `gazctl journals reset-head`, as Gazette's do. Grant the user's"
                        " role read and write on that prefix too.",
                        FENCE_ROOT,
                        self.prefix,
                        e,
                    )
                raise FenceDenied(f"acknowledgement fence: {e}") from e
            raise errors.BrokerServerError(f"acknowledgement fence: {e}") from e


class JournalFence:
    """The fence of one journal as its primary (one Replica) keeps it."""

    def __init__(self, fences: Fences, journal: str, owner_id: str) -> None:
        self.fences = fences
        self.journal = journal
        self.owner = f"{owner_id}#{secrets.token_hex(6)}"
        # Acknowledgements may go up to here without a write (-1: not owned yet).
        self.covered = -1
        self._raising: asyncio.Future[None] | None = None

    def covers(self, end: int) -> bool:
        return end <= self.covered

    async def cover(self, end: int) -> None:
        """Return once acknowledging up to ``end`` is within our fence."""
        async with asyncio.timeout(FENCE_TIMEOUT):
            while not self.covers(end):
                if self._raising is None:
                    self._raising = asyncio.ensure_future(self._raise(end + FENCE_STEP))
                raising = self._raising
                try:
                    await asyncio.shield(raising)
                finally:
                    if raising.done() and self._raising is raising:
                        self._raising = None

    async def _raise(self, offset: int) -> None:
        try:
            fence = await self.fences.raise_to(
                self.journal, offset, self.owner, note_owner=self.covered < 0
            )
        except FenceDenied:
            # Not allowed to keep one (logged): go on without, asking again a step on.
            self.covered = max(self.covered, offset)
            return
        self.covered = max(self.covered, fence.offset)


async def settle_recovered(
    fences: Fences,
    confirmed: dict[str, int],
    stored_end: Callable[[str], Awaitable[int | None]] | None = None,
) -> None:
    """Lower the fences this broker still owns to what it recovered (see the module doc).

    ``confirmed``: journal -> the greatest confirmed end of its recovered spools.
    A fence we own for a journal we recovered no spool of was over content we had
    all stored before we stopped: ``stored_end(journal)`` (the end of its stored
    fragments, None if unknown) lowers it to that, so that a later head gap skips
    nothing it needn't.
    """
    for journal, owner in fences.owners_on_disk().items():
        end = confirmed.get(journal)
        how = "recovered"
        try:
            if end is None and stored_end is not None:
                end, how = await stored_end(journal), "stored"
            if end is not None and await fences.lower(journal, end, owner):
                log.info("journal %s: acknowledgement fence lowered to %d (%s)", journal, end, how)
        except (errors.BrokerServerError, frag_errors.FragmentError, OSError) as e:
            log.warning("journal %s: fence not settled: %s", journal, e)
            continue
        fences.forget_owner(journal)


def _fence_of(kvs: Iterable[Any]) -> Fence | None:
    for kv in kvs:
        try:
            return Fence.parse(kv.value, int(kv.mod_revision))
        except (ValueError, KeyError, TypeError) as e:
            # Replaced by the next primary's fence; until then it says nothing.
            log.error("malformed acknowledgement fence %r: %s", kv.value[:80], e)
            return Fence(0, "", int(kv.mod_revision))
    return None


def _file_name(journal: str) -> str:
    return urllib.parse.quote(journal, safe="")


def _listdir(directory: str) -> list[str]:
    try:
        return [n for n in os.listdir(directory) if not n.endswith(".tmp")]
    except FileNotFoundError:
        return []
