"""The store abstraction shared by every scheme (Gazette `broker/stores/store.go`)."""

from __future__ import annotations

import abc
import asyncio
import functools
import urllib.parse
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import TypeVar

from gazette.broker.fragment import errors, files

# Stand-in root of file:// stores when --broker.file-root is not given: deliberately
# unusable, so a file store fails its health check instead of writing somewhere odd.
UNCONFIGURED_FILE_ROOT = "/dev/null/must/configure/file/store/root"

_T = TypeVar("_T")


async def open_in_thread(opener: Callable[[], _T], close: Callable[[_T], object]) -> _T:
    """``opener()`` in a worker thread; what it opens after its caller was cancelled is closed.

    A cancelled ``asyncio.to_thread`` leaves its thread running and drops the
    result: an opened file or HTTP response body then lingers until the
    garbage collector finds it (a ResourceWarning, which the tests make an
    error: a store health check's get cancelled mid-thread did this).
    """
    fut = asyncio.get_running_loop().run_in_executor(None, opener)
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:
        fut.add_done_callback(functools.partial(_close_result, close))
        raise


def _close_result(close: Callable[[_T], object], fut: asyncio.Future[_T]) -> None:
    if not fut.cancelled() and fut.exception() is None:
        close(fut.result())


@dataclass(frozen=True)
class StoresConfig:
    """Process-wide store settings (``--broker.file-root``, ``--broker.file-only``)."""

    # Filesystem directory that roots every file:// store URL path.
    file_root: str = UNCONFIGURED_FILE_ROOT
    # Serve every scheme from a file store rooted at file:/// under file_root.
    file_only: bool = False


class StoreReader(abc.ABC):
    """Raw bytes of one stored object, read in chunks; close it (or use ``async with``).

    ``content_encoding`` is the Content-Encoding the store answered with ("" for
    none), or None when the store returns objects exactly as they were put
    (file stores), so nothing was decoded on the way.
    """

    content_encoding: str | None = ""

    @abc.abstractmethod
    async def read(self, size: int = files.COPY_BLOCK) -> bytes:
        """Up to ``size`` bytes; b"" at the end of the object."""

    @abc.abstractmethod
    async def aclose(self) -> None: ...

    async def read_all(self) -> bytes:
        parts: list[bytes] = []
        while chunk := await self.read():
            parts.append(chunk)
        return b"".join(parts)

    async def __aenter__(self) -> StoreReader:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class Store(abc.ABC):
    """A blob store holding fragment files under content paths.

    ``path`` arguments are relative to the store URL (a fragment's content path,
    ``<journal>/<postfix>/<name>``). Blocking client calls run in worker threads,
    so the event loop stays free.
    """

    @abc.abstractmethod
    def sign_get(self, path: str, ttl: float) -> str:
        """A URL its bearer may GET for ``ttl`` seconds."""

    @abc.abstractmethod
    async def exists(self, path: str) -> bool: ...

    @abc.abstractmethod
    async def get(self, path: str) -> StoreReader:
        """Open the object's raw bytes (no codec decoding)."""

    @abc.abstractmethod
    async def put(
        self, path: str, content: files.ReaderAt, length: int, content_encoding: str = ""
    ) -> None:
        """Durably write ``length`` bytes of ``content`` at ``path``."""

    @abc.abstractmethod
    def list(self, prefix: str) -> AsyncIterator[tuple[str, float]]:
        """(path relative to ``prefix``, mtime in Unix seconds) of every object under it.

        "Directory" keys ending in ``/`` are skipped.
        """

    @abc.abstractmethod
    async def remove(self, path: str) -> None: ...

    @abc.abstractmethod
    def is_auth_error(self, err: BaseException) -> bool:
        """Whether ``err`` (as raised by this store) is an authorization failure."""


@dataclass(frozen=True)
class Rewriter:
    """Find/replace of the relative path before it is prefixed (query ``find``, ``replace``).

    Lets a new journal naming scheme keep reading fragments stored under the old
    one: the first occurrence of ``find`` in the relative path becomes ``replace``.
    """

    find: str = ""
    replace: str = ""

    def rewrite(self, prefix: str, path: str) -> str:
        if not self.find:
            return prefix + path
        return prefix + path.replace(self.find, self.replace, 1)


def parse_query_args(url: urllib.parse.SplitResult, options: tuple[str, ...]) -> dict[str, str]:
    """Query arguments keyed by their canonical option name.

    Keys match ``options`` case-insensitively (as Gazette's schema decoder does);
    an unknown key raises StoreConfigError.
    """
    canonical: Mapping[str, str] = {o.lower(): o for o in options}
    out: dict[str, str] = {}
    try:
        pairs = urllib.parse.parse_qsl(url.query, keep_blank_values=True, strict_parsing=False)
    except ValueError as e:
        raise errors.StoreConfigError(f"parsing store URL arguments: {e}") from e
    for key, value in pairs:
        name = canonical.get(key.lower())
        if name is None:
            raise errors.StoreConfigError(
                f"parsing store URL arguments: unknown query argument {key!r}"
            )
        out[name] = value
    return out


class SectionReader:
    """A seekable, readable window [0, length) over a ReaderAt: the file object that
    blob clients (botocore, google-cloud-storage, azure) want as an upload body."""

    def __init__(self, content: files.ReaderAt, length: int) -> None:
        self._content = content
        self._length = length
        self._pos = 0

    def read(self, size: int = -1) -> bytes:
        remaining = self._length - self._pos
        if size < 0 or size > remaining:
            size = remaining
        if size <= 0:
            return b""
        chunk = self._content.pread(size, self._pos)
        self._pos += len(chunk)
        return chunk

    def seek(self, offset: int, whence: int = 0) -> int:
        base_pos = (0, self._pos, self._length)[whence]
        self._pos = max(0, min(self._length, base_pos + offset))
        return self._pos

    def tell(self) -> int:
        return self._pos

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True


class BytesReader(StoreReader):
    """A StoreReader over an object already read whole (clients that return bytes)."""

    def __init__(self, data: bytes, content_encoding: str = "") -> None:
        self._data = memoryview(data)
        self._pos = 0
        self.content_encoding = content_encoding

    async def read(self, size: int = files.COPY_BLOCK) -> bytes:
        chunk = bytes(self._data[self._pos : self._pos + size])
        self._pos += len(chunk)
        return chunk

    async def aclose(self) -> None:
        self._data = memoryview(b"")
