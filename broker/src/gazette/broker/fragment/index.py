"""The fragment index of one journal replica (Gazette `broker/fragment/index.go`).

The index holds two CoverSets: ``set`` (every known fragment, local and
remote) and ``local`` (fragments backed by this broker's spool files). Spool
commits add local fragments; a refresh from store listings replaces the
remote ones and drops locals that have become durable. Readers query it for
the fragment that serves an offset and, when asked to block, wait for the
next change.

Everything runs on one event loop, so no lock is needed: a change replaces
``_changed`` (an :class:`asyncio.Event`) after setting it, which wakes exactly
the queries that were waiting for *this* change, like Gazette's closed
condition channel.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence

from gazette.broker import protocol as pb
from gazette.broker.fragment import cover_set, errors, files, stores

log = logging.getLogger(__name__)

# A read of an offset no fragment covers may jump forward to the next persisted
# fragment when that fragment is at least this old (or is the journal's first).
OFFSET_JUMP_AGE_THRESHOLD = 6 * 3600.0
# Lifetime of the URL signed into a read's metadata response.
READ_URL_TTL = 60.0
# How long a non-blocking read of a hole below the write head waits for the store
# listing it asked for before it answers OFFSET_NOT_YET_AVAILABLE.
HOLE_LISTING_WAIT = 2.0

Signer = Callable[[pb.Fragment, float], str]
"""Signs a GET of a persisted fragment for ``ttl`` seconds (see ``stores.StoreRegistry``)."""


class Index:
    """Queryable index of a journal's local and remote fragments.

    ``signer`` signs URLs of persisted fragments into read responses (None:
    no URL). ``clock`` returns Unix seconds; tests inject it to age fragments.
    ``on_hole`` is called when a query finds no fragment at its offset although
    the index reaches past it, with the offset where that hole ends (reads of
    one hole at different offsets name it alike): content this broker never held (it
    joined the journal's replicas later, or missed a roll) that other brokers
    may have persisted since the last listing, so the owner may list the stores
    now rather than at the next refresh interval; it returns whether it asked
    for a listing. A non-blocking query then waits once, up to
    ``hole_listing_wait`` seconds, for that listing before it answers.
    """

    def __init__(
        self,
        *,
        signer: Signer | None = None,
        clock: Callable[[], float] = time.time,
        on_hole: Callable[[int], bool] | None = None,
        hole_listing_wait: float = HOLE_LISTING_WAIT,
    ):
        self._set = cover_set.CoverSet()
        self._local = cover_set.CoverSet()
        # The last store listing as it came (local fragments may hide some of it in _set).
        self._listed_remote = cover_set.CoverSet()
        self._signer = signer
        self._clock = clock
        self._on_hole = on_hole
        self._hole_listing_wait = hole_listing_wait
        self._changed = asyncio.Event()
        self._listed = asyncio.Event()  # Replaced after each applied listing.
        self._first_refresh = asyncio.Event()
        self._closed = False
        # Offset ranges no fragment will ever cover (see mark_skipped), sorted, and
        # whether a store listing was applied since they were last extended.
        self._skipped: tuple[tuple[int, int], ...] = ()
        self._skipped_listed = True

    # -- Queries ------------------------------------------------------------------------

    async def query(self, req: pb.ReadRequest) -> tuple[pb.ReadResponse, files.SpoolFile | None]:
        """The fragment serving ``req.offset``, as Gazette's `Index.Query` picks it.

        Returns the metadata response and, for a spool-backed fragment, its local
        file. Blocks (``req.block``) until an index change makes the offset
        available; raises :class:`errors.IndexClosedError` if the index closes
        meanwhile (task cancellation propagates as usual).
        """
        offset = req.offset if req.offset != -1 else self._set.end_offset()
        waited_for_listing = False
        while True:
            s = self._set
            ind, found = s.longest_overlapping(offset)
            changed = self._changed

            # Jump over a hole to the next persisted fragment if the read starts before
            # the journal's first fragment, or the next fragment was persisted long ago.
            # Younger holes block: another broker may still be uploading their fragment.
            # And over a range the journal skipped for good, at once.
            if (
                not found
                and ind != len(s)
                and (
                    (
                        s[ind].mod_time != 0
                        and (
                            ind == 0 or s[ind].mod_time < self._clock() - OFFSET_JUMP_AGE_THRESHOLD
                        )
                    )
                    or (self._skipped_listed and self._within_skipped(offset, s[ind].begin))
                )
            ):
                offset = s[ind].begin
                found = True

            if found:
                frag = s[ind]
                if frag.mod_time != 0 and frag.mod_time < req.begin_mod_time:
                    # Persisted before the requested lower bound: skip its content.
                    offset = frag.end
                    continue
                resp = pb.ReadResponse(status=pb.OK, offset=offset, write_head=s.end_offset())
                resp.fragment.CopyFrom(frag.spec)
                if frag.spec.backing_store and frag.mod_time != 0 and self._signer is not None:
                    resp.fragment_url = self._signer(frag.spec, READ_URL_TTL)
                return resp, frag.file

            listing = ind != len(s) and self._on_hole is not None and self._on_hole(s[ind].begin)
            if listing and not req.block and not waited_for_listing:
                waited_for_listing = True
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._hole_listing_wait):
                        await self._listed.wait()
                continue

            if not req.block:
                resp = pb.ReadResponse(
                    status=pb.OFFSET_NOT_YET_AVAILABLE, offset=offset, write_head=s.end_offset()
                )
                return resp, None

            if self._closed:
                raise errors.IndexClosedError("fragment index closed")
            await changed.wait()

    def summary(self) -> tuple[int, int, int]:
        """(first begin, last end, mod_time of the last fragment; 0 while it is local)."""
        if not self._set:
            return 0, 0, 0
        last = self._set[len(self._set) - 1]
        return self._set.begin_offset(), last.end, last.mod_time

    def end_offset(self) -> int:
        return self._set.end_offset()

    @property
    def fragments(self) -> cover_set.CoverSet:
        """A snapshot of every fragment (safe to keep: later changes don't alter it)."""
        return self._set.copy()

    async def next_listing(self) -> None:
        """Wait until the next store listing is applied (or the index is closed)."""
        await self._listed.wait()

    def listed_remote(self) -> cover_set.CoverSet:
        """The last store listing as it came (a copy): local spools hide none of it."""
        return self._listed_remote.copy()

    def stored_covers(self, begin: int, end: int) -> bool:
        """Whether the last store listing alone (no local spool) covers [begin, end)."""
        at = begin
        while at < end:
            reach = max(
                (f.spec.end for f in self._listed_remote if f.spec.begin <= at < f.spec.end),
                default=at,
            )
            if reach == at:
                return False
            at = reach
        return True

    @property
    def first_refresh_done(self) -> bool:
        return self._first_refresh.is_set()

    async def wait_first_refresh(self) -> None:
        """Wait until a store listing has been applied at least once."""
        await self._first_refresh.wait()

    async def inspect(self) -> cover_set.CoverSet:
        """All fragments, once the first store listing has been applied."""
        await self._first_refresh.wait()
        return self._set.copy()

    # -- Changes ------------------------------------------------------------------------

    def spool_commit(self, fragment: cover_set.Fragment) -> None:
        """Add a committed spool fragment (with its local file); wake blocked reads."""
        self._set.add(fragment)
        self._local.add(fragment)
        self._wake()

    def replace_remote(self, remote: cover_set.CoverSet) -> None:
        """Replace every remote fragment with a fresh listing ``remote`` (which it takes).

        Local fragments that the listing now covers are dropped (their files stay
        open until the last reader lets go); the others are kept on top.
        """
        self._listed_remote = remote.copy()
        self._local = cover_set.difference(self._local, remote)
        for frag in self._local:
            if not remote.add(frag):
                raise AssertionError(f"local fragment {frag!r} unexpectedly covered by listing")
        self._set = remote
        self._skipped_listed = True
        self._wake()
        self._first_refresh.set()
        listed, self._listed = self._listed, asyncio.Event()
        listed.set()

    def mark_skipped(self, ranges: Sequence[tuple[int, int]]) -> None:
        """``ranges`` of offsets were skipped for good: reads jump them without waiting.

        A journal resumed past its acknowledgement fence (its brokers lost what
        they held there; see gazette.broker.server.fences) never stores anything
        in between, so a read there would otherwise wait forever (or six hours:
        OFFSET_JUMP_AGE_THRESHOLD).
        """
        skipped = tuple(sorted(set(self._skipped) | {(b, e) for b, e in ranges if b < e}))
        if skipped != self._skipped:
            # Jumped only once a listing applied after this: a broker that stored
            # what it recovered there late must not be jumped over.
            self._skipped = skipped
            self._skipped_listed = False
            self._wake()

    @property
    def skipped(self) -> tuple[tuple[int, int], ...]:
        """The offset ranges marked skipped for good, sorted."""
        return self._skipped

    def _within_skipped(self, begin: int, end: int) -> bool:
        return any(b <= begin and end <= e for b, e in self._skipped)

    def close(self) -> None:
        """Fail blocked and future blocking queries with IndexClosedError."""
        self._closed = True
        self._wake()
        self._listed.set()

    def _wake(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()


async def walk_all_stores(
    registry: stores.StoreRegistry, journal: str, store_urls: Sequence[str]
) -> cover_set.CoverSet:
    """List every store under ``<journal>/`` into a fresh CoverSet.

    Unparsable object names are skipped with a warning (stores often hold other
    files); a listing error propagates, so the caller keeps its old index.
    """
    out = cover_set.CoverSet()
    for store_url in store_urls:
        active = registry.get(store_url)
        async for rel_path, mtime in active.list(journal + "/"):
            try:
                frag = pb.parse_fragment_path(rel_path, journal=journal)
            except pb.ValidationError as e:
                log.warning(
                    "failed to parse fragment path %r of journal %s (mtime %s): %s",
                    rel_path,
                    journal,
                    mtime,
                    e,
                )
                continue
            frag.mod_time = int(mtime)
            frag.backing_store = store_url
            out.add(cover_set.Fragment(frag))
    return out
