"""Recovery-log benchmark: SQLite recorded vs not, playback vs raw read, fail-over time.

On etcd and broker processes on loopback (replication 1 for the first two):

* **recording overhead**: transactions of 100 inserts (rows of ~100 bytes),
  each committed with a checkpoint as a consumer commits (the next
  transaction's inserts run while the previous commit's log append is in
  flight). Inserts/s through :class:`SQLiteStore` (every write recorded into
  the log, each commit awaited through the broker) against the same SQLite,
  same pragmas, without the recording VFS (``synchronous=OFF``: nothing waits
  for a disk, so this is the CPU ceiling), in the same run.
* **playback**: the log written above played into a fresh directory
  (MB of log per second) against the raw read of the same journal bytes
  through the client (``RetryReader``), in the same run.
* **fail-over**: word-count on 2 consumer processes (4 shards, 1 hot standby
  each, lease 3 s); a primary is SIGKILLed ``BENCH_FAILOVERS`` times (3) and the
  time until another process serves the shard as PRIMARY is taken; shown
  against the lease, which is the floor (a dead process is noticed when its
  lease expires).
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import random
import shutil
import sys
import tempfile
import time
from typing import Any

from bench import _cluster

TXNS = int(os.environ.get("BENCH_SQLITE_TXNS", "400"))
ROWS = 100
PAGE_SIZE = int(os.environ.get("BENCH_SQLITE_PAGE_SIZE", "4096"))
FAILOVERS = int(os.environ.get("BENCH_FAILOVERS", "3"))
LOG = "bench/recovery-log"
_REPO = pathlib.Path(__file__).resolve().parents[1]
DDL = "CREATE TABLE IF NOT EXISTS kv (k INTEGER PRIMARY KEY, v BLOB NOT NULL)"


def _rows(rng: random.Random, n: int) -> list[tuple[int, bytes]]:
    return [(rng.randrange(1 << 40), rng.randbytes(100)) for _ in range(n)]


def _unrecorded(work: pathlib.Path, batches: list[list[tuple[int, bytes]]]) -> float:
    """Inserts/s of plain SQLite with the store's pragmas (no fsync)."""
    import apsw

    db = apsw.Connection(str(work / "plain.db"))
    for p in (
        f"PRAGMA page_size={PAGE_SIZE}",
        "PRAGMA locking_mode=EXCLUSIVE",
        "PRAGMA journal_mode=WAL",
        "PRAGMA synchronous=OFF",
        "PRAGMA cache_size=-32768",
    ):
        db.execute(p).fetchall()
    db.execute(DDL)
    db.execute("CREATE TABLE cp (rowid INTEGER PRIMARY KEY, checkpoint BLOB)")
    start = time.perf_counter()
    for i, batch in enumerate(batches):
        db.execute("BEGIN")
        db.executemany("INSERT OR REPLACE INTO kv VALUES (?, ?)", batch)
        db.execute("INSERT OR REPLACE INTO cp VALUES (0, ?)", (i.to_bytes(8, "little"),))
        db.execute("COMMIT")
    rate = len(batches) * ROWS / (time.perf_counter() - start)
    db.close()
    return rate


async def _recorded(
    jc: Any, work: pathlib.Path, batches: list[list[tuple[int, bytes]]]
) -> tuple[float, Any]:
    from gazette.broker import client
    from gazette.broker.client import AsyncOperation
    from gazette.consumer import protocol as pc
    from gazette.consumer import recoverylog as rl
    from gazette.consumer import testing as consumer_testing
    from gazette.consumer.runtime import checkpoints, store_sqlite

    d = work / "recorded"
    d.mkdir()
    async with asyncio.TaskGroup() as tg, client.AppendService(jc) as appends:
        shard = consumer_testing.TaskShard("/bench/items/sqlite", tg)
        rec = rl.Recorder(rl.FSM(rl.FSMHints(log="none")), 7, d, appends, LOG)
        await rec.start()
        store = store_sqlite.SQLiteStore(
            rec, DDL, store_sqlite.SQLiteStoreConfig(page_size=PAGE_SIZE)
        )
        await store.restore_checkpoint(shard)  # type: ignore[arg-type]
        start = time.perf_counter()
        prev: AsyncOperation | None = None
        for i, batch in enumerate(batches):
            store.db.executemany("INSERT OR REPLACE INTO kv VALUES (?, ?)", batch)
            if prev is not None:
                await prev
            cp: pc.Checkpoint = checkpoints.build_checkpoint({"src": i + 1}, [], [])
            prev = store.start_commit(shard, cp, ())  # type: ignore[arg-type]
        assert prev is not None
        await prev
        rate = len(batches) * ROWS / (time.perf_counter() - start)
        hints = await rec.build_hints()
        await store.destroy()
    return rate, hints


async def _playback(jc: Any, work: pathlib.Path) -> tuple[float, float, int]:
    from gazette.broker import client
    from gazette.broker import protocol as pb
    from gazette.consumer import recoverylog as rl

    head = int((await client.append(jc, LOG, b"")).commit.end)
    start = time.perf_counter()
    n = 0
    async with client.RetryReader(
        jc, pb.ReadRequest(journal=LOG, offset=0, end_offset=head, block=True)
    ) as rr:
        async for chunk in rr:
            n += len(chunk)
    raw = n / (time.perf_counter() - start)
    start = time.perf_counter()
    await rl.Player(jc, rl.FSMHints(log=LOG), work / "played").play(end_offset=head)
    played = head / (time.perf_counter() - start)
    return played, raw, head


async def _failover(cluster: Any, work: pathlib.Path) -> list[float]:
    sys.path.insert(0, str(_REPO / "examples" / "word_count"))
    sys.path.insert(0, str(_REPO / "consumer" / "tests" / "runtime"))
    import test_rt_word_count as wct

    from gazette import keyspace
    from gazette.broker import client
    from gazette.broker import protocol as pb
    from gazette.consumer import protocol as pc
    from gazette.consumer import testing as consumer_testing
    from gazette.keyspace import etcd as ks_etcd

    etcd = await ks_etcd.connect(cluster.etcd_endpoint)
    times: list[float] = []
    try:
        async with client.JournalClient(client.ClientConfig(address=cluster[0].endpoint)) as jc:
            req = pb.ApplyRequest()
            for spec in wct.journal_specs(cluster.store_url):
                spec.replication = 1
                req.changes.add(upsert=spec)
            await client.apply_journals(jc, req)
            specs = wct.shard_specs()
            await keyspace.apply_changes(
                etcd, wct.PREFIX, [(s.id, s.SerializeToString(), 0) for s in specs]
            )
            consumers = consumer_testing.ConsumerCluster(
                "word_count:Counter",
                etcd_endpoint=cluster.etcd_endpoint,
                etcd_prefix=wct.PREFIX,
                broker_address=cluster[0].endpoint,
                work_dir=work / "consumers",
                processes=2,
                zones=("zone-a", "zone-b"),
                lease="3s",
                log_level="warn",
                env={"PYTHONPATH": str(_REPO / "examples" / "word_count")},
            )
            ids = [s.id for s in specs]
            with consumers:
                await wct.wait_all_ready(etcd, ids)
                deltas = wct.word_count.Deltas(jc)
                async with client.AppendService(jc) as appends:
                    for i in range(200):
                        await deltas.publish(appends, f"warm up text number {i}")
                for k in range(FAILOVERS):
                    sid = ids[k % len(ids)]
                    old = wct.primary_of((await wct.assignments(etcd))[sid])
                    assert old is not None
                    i = int(old.rsplit("-", 1)[1])
                    t0 = time.monotonic()
                    await asyncio.to_thread(consumers.kill, i)
                    while True:
                        new = wct.primary_of((await wct.assignments(etcd))[sid])
                        if new is not None and new != old:
                            break
                        if time.monotonic() - t0 > 60:
                            raise RuntimeError(f"{sid}: no takeover in 60 s")
                        await asyncio.sleep(0.02)
                    times.append(time.monotonic() - t0)
                    await asyncio.to_thread(consumers.restart, i)
                    await wct.wait_all_ready(etcd, ids)
            await keyspace.apply_changes(etcd, wct.PREFIX, [(s.id, None, -1) for s in specs])
            _ = pc
    finally:
        await etcd.close()
    return times


async def _body(cluster: Any) -> None:
    from gazette.broker import client, testing
    from gazette.broker import protocol as pb

    work = pathlib.Path(tempfile.mkdtemp(prefix="bench-rlog-"))
    try:
        rng = random.Random(1)
        batches = [_rows(rng, ROWS) for _ in range(TXNS)]
        plain = _unrecorded(work, batches)
        async with client.JournalClient(client.ClientConfig(address=cluster[0].endpoint)) as jc:
            spec = testing.journal_spec(
                LOG,
                replication=1,
                stores=[cluster.store_url],
                labels=[(pb.LABEL_CONTENT_TYPE, pb.CONTENT_TYPE_RECOVERYLOG)],
            )
            await client.apply_journals(
                jc, pb.ApplyRequest(changes=[pb.ApplyRequest.Change(upsert=spec)])
            )
            async with cluster.channel(0) as ch:
                from gazette.broker.protocol import protocol_pb2_grpc as pb2_grpc

                await testing.wait_writable(pb2_grpc.JournalStub(ch), LOG)
            recorded, _ = await _recorded(jc, work, batches)
            played, raw, size = await _playback(jc, work)
        print(
            f"sqlite inserts/s ({TXNS} txns of {ROWS}): recorded {recorded:,.0f},"
            f" unrecorded {plain:,.0f} -> {recorded / plain:.2f}x of the ceiling"
        )
        print(
            f"playback of {size / 1e6:.1f} MB of log: {played / 1e6:.1f} MB/s,"
            f" raw read {raw / 1e6:.1f} MB/s -> {played / raw:.2f}x of the ceiling"
        )
        if FAILOVERS:
            times = await _failover(cluster, work)
            print(
                f"fail-over (SIGKILLed primary to PRIMARY elsewhere, lease 3 s, {len(times)} runs):"
                f" {', '.join(f'{t:.2f}' for t in times)} s; worst {max(times):.2f} s ->"
                f" {max(times) / 3.0:.2f}x the lease"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    _cluster.run_on_cluster("recoverylog", _body, brokers=1)
