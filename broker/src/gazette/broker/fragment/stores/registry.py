"""StoreRegistry: the cache of active stores, keyed by FragmentStore URL (Gazette `broker/stores/stores.go`).

Stores are built on first use and kept; an hourly mark-and-sweep drops those
not used since the previous sweep. While the registry is entered (``async
with``), each cached store runs its health-check loop and the sweep runs, all
as tasks of the registry's own TaskGroup; outside it, stores work but report
that their first health check hasn't completed.
"""

from __future__ import annotations

import asyncio
import logging
import random
import urllib.parse
from collections.abc import Callable, Coroutine, Mapping
from types import TracebackType
from typing import Any

from gazette.broker import protocol as pb
from gazette.broker.fragment import errors
from gazette.broker.fragment.stores import active, base, fs, s3

log = logging.getLogger(__name__)

Constructor = Callable[[str, base.StoresConfig], base.Store]
"""Builds a Store of a FragmentStore URL; raises StoreConfigError for a bad one."""


def _gcs(url: str, config: base.StoresConfig) -> base.Store:
    # Imported when first used: google-cloud-storage is an optional extra (gcs).
    try:
        from gazette.broker.fragment.stores import gcs
    except ImportError as e:
        raise errors.StoreConfigError(
            f"gs:// stores need gazette-broker[gcs] installed ({e})", store=url, op="construct"
        ) from e
    return gcs.GCSStore(url, config)


def _azure(url: str, config: base.StoresConfig) -> base.Store:
    # Imported when first used: azure-storage-blob (and, for azure-ad://, azure-identity)
    # are an optional extra (azure).
    try:
        from gazette.broker.fragment.stores import azure
    except ImportError as e:
        raise errors.StoreConfigError(
            f"azure:// and azure-ad:// stores need gazette-broker[azure] installed ({e})",
            store=url,
            op="construct",
        ) from e
    return azure.AzureStore(url, config)


DEFAULT_PROVIDERS: Mapping[str, Constructor] = {
    "file": fs.FileStore,
    "s3": s3.S3Store,
    "gs": _gcs,
    "azure": _azure,
    "azure-ad": _azure,
}

SWEEP_INTERVAL = 3600.0
HEALTH_CHECK_TIMEOUT = 60.0
# A one-off check of a store no journal names (see StoreRegistry.probe) gets this long.
PROBE_TIMEOUT = 20.0


class StoreRegistry:
    """Cache of :class:`active.ActiveStore` per FragmentStore URL.

    ``providers`` maps URL schemes to constructors (default: file, s3, gs, azure and
    azure-ad; with ``config.file_only`` every scheme is a file store rooted at
    ``file:///``).
    ``jitter`` and ``sleep`` are injectable for tests of the health schedule.
    """

    def __init__(
        self,
        config: base.StoresConfig | None = None,
        *,
        providers: Mapping[str, Constructor] | None = None,
        jitter: Callable[[], float] = random.random,
        sweep_interval: float = SWEEP_INTERVAL,
    ) -> None:
        self.config = config or base.StoresConfig()
        self._providers = dict(DEFAULT_PROVIDERS if providers is None else providers)
        self._jitter = jitter
        self._sweep_interval = sweep_interval
        self._stores: dict[str, active.ActiveStore] = {}
        self._tg: asyncio.TaskGroup | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    # -- Lookup -------------------------------------------------------------------------

    def get(self, url: str) -> active.ActiveStore:
        """The ActiveStore of ``url``, built and cached on first use.

        A store that fails to build is returned (its operations and health
        report the error) but not cached, so a later call retries.
        """
        found = self._stores.get(url)
        if found is not None:
            found.mark = True
            return found
        try:
            store = self._construct(url)
        except errors.StoreConfigError as e:
            return active.ActiveStore(url, None, e)
        a = active.ActiveStore(url, store, None)
        self._stores[url] = a
        active.STORE_ACTIVE.set(len(self._stores))
        log.info("started fragment store %s (%d active)", url, len(self._stores))
        if self._tg is not None:
            self._spawn(self._check_loop(a))
        return a

    async def probe(
        self, url: str, *, delete_prefix: str | None = None, within: float = PROBE_TIMEOUT
    ) -> BaseException | None:
        """Check a store once, without keeping it: the error it fails with, or None.

        For stores that no journal names yet (an operator checking a bucket before
        applying specs to it): unlike :meth:`get`, nothing is cached, no health
        loop retries it and no metric is labelled with it, so callers naming ever
        new URLs cost the broker neither requests nor metrics after the answer.
        """
        try:
            store = self._construct(url)
        except errors.StoreConfigError as e:
            return e
        a = active.ActiveStore(url, store, None)
        try:
            async with asyncio.timeout(within):
                await a.check_health()
                if delete_prefix is not None:
                    await a.check_delete(delete_prefix)
        except TimeoutError:
            return errors.HealthCheckError(f"health check took over {within:g}s", store=url)
        except errors.FragmentError as e:
            return e
        return None

    def _construct(self, url: str) -> base.Store:
        scheme = urllib.parse.urlsplit(url).scheme
        if self.config.file_only:
            return fs.FileStore("file:///", self.config)
        ctor = self._providers.get(scheme)
        if ctor is None:
            raise errors.StoreConfigError(
                f"unsupported fragment store scheme: {scheme}", store=url, op="construct"
            )
        try:
            return ctor(url, self.config)
        except errors.StoreConfigError as e:
            e.store = url
            raise

    def sign_get_url(self, fragment: pb.Fragment, ttl: float) -> str:
        """A GET URL of a persisted fragment's file, valid for ``ttl`` seconds."""
        return self.get(fragment.backing_store).sign_get(pb.fragment_path(fragment), ttl)

    # -- Sweep --------------------------------------------------------------------------

    def sweep(self) -> int:
        """Drop stores not used since the last sweep; clear the mark of the others."""
        removed = 0
        for url, a in list(self._stores.items()):
            if not a.mark:
                del self._stores[url]
                a.stop_health()
                log.info("stopped fragment store %s (%d active)", url, len(self._stores))
                removed += 1
            else:
                a.mark = False
        active.STORE_ACTIVE.set(len(self._stores))
        return removed

    # -- Background tasks ---------------------------------------------------------------

    async def __aenter__(self) -> StoreRegistry:
        tg = asyncio.TaskGroup()
        await tg.__aenter__()
        self._tg = tg
        for a in self._stores.values():
            self._spawn(self._check_loop(a))
        self._spawn(self._sweep_loop())
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        tg, self._tg = self._tg, None
        assert tg is not None
        for t in self._tasks:
            t.cancel()
        await tg.__aexit__(exc_type, exc, tb)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        assert self._tg is not None
        task = self._tg.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(self._sweep_interval)
            self.sweep()

    async def _check_loop(self, a: active.ActiveStore) -> None:
        attempt = 0
        while self._stores.get(a.key) is a:
            err: BaseException | None = None
            try:
                async with asyncio.timeout(HEALTH_CHECK_TIMEOUT):
                    await a.check_health()
            except (errors.FragmentError, TimeoutError) as e:
                err = e
            delay = active.next_check_delay(err is None, attempt, self._jitter)
            if err is None:
                log.info("store health check of %s succeeded (attempt %d)", a.key, attempt)
                attempt = 0
            else:
                log.warning(
                    "store health check of %s failed (attempt %d, next in %.1fs, auth error %s): %s",
                    a.key,
                    attempt,
                    delay,
                    a.is_auth_error(err),
                    err,
                )
                attempt += 1
            if self._stores.get(a.key) is not a:
                return  # Swept while checking: it already reports that checks stopped.
            a.update_health(err)
            await asyncio.sleep(delay)
