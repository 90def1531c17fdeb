"""ActiveStore: a constructed store with its metrics, mark bit and health (Gazette `broker/stores/active_store.go`)."""

from __future__ import annotations

import asyncio
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import prometheus_client

from gazette.broker.fragment import errors, files
from gazette.broker.fragment.stores import base

_T = TypeVar("_T")

FIRST_HEALTH_CHECK = "first health check hasn't completed yet"
LAST_HEALTH_CHECK = "health checks have stopped"

HEALTH_CHECK_PATH = ".test/health-check"
HEALTH_CHECK_CONTENT = b"health-check\n"
HEALTH_CHECK_SIGN_TTL = 300.0
DELETE_PROBE_NAME = ".gazette-delete-probe"
DELETE_PROBE_CONTENT = b"gazette-delete-probe\n"

STORE_ACTIVE = prometheus_client.Gauge("gazette_store_active", "Number of active fragment stores")
STORE_OPERATION_DURATION = prometheus_client.Histogram(
    "gazette_store_operation_duration_seconds",
    "Duration of store operations in seconds",
    ["store", "operation", "status"],
    buckets=[0.01 * 4**k for k in range(6)],
)
STORE_OPERATION_TOTAL = prometheus_client.Counter(
    "gazette_store_operation_total",
    "Total number of store operations",
    ["store", "operation", "status"],
)
STORE_PUT_BYTES_TOTAL = prometheus_client.Counter(
    "gazette_store_put_bytes_total",
    "Total number of bytes put to the store",
    ["store", "encoding"],
)
STORE_LIST_ITEMS = prometheus_client.Histogram(
    "gazette_store_list_items_count",
    "Number of items returned by list operations",
    ["store"],
    buckets=[10 * 4**k for k in range(6)],
)
STORE_HEALTH_CHECK_TOTAL = prometheus_client.Counter(
    "gazette_store_health_check_total",
    "Total number of health checks performed",
    ["store", "status"],
)


class ActiveStore:
    """A store of one FragmentStore URL, as cached by a ``StoreRegistry``.

    ``store`` is None when construction failed; every operation then raises
    ``init_error``, which is also its permanent health status. ``mark`` is the
    bit of the registry's hourly mark-and-sweep.
    """

    def __init__(self, key: str, store: base.Store | None, init_error: errors.StoreError | None):
        self.key = key
        self.store = store
        self.init_error = init_error
        self.mark = True
        self._health_error: BaseException | None
        self._next_check = asyncio.Event()
        if init_error is None:
            self._health_error = errors.HealthCheckError(FIRST_HEALTH_CHECK, store=key)
        else:
            self._health_error = init_error
            self._next_check.set()  # Health "completes" at once, with the same error, forever.

    # -- Health -------------------------------------------------------------------------

    def health_status(self) -> tuple[asyncio.Event, BaseException | None]:
        """(event set when the next check completes, error of the last check or None)."""
        return self._next_check, self._health_error

    def update_health(self, err: BaseException | None) -> None:
        self._health_error = err
        STORE_HEALTH_CHECK_TOTAL.labels(self.key, "ok" if err is None else "error").inc()
        done, self._next_check = self._next_check, asyncio.Event()
        done.set()

    def stop_health(self) -> None:
        """Report ``health checks have stopped`` from now on (the store was swept)."""
        self._health_error = errors.HealthCheckError(LAST_HEALTH_CHECK, store=self.key)
        self._next_check.set()

    async def check_health(self) -> None:
        """Run one health check; raises HealthCheckError naming the failed step."""
        s = self._require()
        try:
            await s.put(
                HEALTH_CHECK_PATH,
                files.BytesReaderAt(HEALTH_CHECK_CONTENT),
                len(HEALTH_CHECK_CONTENT),
            )
        except Exception as e:
            raise self._hc_error(f"health check PUT failed: {e}") from e
        try:
            async with await s.get(HEALTH_CHECK_PATH) as r:
                got = await r.read_all()
        except Exception as e:
            raise self._hc_error(f"health check GET failed: {e}") from e
        if got != HEALTH_CHECK_CONTENT:
            raise self._hc_error(
                f"health check content mismatch: got {got!r}, want {HEALTH_CHECK_CONTENT!r}"
            )
        try:
            found = False
            async for rel, _ in s.list(".test/"):
                found = found or rel == "health-check"
        except Exception as e:
            raise self._hc_error(f"health check LIST failed: {e}") from e
        if not found:
            raise self._hc_error("health check LIST did not find test file")
        try:
            url = s.sign_get(HEALTH_CHECK_PATH, HEALTH_CHECK_SIGN_TTL)
        except Exception as e:
            raise self._hc_error(f"health check SignGet failed: {e}") from e
        if not url.startswith("http"):
            return  # file:// URLs aren't fetched.
        try:
            status, body = await asyncio.to_thread(_http_get, url)
        except Exception as e:
            raise self._hc_error(f"health check fetch failed: {e}") from e
        if status != 200:
            raise self._hc_error(f"health check fetch returned status {status}")
        if body != HEALTH_CHECK_CONTENT:
            raise self._hc_error(
                f"health check fetch content mismatch: got {body!r}, want {HEALTH_CHECK_CONTENT!r}"
            )

    async def check_delete(self, prefix: str) -> None:
        """Probe delete permission: put ``<prefix>.gazette-delete-probe``, then remove it."""
        s = self._require()
        path = prefix + DELETE_PROBE_NAME
        try:
            await s.put(path, files.BytesReaderAt(DELETE_PROBE_CONTENT), len(DELETE_PROBE_CONTENT))
        except errors.StoreError as e:
            raise errors.StoreError(
                f"delete-probe PUT failed: {e}", store=self.key, op="put", path=path
            ) from e
        try:
            await s.remove(path)
        except errors.StoreError as e:
            raise errors.StoreError(
                f"delete-probe DELETE failed: {e}", store=self.key, op="remove", path=path
            ) from e

    def _hc_error(self, message: str) -> errors.HealthCheckError:
        return errors.HealthCheckError(message, store=self.key)

    # -- Instrumented operations --------------------------------------------------------

    def _require(self) -> base.Store:
        if self.init_error is not None:
            raise self.init_error
        assert self.store is not None
        return self.store

    def is_auth_error(self, err: BaseException) -> bool:
        return self.store is not None and self.store.is_auth_error(err)

    def sign_get(self, path: str, ttl: float) -> str:
        s = self._require()
        started, status = time.monotonic(), "error"
        try:
            url = s.sign_get(path, ttl)
            status = "success"
            return url
        finally:
            self._observe("signget", status, started)

    async def exists(self, path: str) -> bool:
        return await self._timed("exists", self._require().exists(path))

    async def get(self, path: str) -> base.StoreReader:
        return await self._timed("get", self._require().get(path))

    async def put(
        self, path: str, content: files.ReaderAt, length: int, content_encoding: str = ""
    ) -> None:
        await self._timed("put", self._require().put(path, content, length, content_encoding))
        if length > 0:
            STORE_PUT_BYTES_TOTAL.labels(self.key, content_encoding or "none").inc(length)

    async def list(self, prefix: str) -> AsyncIterator[tuple[str, float]]:
        s = self._require()
        started, status, count = time.monotonic(), "error", 0
        try:
            async for item in s.list(prefix):
                count += 1
                yield item
            status = "success"
        finally:
            self._observe("list", status, started)
            STORE_LIST_ITEMS.labels(self.key).observe(count)

    async def remove(self, path: str) -> None:
        await self._timed("remove", self._require().remove(path))

    async def _timed(self, op: str, aw: Awaitable[_T]) -> _T:
        started, status = time.monotonic(), "error"
        try:
            out = await aw
            status = "success"
            return out
        finally:
            self._observe(op, status, started)

    def _observe(self, op: str, status: str, started: float) -> None:
        STORE_OPERATION_TOTAL.labels(self.key, op, status).inc()
        STORE_OPERATION_DURATION.labels(self.key, op, status).observe(time.monotonic() - started)


def _http_get(url: str) -> tuple[int, bytes]:
    # Only http(s) URLs that the store itself signed reach here (see check_health).
    try:
        with urllib.request.urlopen(url, timeout=60) as resp:
            return int(resp.status), bytes(resp.read())
    except urllib.error.HTTPError as e:
        with e:
            return e.code, b""


def next_check_delay(succeeded: bool, attempt: int, jitter: Callable[[], float]) -> float:
    """Seconds until the next health check; ``jitter()`` is uniform in [0, 1).

    30 min after a success; after the n-th consecutive failure (``attempt`` n-1):
    0, 0.1 s, 1 s, 1 s, 10 s, 10 s, then 100 s. Each delay gets ±20 % jitter.
    """
    if succeeded:
        delay = 1800.0
    elif attempt == 0:
        delay = 0.0
    elif attempt == 1:
        delay = 0.1
    elif attempt in (2, 3):
        delay = 1.0
    elif attempt in (4, 5):
        delay = 10.0
    else:
        delay = 100.0
    return delay + (jitter() - 0.5) * 0.4 * delay
