"""gazctl as a user runs it: one-shot start-up, and ``attach-uuids`` throughput.

Rows, each a ratio to a ceiling or a peer measured in the same run:

- one-shot: ``gazctl journals append`` to a port nobody listens on (it imports
  everything appending needs, then fails at its first RPC), median wall time
  of several runs, against the floor of importing what any gRPC client in
  Python imports (asyncio, grpc.aio, click and the protocol messages), and
  against ``python -c pass``;
- attach-uuids: MB/s of 200-byte CSV lines through ``gazctl attach-uuids``
  (start-up included, 32 MiB of input), against ``cat`` of the same file
  (the pipe's ceiling) and, where Go is on the PATH, Go Gazette's gazctl
  (v0.103, built once by ``broker/tests/interop/go/build.sh``).
"""

from __future__ import annotations

import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

RUNS = 7
INPUT_MIB = 32
REPO = pathlib.Path(__file__).parents[1]

_FLOOR = (
    "import asyncio, grpc.aio, click; "
    "from gazette.broker.protocol import protocol_pb2, protocol_pb2_grpc"
)


def _wall(argv: list[str], *, stdin: pathlib.Path | None = None) -> float:
    start = time.perf_counter()
    with open(stdin or os.devnull, "rb") as f:
        subprocess.run(argv, stdin=f, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def _median(argv: list[str], runs: int = RUNS) -> float:
    return statistics.median(_wall(argv) for _ in range(runs))


def _go_gazctl() -> pathlib.Path | None:
    if shutil.which("go") is None:
        return None
    out = subprocess.run(
        [str(REPO / "broker/tests/interop/go/build.sh")],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    return (
        pathlib.Path(out.stdout.strip().splitlines()[-1]) / "gazctl"
        if out.returncode == 0
        else None
    )


def main() -> None:
    gazctl = [sys.executable, "-m", "gazette.gazctl"]
    append = [
        *gazctl,
        "journals",
        "append",
        "-l",
        "name=a/b",
        "--broker.address",
        "http://127.0.0.1:1",
    ]
    one_shot = _median(append)
    floor = _median([sys.executable, "-c", _FLOOR])
    bare = _median([sys.executable, "-c", "pass"])
    print(
        f"one-shot `gazctl journals append` (failing at its RPC): {one_shot * 1000:.0f} ms; "
        f"import floor {floor * 1000:.0f} ms ({floor / one_shot:.2f}x of it); "
        f"`python -c pass` {bare * 1000:.0f} ms"
    )

    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "in.csv"
        line = b"%08d," + b"x" * 190 + b"\n"
        lines = (INPUT_MIB << 20) // len(line % 0)
        with path.open("wb") as f:
            for start in range(0, lines, 10_000):
                f.write(b"".join(line % i for i in range(start, min(start + 10_000, lines))))
        size = path.stat().st_size / 1e6
        ours = size / min(_wall([*gazctl, "attach-uuids", str(path)]) for _ in range(2))
        cat = size / min(_wall(["cat", str(path)]) for _ in range(2))
        row = f"attach-uuids, {size:.0f} MB of 200-byte lines: {ours:.1f} MB/s, {ours / cat:.3f}x of cat"
        go = _go_gazctl()
        if go is not None:
            theirs = size / min(_wall([str(go), "attach-uuids", str(path)]) for _ in range(2))
            row += f", {ours / theirs:.2f}x of Go's gazctl ({theirs:.1f} MB/s)"
        print(row)
