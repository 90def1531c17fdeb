"""A FUSE passthrough file system whose writes can be stalled: a sick disk on demand.

For tests and fault drills. Run as a process of its own
(``python -m gazette.broker.stallfs ROOT MOUNTPOINT``): it serves
ROOT at MOUNTPOINT and reads commands on its standard input, ``stall`` (every
write and file creation then blocks, as on a disk that stopped answering) and
``unstall``; it answers each with ``ok``. End of input unstalls, so a test that
dies releases the writers it held. A process rather than a thread: the
daemon must keep answering while the test's process is blocked in a write
it serves.

Tests use :class:`StallFS` (a context manager: mount, ``stall()``,
``unstall()``, unmount in any case). It needs ``/dev/fuse``, ``fusermount``
(Debian ``fuse``), ``libfuse.so.2`` (Debian ``libfuse2``) and PyPI ``fusepy``;
:func:`unavailable` says which one is missing.
"""

from __future__ import annotations

import errno
import os
import pathlib
import shutil
import subprocess
import sys
import threading
import time
from types import TracebackType
from typing import Any

# Long enough for a test's whole stall, short enough that a forgotten one ends.
MAX_STALL = 120.0


def unavailable() -> str | None:
    """Why a FUSE mount can't be made here (None: it can)."""
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse"
    if shutil.which("fusermount") is None:
        return "no fusermount (Debian package fuse)"
    try:
        import fuse  # type: ignore[import-untyped]  # noqa: F401
    except (ImportError, OSError) as e:  # fusepy raises when libfuse is absent
        return f"fusepy unusable: {e}"
    return None


def _serve(root: str, mountpoint: str) -> None:
    import fuse

    flowing = threading.Event()
    flowing.set()

    def wait_flowing() -> None:
        if not flowing.wait(MAX_STALL):
            raise fuse.FuseOSError(errno.EIO)

    class Passthrough(fuse.Operations):  # type: ignore[misc]
        def _full(self, path: str) -> str:
            return os.path.join(root, path.lstrip("/"))

        def access(self, path: str, mode: int) -> None:
            if not os.access(self._full(path), mode):
                raise fuse.FuseOSError(errno.EACCES)

        def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
            st = os.fstat(fh) if fh is not None else os.lstat(self._full(path))
            keys = ("st_atime", "st_ctime", "st_gid", "st_mode", "st_mtime", "st_nlink")
            return {k: getattr(st, k) for k in (*keys, "st_size", "st_uid")}

        def readdir(self, path: str, fh: int) -> list[str]:
            return [".", "..", *os.listdir(self._full(path))]

        def mkdir(self, path: str, mode: int) -> None:
            os.mkdir(self._full(path), mode)

        def rmdir(self, path: str) -> None:
            os.rmdir(self._full(path))

        def chmod(self, path: str, mode: int) -> None:
            os.chmod(self._full(path), mode)

        def utimens(self, path: str, times: tuple[float, float] | None = None) -> None:
            os.utime(self._full(path), times)

        def statfs(self, path: str) -> dict[str, Any]:
            st = os.statvfs(self._full(path))
            keys = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree")
            return {
                k: getattr(st, k) for k in (*keys, "f_files", "f_flag", "f_frsize", "f_namemax")
            }

        def unlink(self, path: str) -> None:
            os.unlink(self._full(path))

        def rename(self, old: str, new: str) -> None:
            os.rename(self._full(old), self._full(new))

        def create(self, path: str, mode: int, fi: Any = None) -> int:
            wait_flowing()
            return os.open(self._full(path), os.O_RDWR | os.O_CREAT | os.O_EXCL, mode)

        def open(self, path: str, flags: int) -> int:
            return os.open(self._full(path), flags)

        def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
            return os.pread(fh, size, offset)

        def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
            wait_flowing()
            return os.pwrite(fh, data, offset)

        def truncate(self, path: str, length: int, fh: int | None = None) -> None:
            wait_flowing()
            if fh is not None:
                os.ftruncate(fh, length)
            else:
                os.truncate(self._full(path), length)

        def flush(self, path: str, fh: int) -> None:
            pass

        def fsync(self, path: str, datasync: bool, fh: int) -> None:
            wait_flowing()
            os.fsync(fh)

        def release(self, path: str, fh: int) -> None:
            os.close(fh)

    def commands() -> None:
        for line in sys.stdin:
            word = line.strip()
            if word == "stall":
                flowing.clear()
            elif word == "unstall":
                flowing.set()
            print("ok", flush=True)
        flowing.set()  # Our test is gone: let every held writer go.

    threading.Thread(target=commands, daemon=True).start()
    # Not hard_remove: libfuse 2 as fusepy drives it then answers ENOENT to every
    # operation on an open file whose name is gone (each spool file). By default
    # such a file is renamed .fuse_hidden* until closed, which spools don't notice.
    fuse.FUSE(Passthrough(), mountpoint, foreground=True, nothreads=False)


class StallFS:
    """A stallable FUSE mount of ``root`` at ``mountpoint`` (see the module docstring)."""

    def __init__(self, root: pathlib.Path, mountpoint: pathlib.Path) -> None:
        self.root = root
        self.mountpoint = mountpoint
        self._proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> StallFS:
        self.root.mkdir(parents=True, exist_ok=True)
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        self._proc = subprocess.Popen(
            [sys.executable, __file__, str(self.root), str(self.mountpoint)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 15
            while not os.path.ismount(self.mountpoint):
                if self._proc.poll() is not None:
                    raise RuntimeError(f"stallfs exited with {self._proc.returncode}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{self.mountpoint} not mounted in 15s")
                time.sleep(0.05)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _command(self, word: str) -> None:
        assert self._proc is not None and self._proc.stdin and self._proc.stdout
        self._proc.stdin.write(word + "\n")
        self._proc.stdin.flush()
        assert self._proc.stdout.readline().strip() == "ok"

    def stall(self) -> None:
        """From now on every write and file creation blocks until :meth:`unstall`."""
        self._command("stall")

    def unstall(self) -> None:
        self._command("unstall")

    def close(self) -> None:
        """Release held writers, unmount (lazily: spool files may still be open), stop."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            if proc.stdin is not None:
                proc.stdin.close()  # End of input: unstall.
        except OSError:
            pass
        # A plain unmount, unless a file is still open there: then a lazy one, which
        # detaches the mount now and lets those files fail when used.
        for argv in (["fusermount", "-u"], ["fusermount", "-u", "-z"], ["umount", "-l"]):
            if not os.path.ismount(self.mountpoint):
                break
            subprocess.run([*argv, str(self.mountpoint)], capture_output=True, check=False)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


if __name__ == "__main__":
    _serve(sys.argv[1], sys.argv[2])
