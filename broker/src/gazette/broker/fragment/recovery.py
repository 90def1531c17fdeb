"""Spools a broker finds on its disk when it starts: what a crash left behind.

With ``--broker.spool-dir``, spool files keep their names there beside a
:class:`~gazette.broker.fragment.files.SpoolRecord` of how much of each is
confirmed (committed by every member of its route; see
:meth:`gazette.broker.fragment.spool.Spool.confirm`). They are removed once
stored. A broker that was killed leaves them; before it announces itself again,
:func:`recover` stores the confirmed part of each (a primary records its
confirmed end before it acknowledges an append, so everything it acknowledged
is there) and keeps the rest aside under ``quarantine/``, as a member cut off
from its route does: content no route confirmed is never published.

A part that cannot be stored yet (its store is down) stays on disk for the
next start. Publishing a confirmed part late is safe: every member of its
route committed it, so any later route started at or past its end.

Usage::

    found = await recovery.recover(spool_dir, registry, spec_of, config=spool_config)
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import logging
import os
from collections.abc import Awaitable, Callable

from gazette.broker import protocol as pb
from gazette.broker.fragment import files, persister, spool, stores, tails

log = logging.getLogger(__name__)

SpecOf = Callable[[str], Awaitable["pb.JournalSpec | None"]]


@dataclasses.dataclass(frozen=True)
class Recovered:
    """One spool file found on disk, and what became of it."""

    journal: str
    begin: int
    confirmed: int
    end: int
    stored: bool
    quarantined: str | None


async def recover(
    directory: str,
    registry: stores.StoreRegistry,
    spec_of: SpecOf,
    *,
    config: spool.SpoolConfig,
    within: float = 60.0,
) -> list[Recovered]:
    """Store the confirmed part of every spool file under ``directory``; see the module doc.

    ``spec_of`` reads a journal's current spec (None: deleted, and its spool is
    dropped). Each store is retried for at most ``within`` seconds in all.
    """
    out: list[Recovered] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    for record_path in sorted(_records(directory)):
        path = record_path[: -len(files.RECORD_SUFFIX)]
        try:
            journal, begin, confirmed, codec = files.SpoolRecord.read(record_path)
            fd = os.open(path, os.O_RDONLY)
        except (OSError, ValueError) as e:
            log.error("spool file %s is unreadable and left where it is: %s", path, e)
            continue
        f = files.SpoolFile(fd)
        end = begin + os.fstat(fd).st_size
        confirmed = min(confirmed, end)
        sp = await tails.recovered(journal, begin, confirmed, codec, f, config)
        whole = copy.copy(sp)  # The whole file, for its unconfirmed tail.
        whole.spec = pb.Fragment()
        whole.spec.CopyFrom(sp.spec)
        whole.spec.end = end
        quarantined = await tails.quarantine_tail(whole) if confirmed < end else None
        stored = await _store(registry, spec_of, sp, deadline)
        log.warning(
            "found %s [%d, %d) on disk from before a crash: [%d, %d) confirmed%s%s",
            journal,
            begin,
            end,
            begin,
            confirmed,
            " and stored" if stored else ", NOT stored yet (kept for the next start)",
            f"; the rest kept aside in {quarantined}" if quarantined else "",
        )
        if stored:
            for name in (path, record_path):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name)
        out.append(Recovered(journal, begin, confirmed, end, stored, quarantined))
    return out


def _records(directory: str) -> list[str]:
    found: list[str] = []
    for entry in os.scandir(directory):
        if not entry.is_dir() or entry.name == "quarantine":
            continue
        found.extend(
            os.path.join(entry.path, name)
            for name in os.listdir(entry.path)
            if name.endswith(files.SPOOL_SUFFIX + files.RECORD_SUFFIX)
        )
    return found


async def _store(
    registry: stores.StoreRegistry, spec_of: SpecOf, sp: spool.Spool, deadline: float
) -> bool:
    if sp.content_length == 0:
        return True
    loop = asyncio.get_running_loop()
    backoff = 0.5
    while True:
        try:
            spec = await spec_of(sp.journal)
            if spec is None:
                log.warning(
                    "journal %s was deleted: its spool found on disk is dropped", sp.journal
                )
                return True
            await persister.persist(registry, sp, spec, False)
            return True
        except Exception as e:  # noqa: BLE001  # retried until the deadline, then kept
            if loop.time() + backoff > deadline:
                log.error("could not store recovered %s of %s: %s", sp.spec, sp.journal, e)
                return False
            log.warning("storing recovered %s of %s (will retry): %s", sp.spec, sp.journal, e)
        await asyncio.sleep(backoff)
        backoff = min(backoff * 2, 5.0)
