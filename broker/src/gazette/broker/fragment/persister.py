"""Persister: uploads completed spools to the journal's fragment store.

Every completed spool is uploaded by every broker that holds a copy of it: a
primary's copy at once, a replica's after ``replica_delay`` (by when the
primary has normally stored it, so the replica's attempt is a cheap
``exists``). Gazette instead holds replica copies for one to two minutes
(``broker/fragment/persister.go``), which lets a failure of the primary and
its replicas within that window lose acknowledged bytes; a short delay keeps
most of the saving of duplicate uploads without that window. :meth:`Persister.hurry`
starts every delayed upload now (the broker is stopping, or its etcd lease is
in doubt).

Uploads are checked with ``exists`` first, compressed with the spool's codec
if not done already, and retried with back-off until they succeed, also while
stopping: a broker does not drop a fragment it holds because it is exiting.

The persister takes the *current* JournalSpec through ``lookup_spec`` (a
spool whose journal was deleted is dropped) and runs via
:meth:`Persister.serve`, which returns after :meth:`Persister.stop` once every
upload finished.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from gazette.broker import protocol as pb
from gazette.broker.fragment import errors, files, metrics, spool, stores, tails

log = logging.getLogger(__name__)

_GO_ZERO_TIME = datetime.datetime(1, 1, 1, tzinfo=datetime.UTC)


@dataclass(frozen=True)
class PersisterConfig:
    # How long a replica's copy waits before its (usually exists-only) upload.
    replica_delay: float = 2.0
    # Bound on concurrent uploads.
    max_concurrent: int = 32
    # An upload taking longer than this is abandoned and retried.
    upload_timeout: float = 300.0
    # Back-off between attempts of a failing upload: doubles from the first to the last.
    retry_interval: float = 1.0
    max_retry_interval: float = 30.0


PersistFn = Callable[[spool.Spool, pb.JournalSpec, bool], Awaitable[None]]
SpecLookup = Callable[[str], "pb.JournalSpec | None"]


async def persist(
    registry: stores.StoreRegistry,
    sp: spool.Spool,
    spec: pb.JournalSpec,
    exiting: bool,
    *,
    upload_timeout: float = 300.0,
) -> None:
    """Store ``sp`` in the first store of ``spec`` unless it is already there.

    While ``exiting``, an authorization error of a store falls back to the next
    one (a broker going away should still leave its data somewhere).
    """
    urls = list(spec.fragment.stores)
    while urls:
        url, urls = urls[0], urls[1:]
        frag = pb.Fragment()
        frag.CopyFrom(sp.spec)
        frag.backing_store = url
        template = spec.fragment.path_postfix_template
        if template:
            first_append = sp.first_append_time or _GO_ZERO_TIME
            frag.path_postfix = pb.render_postfix_template(
                template, spec, frag, first_append, sp.registers
            )
        active = registry.get(url)
        path = pb.fragment_path(frag)
        try:
            if await active.exists(path):
                return
            codec = sp.spec.compression_codec
            content: files.ReaderAt
            if codec != pb.NONE:
                await asyncio.to_thread(sp.finish_compression)
                assert sp.compressed_file is not None
                content, length = sp.compressed_file, sp.compressed_length
            else:
                assert sp.file is not None
                content, length = sp.file, sp.content_length
            encoding = "gzip" if codec == pb.GZIP_OFFLOAD_DECOMPRESSION else ""
            async with asyncio.timeout(upload_timeout):
                await active.put(path, content, length, encoding)
            return
        except errors.StoreError as e:
            if exiting and urls and active.is_auth_error(e):
                log.warning("store %s refused fragment %s; trying the next store: %s", url, path, e)
                continue
            raise


class Persister:
    """Uploads completed spools; implements ``SpoolObserver.spool_complete``."""

    def __init__(
        self,
        registry: stores.StoreRegistry,
        lookup_spec: SpecLookup,
        *,
        config: PersisterConfig = PersisterConfig(),
        persist_fn: PersistFn | None = None,
    ) -> None:
        self._registry = registry
        self._lookup_spec = lookup_spec
        self.config = config
        self._persist_fn: PersistFn = persist_fn or self._default_persist
        self._tg: asyncio.TaskGroup | None = None
        self._early: list[tuple[spool.Spool, bool, bool]] = []  # Completed before serve().
        self._pending = 0
        self._hurry = asyncio.Event()
        self._stopping = asyncio.Event()
        self._sem = asyncio.Semaphore(config.max_concurrent)
        self._idle = asyncio.Event()  # Set while nothing is pending.
        self._idle.set()

    async def _default_persist(self, sp: spool.Spool, spec: pb.JournalSpec, exiting: bool) -> None:
        await persist(self._registry, sp, spec, exiting, upload_timeout=self.config.upload_timeout)

    @property
    def queued(self) -> int:
        """Completed spools not yet stored (waiting, uploading or retrying)."""
        return self._pending

    def spool_complete(self, sp: spool.Spool, primary: bool, *, held: bool = False) -> None:
        """Store ``sp``: only its confirmed part, if not all of it is confirmed.

        The rest of an unconfirmed spool (content no route confirmed: see
        :meth:`gazette.broker.fragment.spool.Spool.confirm`) is quarantined, or
        left alone when ``held`` (its replica may still learn that it is the
        journal's, and hand the whole spool over again).
        """
        if sp.content_length == 0:
            return
        self._pending += 1
        metrics.SPOOL_PERSIST_PENDING.inc()
        self._idle.clear()
        if self._tg is None:
            self._early.append((sp, primary, held))
            return
        upload = self._upload(sp, primary, held)
        try:
            self._tg.create_task(upload, name=f"persist {sp.journal}")
        except RuntimeError:
            # The task group is shutting down: serve() was cancelled (the process is
            # being killed), which drops what is not stored, as a SIGKILL would.
            upload.close()
            self._pending -= 1
            metrics.SPOOL_PERSIST_PENDING.dec()
            log.warning(
                "persister stopped: fragment [%d, %d) of %s not stored here",
                sp.begin,
                sp.end,
                sp.journal,
            )

    def hurry(self) -> None:
        """Start every delayed upload now, and every later one at once."""
        if not self._hurry.is_set():
            log.info("persisting %d completed spools without delay", self._pending)
        self._hurry.set()

    def stop(self) -> None:
        """Ask :meth:`serve` to return once every upload finished."""
        self._hurry.set()
        self._stopping.set()

    async def serve(self) -> None:
        """Run uploads until :meth:`stop`, then finish every one of them."""
        try:
            async with asyncio.TaskGroup() as tg:
                self._tg = tg
                early, self._early = self._early, []
                for sp, primary, held in early:
                    tg.create_task(self._upload(sp, primary, held), name=f"persist {sp.journal}")
                await self._stopping.wait()
                if self._pending:
                    log.warning("persisting %d completed spools before exiting", self._pending)
                tg.create_task(self._report_drain(), name="persister drain progress")
        finally:
            self._tg = None

    async def _report_drain(self) -> None:
        while self._pending:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(5.0):
                    await self._idle.wait()
            if self._pending:
                log.warning("still persisting %d completed spools", self._pending)

    async def _upload(self, sp: spool.Spool, primary: bool, held: bool = False) -> None:
        whole = sp
        try:
            if not sp.confirmed:
                sp = await self._cut(sp, held)
            if not primary and not self._hurry.is_set():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.config.replica_delay):
                        await self._hurry.wait()
            backoff = self.config.retry_interval
            while True:
                async with self._sem:
                    if await self.attempt_persist(sp, exiting=self._stopping.is_set()):
                        if not held:
                            # Stored (or let go): a restart has nothing to recover here.
                            await whole.forget_file()
                        return
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.config.max_retry_interval)
        finally:
            self._pending -= 1
            metrics.SPOOL_PERSIST_PENDING.dec()
            if not self._pending:
                self._idle.set()

    async def _cut(self, sp: spool.Spool, held: bool) -> spool.Spool:
        """The confirmed part of ``sp`` (maybe empty); its tail is quarantined unless held."""
        if not held:
            path = await tails.quarantine_tail(sp)
            log.warning(
                "journal %s: [%d, %d) was committed here but never confirmed by every"
                " member of its route; it is not stored (kept aside in %s)",
                sp.journal,
                max(sp.confirmed_end, sp.begin),
                sp.end,
                path or "nowhere: see the previous error",
            )
        try:
            part = await tails.confirmed_part(sp)
        except OSError as e:
            log.error("journal %s: could not read the confirmed part of %s: %s", sp.journal, sp, e)
            part = None
        return part if part is not None else spool.Spool(sp.journal, sp.observer)

    async def attempt_persist(self, sp: spool.Spool, *, exiting: bool) -> bool:
        """Persist ``sp`` once; False if it failed (and should be tried again)."""
        if sp.content_length == 0:
            return True
        spec = self._lookup_spec(sp.journal)
        if spec is None:
            log.info("dropping spool %s of %s (JournalSpec was removed)", sp.spec, sp.journal)
            metrics.SPOOL_PERSISTED_TOTAL.inc()
            return True
        try:
            await self._persist_fn(sp, spec, exiting)
        except Exception as e:  # noqa: BLE001 (any failure is retried with back-off)
            log.warning(
                "failed to persist fragment [%d, %d) of %s (will retry): %s",
                sp.begin,
                sp.end,
                sp.journal,
                e,
            )
            return False
        metrics.SPOOL_PERSISTED_TOTAL.inc()
        return True
