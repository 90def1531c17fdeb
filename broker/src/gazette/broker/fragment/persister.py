"""Persister: uploads completed spools to the journal's fragment store (broker.md §4.7).

A spool completed on its primary is uploaded at once (at most 32 at a time).
A replica's copy is queued and tried on the tick after next (queues rotate
A <- B <- C <- new each minute), by when the primary has normally stored it
and the replica's attempt finds it there. Uploads are checked with ``exists``
first, compressed with the spool's codec if not done already, and retried
until they succeed; stopping drains every queue.

The persister takes the *current* JournalSpec through ``lookup_spec`` (a
spool whose journal was deleted is dropped) and runs inside a TaskGroup via
:meth:`Persister.serve`, ended by :meth:`Persister.stop`.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from gazette.broker import protocol as pb
from gazette.broker.fragment import errors, files, metrics, spool, stores

log = logging.getLogger(__name__)

_GO_ZERO_TIME = datetime.datetime(1, 1, 1, tzinfo=datetime.UTC)


@dataclass(frozen=True)
class PersisterConfig:
    # Period of the replica queue rotation.
    interval: float = 60.0
    # Bound on concurrent uploads of primary spools.
    max_concurrent: int = 32
    # An upload taking longer than this is abandoned and retried.
    upload_timeout: float = 300.0
    # Pause between draining passes at stop, while uploads keep failing.
    drain_retry_interval: float = 1.0


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
        self._qa: list[spool.Spool] = []
        self._qb: list[spool.Spool] = []
        self._qc: list[spool.Spool] = []
        self._urgent: asyncio.Queue[spool.Spool | None] = asyncio.Queue()
        self._stopping = asyncio.Event()
        self._dispatch_closed = False
        self._inflight = 0  # Primary uploads dispatched and not yet finished.
        self._upload_done = asyncio.Event()

    async def _default_persist(self, sp: spool.Spool, spec: pb.JournalSpec, exiting: bool) -> None:
        await persist(self._registry, sp, spec, exiting, upload_timeout=self.config.upload_timeout)

    @property
    def queued(self) -> int:
        """Spools waiting in the replica queues."""
        return len(self._qa) + len(self._qb) + len(self._qc)

    def spool_complete(self, sp: spool.Spool, primary: bool) -> None:
        if sp.content_length == 0:
            return
        if primary and not self._dispatch_closed:
            self._urgent.put_nowait(sp)
        else:
            self._qc.append(sp)

    def stop(self) -> None:
        """Ask :meth:`serve` to drain every queue and return."""
        self._stopping.set()
        self._urgent.put_nowait(None)

    async def serve(self) -> None:
        """Run uploads until :meth:`stop`, then drain."""
        sem = asyncio.Semaphore(self.config.max_concurrent)
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._dispatch_urgent(tg, sem))
            await self._tick_loop()

    async def _dispatch_urgent(self, tg: asyncio.TaskGroup, sem: asyncio.Semaphore) -> None:
        async def upload(sp: spool.Spool) -> None:
            try:
                async with sem:
                    await self.attempt_persist(sp, exiting=self._stopping.is_set())
            finally:
                self._inflight -= 1
                self._upload_done.set()

        def spawn(sp: spool.Spool) -> None:
            self._inflight += 1
            tg.create_task(upload(sp))

        while (sp := await self._urgent.get()) is not None:
            spawn(sp)
        # Stopping: later completions go to the queues, which the tick loop drains.
        self._dispatch_closed = True
        while not self._urgent.empty():
            if (sp := self._urgent.get_nowait()) is not None:
                spawn(sp)
        self._upload_done.set()

    async def _tick_loop(self) -> None:
        exiting = False
        while True:
            if not exiting:
                try:
                    async with asyncio.timeout(self.config.interval):
                        await self._stopping.wait()
                    exiting = True
                except TimeoutError:
                    pass
            failed = False
            for sp in self._qa:
                failed = not await self.attempt_persist(sp, exiting=exiting) or failed
            self._qa, self._qb, self._qc = self._qb, self._qc, []
            if not exiting:
                continue
            if not (self._qa or self._qb or self._qc):
                if self._dispatch_closed and self._inflight == 0:
                    return
                # Primary uploads (dispatched or still to be) may fail into the queues.
                self._upload_done.clear()
                await self._upload_done.wait()
            elif failed:
                await asyncio.sleep(self.config.drain_retry_interval)

    async def attempt_persist(self, sp: spool.Spool, *, exiting: bool) -> bool:
        """Persist ``sp``; on failure queue it again. True unless it was re-queued."""
        if sp.content_length == 0:
            return True
        spec = self._lookup_spec(sp.journal)
        if spec is None:
            log.info("dropping spool %s of %s (JournalSpec was removed)", sp.spec, sp.journal)
            metrics.SPOOL_PERSISTED_TOTAL.inc()
            return True
        try:
            await self._persist_fn(sp, spec, exiting)
        except Exception as e:  # noqa: BLE001 (any failure is retried on a later tick)
            log.warning("failed to persist spool of %s (will retry): %r", sp.journal, e)
            self._qc.append(sp)
            return False
        metrics.SPOOL_PERSISTED_TOTAL.inc()
        return True
