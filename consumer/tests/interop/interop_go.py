"""Driving ``gazette-msg``, Go's ``message`` package, from Python tests.

``go/main.go`` is ``gazette-msg``, a small program on ``go.gazette.dev/core``
v0.103 that publishes (committed messages, acknowledged transactions, rolled
back and never acknowledged messages) and reads (read-committed, through
Go's Sequencer) journals of JSON lines ``{"UUID", "Seq", "Kind"}``; its doc
comment is the contract. ``go/build.sh`` builds it once per version of its
sources into ``<repo>/.cache/go-gazette-msg/<hash>/``.

:func:`build` runs that script; :class:`GazetteMsg` runs the binary. The
helpers :func:`ndjson_journal`, :func:`journal_frames` and
:func:`uuid_fields` create journals of that content type and look at their
raw bytes. The fixtures of ``conftest.py`` wrap them for tests (a module of
its own, as every ``conftest`` of the workspace is imported as ``conftest``).

Usage::

    gm = GazetteMsg(build())
    summary = gm.publish("http://127.0.0.1:8080", ["a/j"], committed=3, txn=2)
    delivered, done = gm.read("http://127.0.0.1:8080", "a/j")
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import pathlib
import subprocess
import uuid
from typing import Any

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
    "build",
    "journal_frames",
    "ndjson_journal",
    "uuid_fields",
]

GO_DIR = pathlib.Path(__file__).parent / "go"
#: A cold build (empty Go build cache) takes about 40 s on two cores, more
#: when modules must be downloaded; a warm one returns the cached binary.
BUILD_TIMEOUT = 600.0

NDJSON = ("content-type", "application/x-ndjson")

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
    """``gazette-msg`` exited non-zero or took too long; the message has its stderr."""


def build() -> pathlib.Path:
    """Build ``gazette-msg`` (or find it built) and return its path; needs ``go`` on PATH."""
    try:
        proc = subprocess.run(
            [str(GO_DIR / "build.sh")],
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired as e:
        raise BuildError(f"building gazette-msg took over {BUILD_TIMEOUT}s:\n{e.stderr}") from e
    if proc.returncode != 0:
        raise BuildError(f"building gazette-msg failed (exit {proc.returncode}):\n{proc.stderr}")
    return pathlib.Path(proc.stdout.strip().splitlines()[-1])


@dataclasses.dataclass(frozen=True)
class GazetteMsg:
    """Runs the ``gazette-msg`` binary; each call parses its JSON-lines stdout."""

    binary: pathlib.Path
    #: Bounds each command (passed as its ``--timeout``, and enforced from here).
    timeout: float = 60.0

    def run(self, *args: str) -> list[dict[str, Any]]:
        argv = [str(self.binary), *args, f"--timeout={int(self.timeout)}s"]
        try:
            proc = subprocess.run(
                argv, capture_output=True, text=True, timeout=self.timeout + 10, check=False
            )
        except subprocess.TimeoutExpired as e:
            raise GazetteMsgError(f"{' '.join(argv)}: timed out\n{e.stderr}") from e
        if proc.returncode != 0:
            raise GazetteMsgError(
                f"{' '.join(argv)}: exit {proc.returncode}\n{proc.stderr[-4000:]}"
            )
        return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]

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
