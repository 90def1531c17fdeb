"""What becomes of a spool's content past what its route confirmed, and of spools found on disk.

:meth:`gazette.broker.fragment.spool.Spool.confirm` says how far a spool's
content is the journal's. The persister stores only that part of a spool cut
off from its route (:func:`confirmed_part`) and keeps the rest aside, never
served (:func:`quarantine_tail`); recovery after a crash builds a spool of the
confirmed content of a file it finds (:func:`recovered`).

Usage::

    part = await tails.confirmed_part(sp)      # None if nothing is confirmed
    kept = await tails.quarantine_tail(sp)     # the path of the unconfirmed bytes
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import tempfile
import urllib.parse

from gazette.broker import protocol as pb
from gazette.broker.fragment import cover_set, files, metrics, spool

log = logging.getLogger(__name__)


async def recovered(
    journal: str,
    begin: int,
    confirmed: int,
    codec: int,
    file: files.SpoolFile,
    config: spool.SpoolConfig,
) -> spool.Spool:
    """A completed spool of the confirmed content of a spool file found on disk."""

    class _Nobody:
        def spool_commit(self, fragment: cover_set.Fragment) -> None: ...
        def spool_complete(self, sp: spool.Spool, primary: bool) -> None: ...

    sp = spool.Spool(journal, _Nobody(), config=config)
    sp.spec = pb.Fragment(journal=journal, begin=begin, end=confirmed)
    sp.spec.compression_codec = codec  # type: ignore[assignment]  # From a record we wrote.
    if confirmed > begin:
        digest = await asyncio.to_thread(_sha1_of, file, confirmed - begin)
        sp.spec.sum.CopyFrom(pb.sha1sum_from_digest(digest))
    sp.file = file
    sp.confirmed_end = confirmed
    return sp


async def confirmed_part(sp: spool.Spool) -> spool.Spool | None:
    """``sp`` (a completed copy) cut at its confirmed end, to be stored; None if nothing is.

    The cut copy shares ``sp``'s file (it only reads the confirmed span) and
    compresses afresh when stored. Its registers are ``sp``'s last ones (they
    matter only to path postfix templates).
    """
    end = sp.confirmed_end
    if end <= sp.begin:
        return None
    if end >= sp.end:
        return sp
    assert sp.file is not None
    digest = await asyncio.to_thread(_sha1_of, sp.file, end - sp.begin)
    out = spool.Spool(sp.journal, sp.observer, config=sp.config)
    out.spec = pb.Fragment()
    out.spec.CopyFrom(sp.spec)
    out.spec.end = end
    out.spec.sum.CopyFrom(pb.sha1sum_from_digest(digest))
    out.file = sp.file
    out.registers = pb.LabelSet()
    out.registers.CopyFrom(sp.registers)
    out.first_append_time = sp.first_append_time
    out.confirmed_end = end
    return out


async def quarantine_tail(sp: spool.Spool) -> str | None:
    """Keep ``sp``'s unconfirmed content aside, never to be served; returns its path.

    The file goes to ``<spool dir>/quarantine/<journal>/<begin>-<end>`` (offsets
    in hex, as fragment names), for an operator to look at; None if it could
    not be written (the content is then only logged as dropped).
    """
    start = max(sp.confirmed_end, sp.begin)
    if start >= sp.end or sp.file is None:
        return None
    metrics.SPOOL_QUARANTINED_BYTES_TOTAL.inc(sp.end - start)
    directory = os.path.join(
        sp.config.directory or tempfile.gettempdir(),
        "quarantine",
        urllib.parse.quote(sp.journal, safe=""),
    )
    path = os.path.join(directory, f"{start:016x}-{sp.end:016x}")
    try:
        await asyncio.to_thread(_copy_out, sp.file, start - sp.begin, sp.end - start, path)
    except OSError as e:
        log.error(
            "could not keep unconfirmed [%d, %d) of %s aside: %s", start, sp.end, sp.journal, e
        )
        return None
    return path


def _sha1_of(f: files.SpoolFile, length: int) -> bytes:
    summer = hashlib.sha1()
    pos = 0
    while pos < length:
        chunk = f.pread(min(files.COPY_BLOCK, length - pos), pos)
        if not chunk:
            raise OSError(f"spool file ended at {pos}, before {length}")
        summer.update(chunk)
        pos += len(chunk)
    return summer.digest()


def _copy_out(f: files.SpoolFile, offset: int, length: int, path: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as out:
        pos = 0
        while pos < length:
            chunk = f.pread(min(files.COPY_BLOCK, length - pos), offset + pos)
            if not chunk:
                break
            out.write(chunk)
            pos += len(chunk)
