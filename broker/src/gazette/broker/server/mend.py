"""Store a quarantined tail that its journal went on from, when no store holds it.

A member keeps content that its route never confirmed aside, under
``<spool dir>/quarantine/<journal>/<begin>-<end>`` (see
:mod:`gazette.broker.fragment.tails`), so that content a route wrote over is
never published. But a route may go on from exactly such a tail's end: a
primary took its head from a member that held the tail, and every holder then
died or was cut off before the next proposal confirmed it to them. Quarantined
everywhere, the range is a hole below the journal's head, and every reader
stalls on it for good (the chaos suite's sigkill-rapid).

Every :data:`INTERVAL` the broker looks at its quarantined tails of journals it
serves. A tail ``[begin, end)`` is stored as a fragment when the journal's
store listing has a fragment that begins at ``end`` (the route went on from
there) and none that overlaps the tail, in a listing started at least
:data:`DELAY` after the tail was kept aside (so that members holding other
content of that range, confirmed, have stored it by then). Then the file goes.
Tails that some stored fragment overlaps stay for an operator. Tails older than
:data:`WINDOW` are no longer looked at, and no listing is asked for them. A
journal this broker serves is decided from its replica's listings (asked for
when stale); another is listed directly, at most every :data:`DIRECT_INTERVAL`.

Usage::

    await mend.run(spool_dir, service)  # until cancelled
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import re
import time
import urllib.parse
from typing import Protocol

from gazette.broker import protocol as pb
from gazette.broker.fragment import cover_set, files, index, persister, spool, stores, tails
from gazette.broker.server import metrics, replica

log = logging.getLogger(__name__)

INTERVAL = 10.0
# A listing must have started this long after a tail was kept aside to decide it:
# twice the data plane's wait before it stores a doubtful held tail (its
# replica.rs DOUBT_DELAY, 5 s), so that another member's copy had time to land.
DELAY = 10.0
WINDOW = 3600.0
# Journals this broker does not serve are listed at most this often.
DIRECT_INTERVAL = 60.0

_NAME = re.compile(r"^([0-9a-f]{16})-([0-9a-f]{16})$")


class Host(Protocol):
    registry: stores.StoreRegistry

    def lookup_spec(self, journal: str) -> pb.JournalSpec | None: ...

    def local_replica(self, journal: str) -> replica.Replica | None: ...


@dataclasses.dataclass(frozen=True)
class Tail:
    journal: str
    begin: int
    end: int
    path: str
    kept_at: float  # Wall-clock time it was kept aside (the file's mtime).


def tails_under(directory: str, now: float) -> list[Tail]:
    """Quarantined tails under ``directory`` kept aside within WINDOW of ``now``."""
    root = os.path.join(directory, "quarantine")
    found: list[Tail] = []
    try:
        journals = list(os.scandir(root))
    except FileNotFoundError:
        return found
    for jdir in journals:
        if not jdir.is_dir():
            continue
        journal = urllib.parse.unquote(jdir.name)
        for entry in os.scandir(jdir.path):
            m = _NAME.match(entry.name)
            if m is None or not entry.is_file():
                continue
            kept_at = entry.stat().st_mtime
            if now - kept_at > WINDOW:
                continue
            begin, end = int(m[1], 16), int(m[2], 16)
            if begin < end:
                found.append(Tail(journal, begin, end, entry.path, kept_at))
    return found


async def run(directory: str, host: Host, config: spool.SpoolConfig) -> None:
    """Mend every INTERVAL until cancelled."""
    mender = Mender(directory, host, config)
    while True:
        await asyncio.sleep(INTERVAL)
        try:
            await mender.sweep()
        except Exception:  # A bad sweep must not stop the next.
            log.exception("looking at quarantined tails failed (will retry)")


class Mender:
    """Looks at ``directory``'s quarantined tails (see the module doc)."""

    def __init__(self, directory: str, host: Host, config: spool.SpoolConfig) -> None:
        self.directory, self.host, self.config = directory, host, config
        # Journals served elsewhere: (their listing, wall time it started).
        self._listed: dict[str, tuple[cover_set.CoverSet, float]] = {}

    async def sweep(self) -> list[Tail]:
        """One look at the quarantined tails; returns those it stored."""
        now = time.time()
        stored: list[Tail] = []
        found = await asyncio.to_thread(tails_under, self.directory, now)
        self._listed = {j: v for j, v in self._listed.items() if any(t.journal == j for t in found)}
        for tail in found:
            spec = self.host.lookup_spec(tail.journal)
            if spec is None:
                continue
            listing = await self._listing(tail.journal, spec, now)
            if listing is None:
                continue
            listed, listed_wall = listing
            if any(f.spec.begin < tail.end and f.spec.end > tail.begin for f in listed):
                continue  # Stored from elsewhere, or written over: an operator's to look at.
            went_on = any(f.spec.begin == tail.end for f in listed)
            if not went_on or listed_wall < tail.kept_at + DELAY:
                self._ask_listing(tail.journal, now)
                continue
            if await _store(self.host, spec, tail, self.config):
                stored.append(tail)
                self._listed.pop(tail.journal, None)
                if (rep := self.host.local_replica(tail.journal)) is not None:
                    rep.refresh_now()  # Its readers learn of it now.
        return stored

    async def _listing(
        self, journal: str, spec: pb.JournalSpec, now: float
    ) -> tuple[cover_set.CoverSet, float] | None:
        """The journal's last store listing and the wall time it started, if any."""
        rep = self.host.local_replica(journal)
        if rep is not None:
            if not rep.index.first_refresh_done:
                return None
            # rep.listed_at is on the replica's monotonic clock.
            return rep.index.listed_remote(), now - (time.monotonic() - rep.listed_at)
        cached = self._listed.get(journal)
        if cached is not None and now - cached[1] < DIRECT_INTERVAL:
            return cached
        try:
            listed = await index.walk_all_stores(
                self.host.registry, journal, list(spec.fragment.stores)
            )
        except Exception as e:  # noqa: BLE001  # the next sweep lists again
            log.warning("listing %s for its quarantined tails failed: %s", journal, e)
            return None
        self._listed[journal] = (listed, now)
        return listed, now

    def _ask_listing(self, journal: str, now: float) -> None:
        rep = self.host.local_replica(journal)
        if rep is not None and time.monotonic() - rep.listed_at > INTERVAL:
            rep.refresh_now()


async def _store(host: Host, spec: pb.JournalSpec, tail: Tail, config: spool.SpoolConfig) -> bool:
    try:
        # Off the event loop: the spool directory may be on a stalled disk.
        fd = await asyncio.to_thread(os.open, tail.path, os.O_RDONLY)
    except OSError as e:
        log.warning("quarantined tail %s unreadable: %s", tail.path, e)
        return False
    f = files.SpoolFile(fd)
    try:
        if f.size() != tail.end - tail.begin:
            log.warning(
                "quarantined tail %s is not %d bytes long", tail.path, tail.end - tail.begin
            )
            return False
        sp = await tails.recovered(
            tail.journal, tail.begin, tail.end, spec.fragment.compression_codec, f, config
        )
        await persister.persist(host.registry, sp, spec, False)
    except Exception as e:  # noqa: BLE001  # the next sweep tries again
        log.warning("storing quarantined tail %s (will retry): %s", tail.path, e)
        return False
    finally:
        f.close()
    log.warning(
        "journal %s: [%d, %d) kept aside here is stored: the journal went on from its end"
        " and no store held it",
        tail.journal,
        tail.begin,
        tail.end,
    )
    metrics.QUARANTINED_TAILS_STORED.inc()
    try:
        os.unlink(tail.path)
    except OSError as e:
        log.warning("stored quarantined tail %s not removed: %s", tail.path, e)
    return True
