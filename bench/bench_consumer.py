"""Consumer benchmark: JSON messages through one shard, committed to PostgreSQL.

On one broker (replication 1), PostgreSQL (fsync on) and one consumer process
(``bench/_consumer_app.py``, the SQL store):

* throughput: 100,000 JSON messages of 200 bytes are written to a journal first;
  a shard then reads, sequences, consumes and commits them (checkpoint and a
  count row per transaction). Messages/s is timed from the shard's first commit
  to the commit that reads through the last message, and shown against the
  ceiling: the raw client read rate of the same journal in the same run
  (``RetryReader`` over the bytes, frames counted, nothing decoded).
* latency: messages published at 5,000/s for 10 s to a second shard, which
  echoes each (uncommitted) to another journal; the benchmark reads the echoes
  committed. Publish-to-commit latency = when the echo became readable (its
  transaction committed and ACKed) minus when the message was published.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import sys
import tempfile
import time
from typing import Any

from bench import _consumer_app as app
from bench import bench_broker
from gazette.consumer.runtime import store_sql

MESSAGES = int(os.environ.get("BENCH_MESSAGES", "100000"))
SIZE = 200
RATE = 5_000
LAT_SECONDS = 10.0
THROUGHPUT = "bench/throughput"
PREFIX = "/gazette/consumers/bench"
_REPO = str(pathlib.Path(__file__).resolve().parents[1])


def _doc(i: int) -> dict[str, Any]:
    pad = "x" * (SIZE - 70)
    return {"UUID": "", "i": i, "pad": pad}


async def _wait_writable(jc: Any, names: list[str]) -> None:
    from gazette.broker import client

    deadline = time.monotonic() + 60
    for name in names:
        while True:
            try:
                await asyncio.wait_for(client.append(jc, name, b""), 5)
                break
            except (client.errors.ClientError, TimeoutError):
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.1)


async def _read_through(dsn: str, fqn: str) -> int:
    import psycopg

    from gazette.consumer import protocol as pc

    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        await conn.execute(store_sql.TABLE_DDL)
        cur = await conn.execute(
            "SELECT checkpoint FROM gazette_checkpoints WHERE shard_fqn = %s", (fqn,)
        )
        row = await cur.fetchone()
    if row is None:
        return 0
    cp = pc.Checkpoint.FromString(bytes(row[0]))
    return int(cp.sources[THROUGHPUT].read_through) if THROUGHPUT in cp.sources else 0


async def _body(cluster: Any, pg: Any, work: pathlib.Path) -> None:
    from google.protobuf import duration_pb2

    from gazette import keyspace, message
    from gazette.broker import client, testing
    from gazette.broker import protocol as pb
    from gazette.consumer import protocol as pc
    from gazette.consumer import testing as consumer_testing
    from gazette.keyspace import etcd as ks_etcd

    ndjson = (pb.LABEL_CONTENT_TYPE, pb.CONTENT_TYPE_JSON_LINES)
    names = [THROUGHPUT, app.LATENCY, app.ECHO]
    async with client.JournalClient(client.ClientConfig(address=cluster[0].endpoint)) as jc:
        req = pb.ApplyRequest()
        for name in names:
            req.changes.add(upsert=testing.journal_spec(name, labels=[ndjson], length=1 << 28))
        await client.apply_journals(jc, req)
        await _wait_writable(jc, names)

        # Fill the throughput journal.
        async with client.AppendService(jc) as svc:
            pub = message.Publisher(svc)
            for i in range(MESSAGES):
                pub.publish_committed(
                    lambda _m: (THROUGHPUT, ndjson[1]), message.JSONMessage(_doc(i))
                )
                if i % 5000 == 0:
                    await asyncio.sleep(0)
            for op in svc.pending_except(""):
                await op
        head = (await client.append(jc, THROUGHPUT, b"")).commit.end

        # Ceiling: read the same bytes raw.
        t0 = time.perf_counter()
        frames = 0
        async with client.RetryReader(
            jc, pb.ReadRequest(journal=THROUGHPUT, offset=0, end_offset=head)
        ) as rr:
            async for chunk in rr:
                frames += chunk.count(b"\n")
        ceiling = frames / (time.perf_counter() - t0)

        dsn = pg.create_database("bench")
        etcd = await ks_etcd.connect(cluster.etcd_endpoint)
        try:
            specs = []
            for sid, source in (("throughput", THROUGHPUT), ("latency", app.LATENCY)):
                spec = pc.ShardSpec(id=sid)
                spec.sources.add(journal=source)
                spec.max_txn_duration.CopyFrom(duration_pb2.Duration(seconds=1))
                specs.append((sid, spec.SerializeToString(), 0))
            await keyspace.apply_changes(etcd, PREFIX, specs)
            consumers = consumer_testing.ConsumerCluster(
                "bench._consumer_app:Counter",
                etcd_endpoint=cluster.etcd_endpoint,
                etcd_prefix=PREFIX,
                broker_address=cluster[0].endpoint,
                work_dir=work / "consumers",
                processes=1,
                lease="10s",
                log_level="warn",
                app_args=["--postgres", dsn],
                env={"PYTHONPATH": _REPO},
            )
            with consumers:
                fqn = f"{PREFIX}/items/throughput"
                first_at = first_rt = 0.0
                deadline = time.perf_counter() + float(os.environ.get("BENCH_DEADLINE", "300"))
                while True:
                    if time.perf_counter() > deadline:
                        raise TimeoutError(f"the shard did not read through: {consumers.logs(40)}")
                    rt = await _read_through(dsn, fqn)
                    now = time.perf_counter()
                    if rt and not first_at:
                        first_at, first_rt = now, rt
                    if rt >= head:
                        break
                    await asyncio.sleep(0.05)
                per_msg = head / MESSAGES
                rate = (head - first_rt) / per_msg / max(now - first_at, 1e-9)

                latencies = await _latency(jc, message, pb)
            print(f"{MESSAGES} JSON messages of {SIZE} B through one shard, SQL store (PostgreSQL)")
            print(
                f"  consumed+committed   {rate:10.0f} msgs/s ({rate / ceiling:4.2f}x of the raw"
                f" client read of the same journal: {ceiling:.0f} msgs/s)"
            )
            p50 = bench_broker._pct(latencies, 50)
            p99 = bench_broker._pct(latencies, 99)
            print(
                f"  publish-to-commit at {RATE}/s: p50 {p50:6.1f} ms  p99 {p99:6.1f} ms"
                f" ({len(latencies)} messages; aim p99 <= 50 ms)"
            )
        finally:
            await keyspace.apply_changes(etcd, PREFIX, [(s, None, -1) for s, _, _ in specs])
            await etcd.close()


async def _latency(jc: Any, message: Any, pb: Any) -> list[float]:
    from gazette.broker import client

    latencies: list[float] = []
    done = asyncio.Event()
    start_offset = (await client.append(jc, app.ECHO, b"")).commit.end
    total = int(RATE * LAT_SECONDS)

    async def read() -> None:
        seq = message.Sequencer({}, [], 4096)
        req = pb.ReadRequest(journal=app.ECHO, offset=start_offset, block=True)
        async with message.ReadCommittedIter(jc, req, lambda _s: message.JSONMessage(), seq) as it:
            async for env in it:
                if message.get_flags(env.message.get_uuid()) == message.Flags.ACK_TXN:
                    continue
                latencies.append((time.time_ns() - env.message.doc["t"]) / 1e9)
                if os.environ.get("BENCH_TRACE") and len(latencies) % 2500 == 0:
                    print(
                        f"    {len(latencies)} echoes, latest {latencies[-1] * 1e3:.0f} ms",
                        flush=True,
                    )
                if len(latencies) >= total:
                    done.set()
                    return

    async with client.AppendService(jc) as svc, asyncio.TaskGroup() as tg:
        reader = tg.create_task(read())
        pub = message.Publisher(svc)
        t0 = time.perf_counter()
        sent = 0
        while sent < total:
            due = int((time.perf_counter() - t0) * RATE)
            while sent < min(due, total):
                pub.publish_committed(
                    lambda _m: (app.LATENCY, pb.CONTENT_TYPE_JSON_LINES),
                    message.JSONMessage({"UUID": "", "t": time.time_ns()}),
                )
                sent += 1
            await asyncio.sleep(0.002)
        try:
            async with asyncio.timeout(60):
                await done.wait()
        finally:
            reader.cancel()
    return latencies


def main() -> None:
    from gazette.broker import testing
    from gazette.consumer import testing as consumer_testing
    from gazette.keyspace import testing as ks_testing

    cache = pathlib.Path(".cache")
    with tempfile.TemporaryDirectory(
        prefix="bench-consumer-", dir=cache if cache.is_dir() else None
    ) as tmp:
        work = pathlib.Path(tmp)
        os.chmod(work, 0o755)
        with (
            ks_testing.EtcdServer(work_dir=work / "etcd") as etcd,
            testing.BrokerCluster(
                etcd.endpoint, work_dir=work / "brokers", brokers=1, lease="10s", log_level="warn"
            ) as cluster,
            consumer_testing.PostgresServer(work / "pg") as pg,
        ):
            asyncio.run(_body(cluster, pg, work))


if __name__ == "__main__":
    sys.exit(main())
