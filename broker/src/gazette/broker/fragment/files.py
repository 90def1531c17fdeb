"""Local files behind fragments: unlinked spool files and positional readers.

A :class:`SpoolFile` is a temporary file whose only directory entry is removed
as soon as it is created: the open descriptor is the file. Readers of a local
fragment share it through :meth:`SpoolFile.pread` (positional, so concurrent
readers and the writer never disturb a shared offset). The descriptor closes
when the last reference goes away, as Gazette leaves closing to its GC
finalizer: an index drops a local fragment once it is durable, but a read of
it may still be streaming.
"""

from __future__ import annotations

import os
import tempfile
from typing import Protocol

# Positional reads/copies move data in blocks of this size.
COPY_BLOCK = 1 << 20


class ReaderAt(Protocol):
    """Anything readable at an offset, like Go's io.ReaderAt."""

    def pread(self, size: int, offset: int) -> bytes: ...


class SpoolFile:
    """An anonymous (already unlinked) read-write file."""

    __slots__ = ("_fd",)

    def __init__(self, fd: int) -> None:
        self._fd = fd

    @classmethod
    def create(cls, directory: str | None = None) -> SpoolFile:
        """Create an unlinked temporary file in ``directory`` (default: the OS temp dir)."""
        fd, name = tempfile.mkstemp(prefix="spool", dir=directory)
        try:
            os.unlink(name)
        except BaseException:
            os.close(fd)
            raise
        return cls(fd)

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def fileno(self) -> int:
        return self._fd

    def pwrite(self, data: bytes | memoryview, offset: int) -> None:
        """Write all of ``data`` at ``offset``."""
        view = memoryview(data)
        while view:
            n = os.pwrite(self._fd, view, offset)
            view, offset = view[n:], offset + n

    def pread(self, size: int, offset: int) -> bytes:
        """Read up to ``size`` bytes at ``offset`` (fewer only at end of file)."""
        parts: list[bytes] = []
        while size > 0:
            chunk = os.pread(self._fd, size, offset)
            if not chunk:
                break
            parts.append(chunk)
            size -= len(chunk)
            offset += len(chunk)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def size(self) -> int:
        return os.fstat(self._fd).st_size

    def close(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)

    def __del__(self) -> None:
        # Intended: the last holder of a spool file releases it (see module docstring).
        if getattr(self, "_fd", -1) >= 0:
            self.close()


class BytesReaderAt:
    """A ReaderAt over bytes in memory (small objects such as health-check probes)."""

    __slots__ = ("_data",)

    def __init__(self, data: bytes) -> None:
        self._data = data

    def pread(self, size: int, offset: int) -> bytes:
        return self._data[offset : offset + size]
