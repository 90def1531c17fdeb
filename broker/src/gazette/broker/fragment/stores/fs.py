"""``file://`` fragment stores: a directory tree under ``--broker.file-root`` (Gazette `broker/stores/fs/store.go`).

Every path a store touches is confined to its root, ``<file root>/<URL path>``:
a path with a ``..`` segment or a leading ``/`` is refused before any
filesystem call, and so is one whose directory resolves (following symlinks)
outside the root. Gazette's store (``broker/stores/fs/store.go``) joins and
cleans instead, so a journal named ``../x`` would write beside the root; we
refuse it here as well as at journal-name validation, so that neither layer
alone stands between an Apply and the broker's filesystem.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
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
# Text of every refusal of a path that would leave the store's root.
OUTSIDE_STORE_ROOT = "outside the store root"

_OPTIONS = ("find", "replace")
# Mode of every file put into a store (see FileStore._put).
FRAGMENT_FILE_MODE = 0o644

# (relative POSIX path, mtime) of each listed file; named since FileStore.list shadows `list`.
_Listing = list[tuple[str, float]]


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


def _within(path: str, root: str) -> bool:
    """Whether absolute, normalised ``path`` is ``root`` or below it."""
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


class FileStore(base.Store):
    """Objects are files at ``<root>/<URL path>/<rewritten relative path>``.

    Raises StoreConfigError if the URL path has a ``..`` segment (it could
    leave ``--broker.file-root``), and StoreError for any operation on a path
    that would leave the store's root.
    """

    def __init__(self, url: str, config: base.StoresConfig) -> None:
        parts = urllib.parse.urlsplit(url)
        args = base.parse_query_args(parts, _OPTIONS)
        self._url = url
        self._prefix = parts.path
        if ".." in parts.path.split("/"):
            raise errors.StoreConfigError(
                f"file store path {parts.path} has a '..' segment: it could reach "
                f"outside --broker.file-root {config.file_root}",
                store=url,
                op="construct",
            )
        # The store's own directory: like Go's filepath.Join, concatenate then clean.
        self._root = os.path.normpath(config.file_root + "/" + parts.path)
        self._rewriter = base.Rewriter(args.get("find", ""), args.get("replace", ""))

    # -- Confinement --------------------------------------------------------------------

    def _refuse(self, op: str, path: str, why: str) -> errors.StoreError:
        return errors.StoreError(
            f"{op} {path}: refused, {OUTSIDE_STORE_ROOT} {self._root}: {why}",
            store=self._url,
            op=op,
            path=path,
        )

    def _relative(self, op: str, path: str) -> str:
        """The rewritten store-relative path, refused if its text could leave the root."""
        rel = self._rewriter.rewrite("", path)
        if rel.startswith("/"):
            raise self._refuse(op, path, f"absolute path ({rel})")
        if ".." in rel.split("/"):
            raise self._refuse(op, path, f"path has a '..' segment ({rel})")
        if "\x00" in rel:
            raise self._refuse(op, path, "path has a NUL byte")
        return rel

    def _check_resolved(self, op: str, path: str, local: str) -> None:
        """Refuse ``local`` if, symlinks followed, it resolves outside the resolved root."""
        root = os.path.realpath(self._root)
        real = os.path.realpath(local)
        if not _within(real, root):
            raise self._refuse(op, path, f"{local} resolves to {real}, outside {root}")

    def _local(self, op: str, path: str, *, follow_leaf: bool) -> str:
        """The filesystem path of ``path``, confined to the store's root.

        Its directory must resolve under the root; with ``follow_leaf`` (the
        operation opens or stats the file itself) so must the path itself.
        A symlink swapped in after this check is not caught: the root is the
        broker's own directory, and what this guards against is names that
        arrive over the API (journals, postfixes, rewrites).
        """
        rel = self._relative(op, path)
        local = os.path.normpath(os.path.join(self._root, rel))
        self._check_resolved(op, path, local if follow_leaf else os.path.dirname(local))
        return local

    def _err(self, op: str, path: str, e: BaseException) -> errors.StoreError:
        return errors.StoreError(f"{op} {path}: {e}", store=self._url, op=op, path=path)

    # -- Store --------------------------------------------------------------------------

    def sign_get(self, path: str, ttl: float) -> str:
        # The file root is not part of the URL: readers map it with their own --file-root,
        # so only the text of the path can be checked here.
        return "file://" + self._prefix + self._relative("signget", path)

    async def exists(self, path: str) -> bool:
        local = self._local("exists", path, follow_leaf=True)
        try:
            os.stat(local)
        except FileNotFoundError:
            return False
        except OSError as e:
            raise self._err("exists", path, e) from e
        return True

    async def get(self, path: str) -> base.StoreReader:
        try:
            f = await base.open_in_thread(functools.partial(self._open, path), lambda f: f.close())
        except OSError as e:
            raise self._err("get", path, e) from e
        return _FileReader(f)

    def _open(self, path: str) -> BinaryIO:
        return open(self._local("get", path, follow_leaf=True), "rb")

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
        try:
            os.stat(self._root)
        except OSError as e:
            raise errors.StoreError(
                f"{INVALID_FILE_STORE_DIRECTORY} {self._root}: {e}",
                store=self._url,
                op="put",
                path=path,
            ) from e
        target = self._local("put", path, follow_leaf=False)
        directory = os.path.dirname(target)
        _make_dirs(directory)
        # Again now the directories exist: a symlink among them may have been created
        # (or raced in) after the first check, and we are about to write a file.
        self._check_resolved("put", path, directory)
        # Write beside the target and rename over it, so a listing never sees a partial file.
        fd, tmp = tempfile.mkstemp(prefix=".partial-" + os.path.basename(target), dir=directory)
        try:
            with os.fdopen(fd, "wb") as f:
                # mkstemp creates 0600: make fragments 0644, so that a Spark job running
                # as another user can read a file:// store (issue 17). fchmod is not
                # subject to the umask, so the mode is exactly this.
                os.fchmod(f.fileno(), FRAGMENT_FILE_MODE)
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
        try:
            entries = await asyncio.to_thread(self._list, prefix)
        except OSError as e:
            raise self._err("list", prefix, e) from e
        for entry in entries:
            yield entry

    def _list(self, prefix: str) -> _Listing:
        directory = self._local("list", prefix, follow_leaf=True)
        return _walk(directory, os.path.realpath(self._root))

    async def remove(self, path: str) -> None:
        # os.remove unlinks a symlink rather than its target: only the directory is checked.
        local = self._local("remove", path, follow_leaf=False)
        try:
            os.remove(local)
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


def _walk(directory: str, root: str) -> list[tuple[str, float]]:
    """Every file below ``directory`` as (relative POSIX path, mtime), sorted; [] if missing.

    os.walk does not descend into symlinked directories; a symlinked file that
    resolves outside ``root`` (already resolved) is left out, as reading it
    would be refused.
    """
    if not os.path.isdir(directory):
        return []
    out: list[tuple[str, float]] = []

    def on_error(e: OSError) -> None:
        raise e

    for dirpath, dirnames, filenames in os.walk(directory, onerror=on_error):
        dirnames.sort()
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            if os.path.islink(full) and not _within(os.path.realpath(full), root):
                log.warning("file store listing skips %s: it links outside %s", full, root)
                continue
            rel = os.path.relpath(full, directory).replace(os.sep, "/")
            out.append((rel, os.stat(full).st_mtime))
    out.sort()
    return out
