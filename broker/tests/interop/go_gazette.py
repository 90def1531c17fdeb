"""Gazette's own Go broker and gazctl (v0.103) beside ours, for side-by-side tests.

``go/`` is a Go module that requires ``go.gazette.dev/core`` v0.103.0 and
holds only ``loadgen/`` (Go's client library appending small records, for
``bench/bench_go.py``); ``go/build.sh`` builds ``cmd/gazette``,
``cmd/gazctl`` and ``gazette-loadgen`` (CGO on) once per version of the module into
``go-gazette-bin/<hash>/`` of the tool cache (``e2e/cache-root.sh``, outside the
checkout) and prints that directory.

* :func:`build` runs the script and returns the directory.
* :class:`GoBroker` is one ``gazette serve`` process under a given etcd root,
  sharing a ``file://`` root with ours; it dies with the test process.
* :func:`go_gazctl` and :func:`our_gazctl` run either gazctl as a user would
  (a process, ``BROKER_ADDRESS`` in its environment), bounded in time.
* :func:`put_fragment` writes a fragment into a ``file://`` store by hand, as
  an operator restoring one would; :func:`store_fragments` lists and decodes
  what brokers persisted there; :func:`etcd_snapshot` reads an etcd root.

A module of its own (every ``conftest`` of the workspace is imported as
``conftest``); ``conftest.py`` wraps it in fixtures.

Usage::

    bins = build()
    with GoBroker(bins, etcd.endpoint, "/gazette/go", zone="z", suffix="go-0",
                  file_root=tmp / "fragments", log_path=tmp / "go.log") as go:
        go_gazctl(bins, go.endpoint, "journals", "apply", input=yaml_bytes)
        our_gazctl(go.endpoint, "journals", "read", "-l", "name=a/j").stdout
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import gzip
import hashlib
import os
import pathlib
import ssl
import subprocess
import sys
import time
import types
import urllib.error
import urllib.request
from collections.abc import Mapping

from gazette import keyspace
from gazette.keyspace import testing as ks_testing

__all__ = [
    "BUILD_TIMEOUT",
    "BuildError",
    "GoBroker",
    "StoredFragment",
    "build",
    "etcd_snapshot",
    "go_gazctl",
    "our_gazctl",
    "put_fragment",
    "store_fragments",
]

GO_DIR = pathlib.Path(__file__).parent / "go"
#: A cold build (empty Go build cache, modules already downloaded) takes about
#: two minutes on two cores; a warm one returns the cached binaries at once.
BUILD_TIMEOUT = 900.0
#: Bounds every gazctl invocation.
GAZCTL_TIMEOUT = 60.0

#: Gazette's fragment file extensions (broker/protocol/fragment_extensions.go).
_CODEC_OF_EXTENSION = {".raw": "NONE", ".gz": "GZIP", ".zst": "ZSTANDARD", ".sz": "SNAPPY"}


class BuildError(RuntimeError):
    """``go/build.sh`` failed or took too long; the message has its output."""


def build() -> pathlib.Path:
    """The directory holding ``gazette`` and ``gazctl`` (built on first use)."""
    try:
        proc = subprocess.run(
            [str(GO_DIR / "build.sh")],
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired as e:
        raise BuildError(f"go/build.sh took over {BUILD_TIMEOUT}s:\n{e.stderr}") from e
    if proc.returncode != 0:
        raise BuildError(f"go/build.sh failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    return pathlib.Path(proc.stdout.strip().splitlines()[-1])


def _run(
    argv: list[str],
    broker: str,
    input: bytes | None,
    env: Mapping[str, str] | None,
    ok: bool,
    what: str,
) -> subprocess.CompletedProcess[bytes]:
    try:
        proc = subprocess.run(
            argv,
            input=input,
            capture_output=True,
            timeout=GAZCTL_TIMEOUT,
            env={**os.environ, "BROKER_ADDRESS": broker, **(env or {})},
            check=False,
        )
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"{what} timed out after {GAZCTL_TIMEOUT}s: {e.stderr!r}") from e
    if ok:
        assert proc.returncode == 0, (
            f"{what} exited {proc.returncode}:\n{proc.stderr.decode(errors='replace')[-3000:]}"
        )
    return proc


def go_gazctl(
    bins: pathlib.Path,
    broker: str,
    *args: str,
    input: bytes | None = None,
    env: Mapping[str, str] | None = None,
    ok: bool = True,
) -> subprocess.CompletedProcess[bytes]:
    """Go's gazctl against ``broker``; fails the test unless it exits 0 (when ``ok``)."""
    return _run(
        [str(bins / "gazctl"), *args], broker, input, env, ok, f"Go gazctl {' '.join(args)}"
    )


def our_gazctl(
    broker: str,
    *args: str,
    input: bytes | None = None,
    env: Mapping[str, str] | None = None,
    ok: bool = True,
) -> subprocess.CompletedProcess[bytes]:
    """Our gazctl (``python -m gazette.gazctl``) against ``broker``, like :func:`go_gazctl`."""
    return _run(
        [sys.executable, "-m", "gazette.gazctl", *args],
        broker,
        input,
        env,
        ok,
        f"our gazctl {' '.join(args)}",
    )


@dataclasses.dataclass
class GoBroker:
    """One Go broker process (``gazette serve``): gRPC, HTTP and /debug on one port.

    ``lease`` is short, as for our test brokers, so a killed broker leaves its
    assignments quickly. A context manager: started on entry, killed on exit.
    """

    bins: pathlib.Path
    etcd: str
    prefix: str
    zone: str
    suffix: str
    file_root: pathlib.Path
    log_path: pathlib.Path
    port: int = 0
    lease: str = "3s"
    #: More flags of ``gazette serve`` (e.g. ``("--broker.auth-keys", keys)``).
    extra_args: tuple[str, ...] = ()
    #: Of a broker serving TLS (its ``extra_args`` name the certificates): how its
    #: port is reached while waiting for it; its endpoint is then ``https://``.
    ssl_context: ssl.SSLContext | None = None
    proc: subprocess.Popen[bytes] | None = None

    def __post_init__(self) -> None:
        if not self.port:
            self.port = ks_testing.free_port()

    @property
    def endpoint(self) -> str:
        scheme = "http" if self.ssl_context is None else "https"
        return f"{scheme}://127.0.0.1:{self.port}"

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 60.0) -> None:
        """Start the process and wait until it serves HTTP (it has joined etcd by then)."""
        self.file_root.mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        argv = [
            *ks_testing.die_with_parent_argv("KILL"),
            str(self.bins / "gazette"), "serve",
            "--broker.zone", self.zone,
            "--broker.id", self.suffix,
            "--broker.host", "127.0.0.1",
            "--broker.port", str(self.port),
            "--broker.file-root", str(self.file_root),
            "--etcd.address", self.etcd,
            "--etcd.prefix", self.prefix,
            "--etcd.lease", self.lease,
            "--log.level", "info",
            *self.extra_args,
        ]  # fmt: skip
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(
                    f"{self.endpoint}/debug/metrics", timeout=1, context=self.ssl_context
                ) as resp:
                    if resp.status == 200:
                        return
            except (OSError, urllib.error.URLError):
                pass
            if not self.alive:
                raise RuntimeError(f"Go broker {self.suffix} exited:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"Go broker {self.suffix} not ready:\n{self.log_tail()}")
            time.sleep(0.1)

    def kill(self) -> None:
        """SIGKILL, as :meth:`gazette.broker.testing.BrokerProcess.kill`."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> GoBroker:
        try:
            self.start()
        except BaseException:
            self.kill()
            raise
        return self

    def __exit__(
        self,
        et: type[BaseException] | None,
        e: BaseException | None,
        tb: types.TracebackType | None,
    ) -> None:
        self.kill()


def put_fragment(file_root: pathlib.Path, journal: str, begin: int, content: bytes) -> pathlib.Path:
    """Write ``content`` as an uncompressed fragment of ``journal`` at ``begin``.

    Named as both kinds of broker name what they persist
    (``<begin>-<end>-<sha1>.raw``, offsets as 16 hex digits), under the
    ``file:///`` store of ``file_root``.
    """
    end = begin + len(content)
    name = f"{begin:016x}-{end:016x}-{hashlib.sha1(content).hexdigest()}.raw"
    path = file_root / journal / name
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(content)
    tmp.rename(path)
    return path


@dataclasses.dataclass(frozen=True)
class StoredFragment:
    """A fragment file of a ``file://`` store, decoded here (not by a broker)."""

    path: pathlib.Path
    begin: int
    end: int
    sha1: str
    codec: str
    content: bytes


def store_fragments(file_root: pathlib.Path, journal: str) -> list[StoredFragment]:
    """Every fragment ``journal`` has in the ``file:///`` store of ``file_root``, by offset.

    Decoded with the standard library alone (raw and gzip), so neither kind
    of broker judges its own files; the name's offsets and SHA-1 are checked
    against the decoded content.
    """
    out = []
    directory = file_root / journal
    for path in sorted(directory.iterdir()) if directory.is_dir() else ():
        stem, dot, ext = path.name.partition(".")
        if not dot or f".{ext}" not in _CODEC_OF_EXTENSION:
            continue
        begin_hex, end_hex, sha1 = stem.split("-")
        codec = _CODEC_OF_EXTENSION[f".{ext}"]
        raw = path.read_bytes()
        if codec == "GZIP":
            content = gzip.decompress(raw)
        elif codec == "NONE":
            content = raw
        else:
            raise AssertionError(f"{path}: codec {codec} is not decoded by these tests")
        begin, end = int(begin_hex, 16), int(end_hex, 16)
        assert end - begin == len(content), f"{path}: {len(content)} bytes decoded"
        assert hashlib.sha1(content).hexdigest() == sha1, f"{path}: SHA-1 of content differs"
        out.append(StoredFragment(path, begin, end, sha1, codec, content))
    return sorted(out, key=lambda f: (f.begin, f.end))


def etcd_snapshot(endpoint: str, prefix: str) -> dict[str, bytes]:
    """Every key under ``prefix`` and its value (blocking; usable from any test)."""

    async def snapshot() -> dict[str, bytes]:
        client = await keyspace.connect(endpoint, call_timeout=10)
        try:
            got = await client.get_prefix(prefix.encode())
            return {kv.key.decode(): bytes(kv.value) for kv in got}
        finally:
            await client.close()

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, snapshot()).result()
