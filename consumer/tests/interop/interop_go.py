"""Driving ``gazette-msg`` and ``gazette-rlog`` (Go's ``message`` and ``recoverylog``) from tests.

``go/main.go`` is ``gazette-msg``, a small program on ``go.gazette.dev/core``
v0.103 that publishes (committed messages, acknowledged transactions, rolled
back and never acknowledged messages) and reads (read-committed, through
Go's Sequencer) journals of JSON lines ``{"UUID", "Seq", "Kind"}``; its doc
comment is the contract. ``go/rlog/main.go`` is ``gazette-rlog``, in the same
module: it records a fixed script of file operations into a recovery log with
Go's ``Recorder`` (after a Go ``Player`` hand-off), and plays a log into a
directory with Go's ``Player``. ``go/build.sh`` builds either once per
version of the module's sources into ``go-gazette-msg/<hash>/`` of the tool cache
(``e2e/cache-root.sh``, outside the checkout).

:func:`build` runs that script; :class:`GazetteMsg` and :class:`GazetteRlog`
run the binaries. The helpers :func:`ndjson_journal`, :func:`journal_frames`
and :func:`uuid_fields` create journals of JSON lines and look at their raw
bytes; :func:`recoverylog_journal` creates a recovery log. The fixtures of
``conftest.py`` wrap them for tests (a module of its own, as every
``conftest`` of the workspace is imported as ``conftest``).

Usage::

    gm = GazetteMsg(build())
    summary = gm.publish("http://127.0.0.1:8080", ["a/j"], committed=3, txn=2)
    delivered, done = gm.read("http://127.0.0.1:8080", "a/j")

    rlog = GazetteRlog(build("gazette-rlog"))
    hints_json, summary = rlog.record("http://127.0.0.1:8080", "recovery/a", "/tmp/go-dir")
    played = rlog.play("http://127.0.0.1:8080", hints_json, "/tmp/replica")
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import pathlib
import subprocess
import uuid
from collections.abc import Sequence
from typing import Any

from gazette.broker import protocol as pb
from gazette.broker import testing
from gazette.broker.protocol import protocol_pb2_grpc as pb2_grpc

__all__ = [
    "ACK_TXN",
    "CONTINUE_TXN",
    "FLAGS_OF_KIND",
    "OUTSIDE_TXN",
    "BuildError",
    "GazetteMsg",
    "GazetteMsgError",
    "GazetteRlog",
    "build",
    "build_gazctl",
    "journal_frames",
    "ndjson_journal",
    "recoverylog_journal",
    "uuid_fields",
]

GO_DIR = pathlib.Path(__file__).parent / "go"
#: A cold build (empty Go build cache) takes about 40 s on two cores, more
#: when modules must be downloaded; a warm one returns the cached binary.
BUILD_TIMEOUT = 600.0

NDJSON = ("content-type", "application/x-ndjson")
RECOVERYLOG = (pb.LABEL_CONTENT_TYPE, pb.CONTENT_TYPE_RECOVERYLOG)

#: Gazette's transaction flags (message/uuid.go).
OUTSIDE_TXN, CONTINUE_TXN, ACK_TXN = 0x0, 0x1, 0x2
#: The flags each ``Kind`` of ``gazette-msg publish`` is written with.
FLAGS_OF_KIND = {
    "committed": OUTSIDE_TXN,
    "txn": CONTINUE_TXN,
    "rollback": CONTINUE_TXN,
    "pending": CONTINUE_TXN,
    "ack": ACK_TXN,
}


class BuildError(RuntimeError):
    """``go/build.sh`` failed or took too long; the message has its output."""


class GazetteMsgError(AssertionError):
    """A Go program exited non-zero or took too long; the message has its stderr."""


def build(program: str = "gazette-msg") -> pathlib.Path:
    """Build ``program`` (or find it built) and return its path; needs ``go`` on PATH."""
    try:
        proc = subprocess.run(
            [str(GO_DIR / "build.sh"), program],
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired as e:
        raise BuildError(f"building {program} took over {BUILD_TIMEOUT}s:\n{e.stderr}") from e
    if proc.returncode != 0:
        raise BuildError(f"building {program} failed (exit {proc.returncode}):\n{proc.stderr}")
    return pathlib.Path(proc.stdout.strip().splitlines()[-1])


def build_gazctl() -> pathlib.Path:
    """Go's own ``gazctl`` (v0.103), built by the broker's interop module on first use."""
    script = GO_DIR.parents[3] / "broker" / "tests" / "interop" / "go" / "build.sh"
    try:
        proc = subprocess.run(
            [str(script)], capture_output=True, text=True, timeout=BUILD_TIMEOUT, check=False
        )
    except subprocess.TimeoutExpired as e:
        raise BuildError(f"building Go's gazctl took over {BUILD_TIMEOUT}s:\n{e.stderr}") from e
    if proc.returncode != 0:
        raise BuildError(f"building Go's gazctl failed (exit {proc.returncode}):\n{proc.stderr}")
    return pathlib.Path(proc.stdout.strip().splitlines()[-1]) / "gazctl"


def _run(binary: pathlib.Path, args: Sequence[str], timeout: float, stdin: bytes = b"") -> str:
    """Run ``binary`` with ``args`` (bounded by ``--timeout`` and from here); its stdout."""
    argv = [str(binary), *args, f"--timeout={int(timeout)}s"]
    try:
        proc = subprocess.run(
            argv, input=stdin, capture_output=True, timeout=timeout + 10, check=False
        )
    except subprocess.TimeoutExpired as e:
        raise GazetteMsgError(f"{' '.join(argv)}: timed out\n{e.stderr!r}") from e
    if proc.returncode != 0:
        stderr = proc.stderr.decode(errors="replace")
        raise GazetteMsgError(f"{' '.join(argv)}: exit {proc.returncode}\n{stderr[-4000:]}")
    return proc.stdout.decode()


@dataclasses.dataclass(frozen=True)
class GazetteMsg:
    """Runs the ``gazette-msg`` binary; each call parses its JSON-lines stdout."""

    binary: pathlib.Path
    #: Bounds each command (passed as its ``--timeout``, and enforced from here).
    timeout: float = 60.0

    def run(self, *args: str) -> list[dict[str, Any]]:
        out = _run(self.binary, args, self.timeout)
        return [json.loads(line) for line in out.splitlines() if line.strip()]

    def publish(
        self,
        broker: str,
        journals: list[str],
        *,
        committed: int = 0,
        txn: int = 0,
        txns: int = 1,
        rollback: int = 0,
        pending: int = 0,
        seq_start: int = 0,
    ) -> dict[str, Any]:
        """``gazette-msg publish``: its summary (producer, counts, acks, heads by journal)."""
        args = ["publish", f"--broker={broker}"]
        args += [f"--journal={j}" for j in journals]
        args += [
            f"--committed={committed}",
            f"--txn={txn}",
            f"--txns={txns}",
            f"--rollback={rollback}",
            f"--pending={pending}",
            f"--seq-start={seq_start}",
        ]
        (summary,) = self.run(*args)
        return summary

    def read(
        self,
        broker: str,
        journal: str,
        *,
        offset: int = 0,
        until_offset: int = 0,
        until_count: int = 0,
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """``gazette-msg read``: (delivered envelopes, ACKs included; the final summary)."""
        lines = self.run(
            "read",
            f"--broker={broker}",
            f"--journal={journal}",
            f"--offset={offset}",
            f"--until-offset={until_offset}",
            f"--until-count={until_count}",
        )
        assert lines and lines[-1].get("done"), lines
        return lines[:-1], lines[-1]

    async def apublish(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """:meth:`publish` off the event loop."""
        return await asyncio.to_thread(self.publish, *args, **kwargs)

    async def aread(self, *args: Any, **kwargs: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """:meth:`read` off the event loop."""
        return await asyncio.to_thread(self.read, *args, **kwargs)


@dataclasses.dataclass(frozen=True)
class GazetteRlog:
    """Runs the ``gazette-rlog`` binary (Go's recoverylog ``Recorder`` and ``Player``)."""

    binary: pathlib.Path
    #: Bounds each command (passed as its ``--timeout``, and enforced from here).
    timeout: float = 60.0

    def record(
        self,
        broker: str,
        log: str,
        directory: pathlib.Path,
        *,
        author: int = 0,
        hints: bytes | None = None,
    ) -> tuple[bytes, dict[str, Any]]:
        """``gazette-rlog record``: (the FSMHints JSON exactly as Go marshalled it, summary).

        ``hints`` (JSON) are recovered from before recording; without them Go
        plays the log from its start. They may be of another log: Go then
        hands that log off and fences ``log`` with a no-op before recording.
        The summary is ``{"author", "files"}``, files mapping relative paths
        to ``{"size", "sha256"}``.
        """
        args = ["record", f"--broker={broker}", f"--log={log}", f"--dir={directory}"]
        args.append(f"--author={author}")
        if hints is not None:
            args.append("--hints=-")
        hints_line, summary = _run(self.binary, args, self.timeout, hints or b"").splitlines()
        return hints_line.encode(), json.loads(summary)

    def play(
        self, broker: str, hints: bytes, directory: pathlib.Path, *, handoff: int = 0
    ) -> dict[str, Any]:
        """``gazette-rlog play`` of the FSMHints JSON ``hints`` into ``directory``.

        Stops at the write head, or hands the log off to ``handoff`` if non-zero.
        Returns ``{"files", "next_seq_no", "next_checksum", "last_log", "hints"}``.
        """
        args = ["play", f"--broker={broker}", "--hints=-", f"--dir={directory}"]
        args.append(f"--handoff={handoff}")
        (summary,) = _run(self.binary, args, self.timeout, hints).splitlines()
        result: dict[str, Any] = json.loads(summary)
        return result

    async def arecord(self, *args: Any, **kwargs: Any) -> tuple[bytes, dict[str, Any]]:
        """:meth:`record` off the event loop."""
        return await asyncio.to_thread(self.record, *args, **kwargs)

    async def aplay(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """:meth:`play` off the event loop."""
        return await asyncio.to_thread(self.play, *args, **kwargs)


async def recoverylog_journal(cluster: testing.BrokerCluster, name: str) -> None:
    """Create recovery log ``name`` (the cluster's store) and wait until it's writable."""
    async with cluster.channel(0) as ch:
        stub = pb2_grpc.JournalStub(ch)
        await testing.apply_specs(
            stub, testing.journal_spec(name, labels=[RECOVERYLOG], stores=[cluster.store_url])
        )
        await testing.wait_writable(stub, name)


async def ndjson_journal(cluster: testing.BrokerCluster, name: str) -> None:
    """Create journal ``name`` (JSON lines, the cluster's store) and wait until it's writable."""
    async with cluster.channel(0) as ch:
        stub = pb2_grpc.JournalStub(ch)
        await testing.apply_specs(
            stub, testing.journal_spec(name, labels=[NDJSON], stores=[cluster.store_url])
        )
        await testing.wait_writable(stub, name)


async def journal_frames(
    cluster: testing.BrokerCluster, name: str
) -> list[tuple[int, int, dict[str, Any]]]:
    """Every JSON line of the journal as ``(begin, end, document)``, read raw."""
    async with cluster.channel(0) as ch:
        content, _ = await testing.read(pb2_grpc.JournalStub(ch), name)
    out, offset = [], 0
    for line in content.splitlines(keepends=True):
        out.append((offset, offset + len(line), json.loads(line)))
        offset += len(line)
    return out


def uuid_fields(text: str) -> tuple[int, int, str]:
    """``(clock, flags, producer hex)`` of a Gazette UUID, by the stdlib's RFC 4122 view.

    Independent of :mod:`gazette.message`, to check it and Go against a third reading.
    """
    u = uuid.UUID(text)
    assert str(u) == text, f"not the canonical lowercase text form: {text}"
    assert u.version == 1 and u.variant == uuid.RFC_4122, text
    clock = (u.time << 4) | (u.clock_seq >> 10)
    return clock, u.clock_seq & 0x3FF, f"{u.node:012x}"
