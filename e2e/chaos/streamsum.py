"""The stream-sum example (``examples/stream_sum``) as a chaos workload of consumer processes.

The summer runs as consumer processes of a :class:`~chaos.netcluster.NetCluster`
(each in its own namespace, so a partition can cut one off); its shards keep
their sums in a JSON file recorded into each shard's recovery log, with one
hot standby, so a primary cut off is replaced by a standby that replays the
log, and the cut-off one must not commit anything once it is back. The
chunker (:func:`stream_sum.run_chunker`) runs in the test process and checks
every stream's Sum: mismatched, repeated or missing Sums break exactly-once.

* :func:`setup` — the example's journals (``PARTS`` chunk journals, the sums,
  the recovery logs) and ShardSpecs (``chunks-part-NNN``) under :data:`PREFIX`.
* :func:`primary_of` — which process (its suffix) is a shard's primary, per etcd.
* :func:`failed_shards` — assignments etcd holds as FAILED (a chain error of
  the summer: a chunk seen twice, or one skipped).
* :func:`caught_up` — how long until a shard's committed transactions have read
  through an offset of its source (a ``Stat`` read barrier, through any process).

Usage::

    await streamsum.setup(jc, etcd)
    cluster.start_consumers(streamsum.APP, etcd_prefix=streamsum.PREFIX, lease_s=5,
                            app_args=streamsum.APP_ARGS, env=streamsum.env())
    report = await stream_sum.run_chunker(jc, streams=40, chunks_per_stream=40)
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import sys
import time
from collections.abc import Sequence
from typing import Any

import grpc
from google.protobuf import duration_pb2

from gazette import keyspace
from gazette.broker import client, testing
from gazette.broker import protocol as pb
from gazette.consumer import protocol as pc
from gazette.consumer.protocol import protocol_pb2_grpc as pc_grpc

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "stream_sum"
if str(EXAMPLE) not in sys.path:
    sys.path.insert(0, str(EXAMPLE))
import stream_sum  # noqa: E402

__all__ = [
    "APP",
    "APP_ARGS",
    "EXAMPLE",
    "PARTS",
    "PREFIX",
    "caught_up",
    "chunk_journal",
    "env",
    "failed_shards",
    "primary_of",
    "setup",
    "shard_id",
    "stream_sum",
]

APP = "stream_sum:Summer"
#: The consumers' etcd root (their ShardSpecs under ``items/``, assignments under ``assign/``).
PREFIX = "/gazette/consumers/stream-sum"
#: Chunk journals, so shards: enough to spread, few enough for 2 cores.
PARTS = 2
RECOVERY_LOGS = "examples/stream-sum/recovery-logs"


def chunk_journal(i: int) -> str:
    return f"examples/stream-sum/chunks/part-{i:03d}"


def shard_id(i: int) -> str:
    return f"chunks-part-{i:03d}"


#: The summer insists on a DSN, but dials it only for shards without a recovery log:
#: ours all have one, so no PostgreSQL runs (it would be cut off with its namespace).
APP_ARGS = ("--postgres", "postgresql://unused@127.0.0.1:1/unused")


def env() -> dict[str, str]:
    """The consumer processes' environment: the example importable."""
    return {"PYTHONPATH": os.pathsep.join([str(EXAMPLE), os.environ.get("PYTHONPATH", "")])}


def _journal_specs() -> list[pb.JournalSpec]:
    ndjson = (pb.LABEL_CONTENT_TYPE, pb.CONTENT_TYPE_JSON_LINES)
    specs = [
        testing.journal_spec(
            chunk_journal(i),
            replication=2,
            stores=["file:///"],
            labels=[ndjson, ("app.gazette.dev/message-type", stream_sum.CHUNK_TYPE)],
        )
        for i in range(PARTS)
    ]
    specs.append(
        testing.journal_spec(
            stream_sum.SUMS_JOURNAL,
            replication=2,
            stores=["file:///"],
            labels=[ndjson, ("app.gazette.dev/message-type", stream_sum.SUM_TYPE)],
        )
    )
    specs += [
        testing.journal_spec(
            f"{RECOVERY_LOGS}/{shard_id(i)}",
            replication=2,
            stores=["file:///"],
            labels=[(pb.LABEL_CONTENT_TYPE, "application/x-gazette-recoverylog")],
        )
        for i in range(PARTS)
    ]
    return specs


def _shard_specs() -> list[pc.ShardSpec]:
    # As examples/stream_sum/shards.yaml, plus a recovery log (and hints) each.
    specs = []
    for i in range(PARTS):
        spec = pc.ShardSpec(id=shard_id(i), hot_standbys=1)
        spec.sources.add(journal=chunk_journal(i))
        spec.max_txn_duration.CopyFrom(duration_pb2.Duration(seconds=1))
        spec.recovery_log_prefix = RECOVERY_LOGS
        spec.hint_prefix = "/gazette/hints/examples/stream-sum"
        spec.hint_backups = 2
        specs.append(spec)
    return specs


async def setup(jc: client.JournalClient, etcd: Any, *, within: float = 60.0) -> None:
    """Apply the journals (and wait until each takes an append) and the ShardSpecs."""
    req = pb.ApplyRequest()
    specs = _journal_specs()
    for spec in specs:
        req.changes.add(upsert=spec)
    await client.apply_journals(jc, req)
    deadline = time.monotonic() + within
    for spec in specs:
        while True:
            try:
                await client.append(jc, spec.name, b"")
                break
            except (client.errors.ClientError, grpc.aio.AioRpcError):
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.3)
    await keyspace.apply_changes(
        etcd, PREFIX, [(s.id, s.SerializeToString(), 0) for s in _shard_specs()]
    )


async def _assignments(etcd: Any, shard: str) -> list[tuple[str, int, pc.ReplicaStatus]]:
    """(process suffix, slot, status) of each assignment of ``shard``."""
    out = []
    for kv in await etcd.get_prefix(f"{PREFIX}/assign/{shard}#".encode()):
        _, _zone, suffix, slot = kv.key.decode().rsplit("#", 3)
        out.append((suffix, int(slot), pc.ReplicaStatus.FromString(kv.value)))
    return out


async def primary_of(etcd: Any, shard: str) -> str | None:
    """The suffix of the process holding ``shard``'s primary assignment, once it serves it."""
    for suffix, slot, status in await _assignments(etcd, shard):
        if slot == 0 and status.code == pc.ReplicaStatus.PRIMARY:
            return suffix
    return None


async def failed_shards(etcd: Any) -> list[str]:
    out = []
    for kv in await etcd.get_prefix(f"{PREFIX}/assign/".encode()):
        status = pc.ReplicaStatus.FromString(kv.value)
        if status.code == pc.ReplicaStatus.FAILED:
            out.append(f"{kv.key.decode().removeprefix(PREFIX)}: {list(status.errors)[:2]}")
    return out


async def caught_up(
    endpoints: Sequence[str], shard: str, journal: str, offset: int, within: float
) -> tuple[float | None, str]:
    """(seconds, "") until ``shard`` committed reading ``journal`` through ``offset``, asking
    the processes at ``endpoints`` in turn (any one proxies to the primary); (None, the
    last answer) if not within ``within``."""
    started = time.monotonic()
    last = "no attempt"
    turn = 0
    channels: dict[str, grpc.aio.Channel] = {}
    try:
        while time.monotonic() - started < within:
            address = endpoints[turn % len(endpoints)].removeprefix("http://")
            turn += 1
            ch = channels.get(address)
            if ch is None:
                ch = channels[address] = grpc.aio.insecure_channel(address)
            req = pc.StatRequest(shard=shard)
            req.read_through[journal] = offset
            left = within - (time.monotonic() - started)
            try:
                resp = await pc_grpc.ShardStub(ch).Stat(req, timeout=max(0.5, min(3.0, left)))
                if resp.status == pc.Status.OK and resp.read_through.get(journal, 0) >= offset:
                    return time.monotonic() - started, ""
                last = pc.Status.Name(resp.status)
            except grpc.aio.AioRpcError as e:
                last = f"{e.code().name} {(e.details() or '')[:100]}"
            await asyncio.sleep(0.2)
        return None, last
    finally:
        for ch in channels.values():
            await ch.close()
