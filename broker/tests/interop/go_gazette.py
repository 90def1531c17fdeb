"""Gazette's own Go broker and gazctl (v0.103), built by ``go/build.sh``, for side-by-side tests.

:func:`build` runs the script (binaries cached under ``.cache/go-gazette-bin/``);
:class:`GoBroker` runs a Go broker process under a given etcd root, sharing a
``file://`` root with ours; :func:`go_gazctl` runs Go's gazctl. A module of its
own (every ``conftest`` of the workspace is imported as ``conftest``).
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import subprocess
import time
import urllib.request

GO_DIR = pathlib.Path(__file__).parent / "go"


class BuildError(RuntimeError):
    """go/build.sh failed (its output is the message)."""


def build() -> pathlib.Path:
    """The directory holding ``gazette`` and ``gazctl`` (built on first use)."""
    proc = subprocess.run(
        [str(GO_DIR / "build.sh")], capture_output=True, text=True, timeout=900, check=False
    )
    if proc.returncode != 0:
        raise BuildError(f"go/build.sh failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return pathlib.Path(proc.stdout.strip())


def go_gazctl(
    bins: pathlib.Path, broker: str, *args: str, input: bytes | None = None, ok: bool = True
) -> subprocess.CompletedProcess[bytes]:
    """Run Go's gazctl against ``broker``; fails the test unless it exits 0 (``ok``)."""
    proc = subprocess.run(
        [str(bins / "gazctl"), *args],
        input=input,
        capture_output=True,
        timeout=60,
        env={**os.environ, "BROKER_ADDRESS": broker},
        check=False,
    )
    if ok:
        assert proc.returncode == 0, (
            f"Go gazctl {' '.join(args)} exited {proc.returncode}: {proc.stderr.decode()}"
        )
    return proc


@dataclasses.dataclass
class GoBroker:
    """One Go broker process (``gazette serve``); gRPC, HTTP and /debug on one port."""

    bins: pathlib.Path
    etcd: str
    prefix: str
    zone: str
    suffix: str
    port: int
    file_root: pathlib.Path
    log_path: pathlib.Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            argv = [
                str(self.bins / "gazette"), "serve",
                "--broker.zone", self.zone,
                "--broker.id", self.suffix,
                "--broker.host", "127.0.0.1",
                "--broker.port", str(self.port),
                "--broker.file-root", str(self.file_root),
                "--etcd.address", self.etcd,
                "--etcd.prefix", self.prefix,
                "--etcd.lease", "3s",
                "--log.level", "info",
            ]  # fmt: skip
            self.proc = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"{self.endpoint}/debug/metrics", timeout=1) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"Go broker exited:\n{self.log_path.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"Go broker not ready:\n{self.log_path.read_text()[-3000:]}")
            time.sleep(0.1)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
