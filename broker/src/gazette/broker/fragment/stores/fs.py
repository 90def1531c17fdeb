"""``file://`` fragment stores: a directory tree under ``--broker.file-root`` (broker.md §5.3)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import tempfile
import urllib.parse
from collections.abc import AsyncIterator
from typing import BinaryIO

from gazette.broker.fragment import errors, files
from gazette.broker.fragment.stores import base

log = logging.getLogger(__name__)

# Text marking a missing store directory; is_auth_error keys on it, as Gazette does.
INVALID_FILE_STORE_DIRECTORY = "invalid file store directory"

_OPTIONS = ("find", "replace")


class _FileReader(base.StoreReader):
    content_encoding = None  # Files come back exactly as they were put.

    def __init__(self, f: BinaryIO) -> None:
        self._f = f

    async def read(self, size: int = files.COPY_BLOCK) -> bytes:
        if size >= files.COPY_BLOCK:
            return await asyncio.to_thread(self._f.read, size)
        return self._f.read(size)

    async def aclose(self) -> None:
        self._f.close()


class FileStore(base.Store):
    """Objects are files at ``<root>/<URL path>/<rewritten relative path>``."""

    def __init__(self, url: str, config: base.StoresConfig) -> None:
        parts = urllib.parse.urlsplit(url)
        args = base.parse_query_args(parts, _OPTIONS)
        self._url = url
        self._root = config.file_root
        self._prefix = parts.path
        self._rewriter = base.Rewriter(args.get("find", ""), args.get("replace", ""))

    def _fs_path(self, path: str) -> str:
        # Like Go's filepath.Join: concatenate, then clean (the URL path is absolute).
        return os.path.normpath(self._root + "/" + self._rewriter.rewrite(self._prefix, path))

    def _err(self, op: str, path: str, e: BaseException) -> errors.StoreError:
        return errors.StoreError(f"{op} {path}: {e}", store=self._url, op=op, path=path)

    def sign_get(self, path: str, ttl: float) -> str:
        # The file root is not part of the URL: readers map it with their own --file-root.
        return "file://" + self._rewriter.rewrite(self._prefix, path)

    async def exists(self, path: str) -> bool:
        try:
            os.stat(self._fs_path(path))
        except FileNotFoundError:
            return False
        except OSError as e:
            raise self._err("exists", path, e) from e
        return True

    async def get(self, path: str) -> base.StoreReader:
        try:
            f = await asyncio.to_thread(open, self._fs_path(path), "rb")
        except OSError as e:
            raise self._err("get", path, e) from e
        return _FileReader(f)

    async def put(
        self, path: str, content: files.ReaderAt, length: int, content_encoding: str = ""
    ) -> None:
        try:
            await asyncio.to_thread(self._put, path, content, length)
        except errors.StoreError:
            raise
        except OSError as e:
            raise self._err("put", path, e) from e

    def _put(self, path: str, content: files.ReaderAt, length: int) -> None:
        base_dir = os.path.normpath(self._root + "/" + self._prefix)
        try:
            os.stat(base_dir)
        except OSError as e:
            raise errors.StoreError(
                f"{INVALID_FILE_STORE_DIRECTORY} {base_dir}: {e}",
                store=self._url,
                op="put",
                path=path,
            ) from e
        target = self._fs_path(path)
        directory = os.path.dirname(target)
        _make_dirs(directory)
        # Write beside the target and rename over it, so a listing never sees a partial file.
        fd, tmp = tempfile.mkstemp(prefix=".partial-" + os.path.basename(target), dir=directory)
        try:
            with os.fdopen(fd, "wb") as f:
                offset = 0
                while offset < length:
                    chunk = content.pread(min(files.COPY_BLOCK, length - offset), offset)
                    if not chunk:
                        raise errors.StoreError(
                            f"put {path}: content ended at {offset} of {length} bytes",
                            store=self._url,
                            op="put",
                            path=path,
                        )
                    f.write(chunk)
                    offset += len(chunk)
            os.rename(tmp, target)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.remove(tmp)

    async def list(self, prefix: str) -> AsyncIterator[tuple[str, float]]:
        directory = self._fs_path(prefix)
        try:
            entries = await asyncio.to_thread(_walk, directory)
        except OSError as e:
            raise self._err("list", prefix, e) from e
        for entry in entries:
            yield entry

    async def remove(self, path: str) -> None:
        try:
            os.remove(self._fs_path(path))
        except OSError as e:
            raise self._err("remove", path, e) from e

    def is_auth_error(self, err: BaseException) -> bool:
        e: BaseException | None = err
        while e is not None:
            if isinstance(e, PermissionError) or INVALID_FILE_STORE_DIRECTORY in str(e):
                return True
            e = e.__cause__
        return False


def _make_dirs(directory: str) -> None:
    """mkdir -p, every created level with mode 0750 (os.makedirs only modes the leaf)."""
    if os.path.isdir(directory):
        return
    parent = os.path.dirname(directory)
    if parent and parent != directory:
        _make_dirs(parent)
    with contextlib.suppress(FileExistsError):
        os.mkdir(directory, 0o750)


def _walk(directory: str) -> list[tuple[str, float]]:
    """Every file below ``directory`` as (relative POSIX path, mtime), sorted; [] if missing."""
    if not os.path.isdir(directory):
        return []
    out: list[tuple[str, float]] = []

    def on_error(e: OSError) -> None:
        raise e

    for dirpath, dirnames, filenames in os.walk(directory, onerror=on_error):
        dirnames.sort()
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, directory).replace(os.sep, "/")
            out.append((rel, os.stat(full).st_mtime))
    out.sort()
    return out
