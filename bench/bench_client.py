"""Client benchmark: many 1 KiB records batched by the AppendService into one journal.

A writer hands 1 KiB records to ``client.AppendService`` as fast as it can
(keeping at most 20,000 records unacknowledged for throughput, or 1,000
for latency), which batches them
into pipelined appends to a journal at replication 1 and at replication 3 on a
3-broker ``gazette.broker.testing`` cluster. Prints records/s and the per-record
ack latency (from ``append()`` to its batch's acknowledgement) p50 / p99, next
to the raw-stream ceiling of ``bench_broker`` measured in the same run (a bare
grpc.aio client stream into a server that only counts bytes), in records/s.
"""

from __future__ import annotations

import asyncio
import time

from bench import _cluster, bench_broker
from gazette.broker import client

RECORD = 1024
SECONDS = 4.0
MAX_UNACKED = 20_000
CEILING_CHUNK = 32 * 1024


async def _drive(
    jc: client.JournalClient, journal: str, max_unacked: int
) -> tuple[float, list[float], int]:
    """Append records for SECONDS: (records/s, per-record ack latencies in s, appends)."""
    record = b"x" * (RECORD - 1) + b"\n"
    latencies: list[float] = []
    batches = 0
    written_total = 0
    async with client.AppendService(jc) as svc, asyncio.TaskGroup() as tg:

        async def watch(aa: client.AsyncAppend, written: list[float]) -> None:
            await aa
            now = time.perf_counter()
            latencies.extend(now - t for t in written)

        current: client.AsyncAppend | None = None
        written: list[float] = []
        pending: list[asyncio.Task[None]] = []
        start = time.perf_counter()
        while time.perf_counter() - start < SECONDS:
            for _ in range(100):
                aa = svc.append(journal, record)
                if aa is not current:
                    current, written = aa, []
                    pending.append(tg.create_task(watch(aa, written)))
                    batches += 1
                written.append(time.perf_counter())
            written_total += 100
            # Backpressure: don't run further ahead of the acknowledgements than this.
            while pending and written_total - len(latencies) >= max_unacked:
                await pending.pop(0)
            await asyncio.sleep(0)
        await asyncio.gather(*pending)
        elapsed = time.perf_counter() - start
    return len(latencies) / elapsed, latencies, batches


def _row(
    label: str, rate: float, lat: list[float], ceiling: tuple[float, float], extra: str = ""
) -> str:
    p50, p99 = bench_broker._pct(lat, 50), bench_broker._pct(lat, 99)
    return (
        f"  {label:<34} {rate:10.0f} records/s ({rate / ceiling[0]:4.2f}x)   "
        f"ack p50 {p50:7.2f} ms  p99 {p99:7.2f} ms ({p99 / ceiling[1]:5.2f}x){extra}"
    )


async def _main(cluster: object) -> None:
    mbps, lat = await bench_broker._ceiling(CEILING_CHUNK)
    ceiling = (mbps * 1e6 / RECORD, bench_broker._pct(lat, 99))
    print(
        f"{RECORD} B records, {SECONDS:.0f}s each; ceiling = raw stream of {CEILING_CHUNK // 1024} KiB chunks"
    )
    print(
        f"  {'(a) raw grpc.aio ceiling':<34} {ceiling[0]:10.0f} records/s (1.00x)   "
        f"ack p99 {ceiling[1]:7.2f} ms per 1 MiB append"
    )
    runs = (
        ("(b) replication 1, 20k unacked", 1, MAX_UNACKED),
        ("(c) replication 3, 20k unacked", 3, MAX_UNACKED),
        ("(d) replication 3, 1k unacked", 3, 1_000),
    )
    for label, replication, max_unacked in runs:
        journal = f"bench/client-r{replication}-{max_unacked}"
        primary = await bench_broker._create_journal(cluster, journal, replication)
        cfg = client.ClientConfig(
            address=cluster.brokers[primary].endpoint,  # type: ignore[attr-defined]
            cache_size=16,
        )
        async with client.JournalClient(cfg) as jc:
            await client.list_journals(jc, f"name={journal}")  # Routes: straight to the primary.
            rate, lat, batches = await _drive(jc, journal, max_unacked)
        per = len(lat) / max(batches, 1)
        print(_row(label, rate, lat, ceiling, f"  [{per:.0f} records/append]"))
    print(NOTES)


NOTES = """\
  ack latency is mostly queueing: a record waits for the batch in flight to be
  acknowledged, then for its own batch; the unacked window bounds both, trading
  records/s for latency. Batching keeps the per-record cost near the broker's
  per-byte cost; the gap to the ceiling is the brokers' own data path (see bench_broker)."""


def main() -> None:
    _cluster.run_on_cluster("client", _main)


if __name__ == "__main__":
    main()
