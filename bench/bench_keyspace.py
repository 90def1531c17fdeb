"""KeySpace benchmark: mirroring 10,000 JournalSpecs from a real etcd.

(a) the ceiling: a raw paginated range read of the keys (no decoding);
(b) ``KeySpace.load`` of the same keys (read + JournalSpec decode + sort);
(c) watch catch-up: a watch started behind 10,000 puts, timed until the
    mirror reaches the last revision (etcd delivery + batching + apply);
(d) ``KeySpace.apply`` alone of one batch of 10,000 events converted from
    etcd's watch messages, into an empty mirror (inserts) and into a full one
    (updates).

Prints keys/s for each, and (b) as a ratio to (a).
"""

from __future__ import annotations

import asyncio
import time

import aetcd.rpc

from gazette import keyspace
from gazette.broker.protocol import protocol_pb2
from gazette.keyspace import etcd, testing
from gazette.keyspace import key_values as kvs

N = 10_000
TXN_OPS = 128  # etcd's default --max-txn-ops
ROOT = "/gazette/cluster"


def _spec(i: int) -> bytes:
    spec = protocol_pb2.JournalSpec(name=f"bench/journal-{i:05d}", replication=3)
    spec.fragment.length = 512 << 20
    spec.fragment.stores.append("s3://bucket/prefix/")
    spec.fragment.compression_codec = protocol_pb2.CompressionCodec.Value("SNAPPY")
    label = spec.labels.labels.add()
    label.name, label.value = "app.gazette.dev/message-type", "Bench"
    return spec.SerializeToString()


def _decode(key: str, value: bytes) -> object:
    return protocol_pb2.JournalSpec.FromString(value)


def _rate(n: int, seconds: float) -> str:
    return f"{n / seconds:>12,.0f} keys/s  ({seconds * 1000:8.1f} ms)"


async def _put_all(client: aetcd.Client) -> int:
    rev = 0
    for lo in range(0, N, TXN_OPS):
        changes = [
            (f"bench/journal-{i:05d}", _spec(i), -1) for i in range(lo, min(N, lo + TXN_OPS))
        ]
        result = await keyspace.apply_changes(client, ROOT, changes)
        rev = result.revision
    return rev


async def _raw_range(client: aetcd.Client) -> int:
    stub = await etcd.kv_stub(client)
    start, end, count = ROOT.encode(), keyspace.prefix_range_end(ROOT).encode(), 0
    while True:
        resp = await stub.Range(aetcd.rpc.RangeRequest(key=start, range_end=end, limit=1000))
        count += len(resp.kvs)
        if not resp.more:
            return count
        start = resp.kvs[-1].key + b"\0"


async def _watch_messages(
    client: aetcd.Client, start: int, end: int
) -> list[keyspace.WatchResponse]:
    """Raw watch responses from ``start`` through ``end``, converted, without applying them."""
    stub = await etcd.watch_stub(client)
    call = stub.Watch()
    await call.write(
        aetcd.rpc.WatchRequest(
            create_request=aetcd.rpc.WatchCreateRequest(
                key=ROOT.encode(),
                range_end=keyspace.prefix_range_end(ROOT).encode(),
                start_revision=start,
            )
        )
    )
    out: list[keyspace.WatchResponse] = []
    try:
        while not out or out[-1].events[-1].kv.mod_revision < end:
            msg = await call.read()
            if msg.events:
                events = [
                    kvs.Event(kvs.EventType(e.type), etcd.key_value_of(e.kv)) for e in msg.events
                ]
                out.append(keyspace.WatchResponse(etcd.header_of(msg.header), events))
    finally:
        call.cancel()
    return out


async def _run(server: testing.EtcdServer) -> None:
    client = await etcd.connect(server.endpoint)
    try:
        empty = keyspace.KeySpace(ROOT, _decode)
        await empty.load(client)
        before = empty.revision

        t = time.perf_counter()
        first = await _put_all(client)
        print(f"  put via apply_changes ({TXN_OPS}/txn) {_rate(N, time.perf_counter() - t)}")

        t = time.perf_counter()
        count = await _raw_range(client)
        raw = time.perf_counter() - t
        assert count == N
        print(f"  (a) raw range read            {_rate(N, raw)}")

        ks = keyspace.KeySpace(ROOT, _decode)
        t = time.perf_counter()
        await ks.load(client)
        load = time.perf_counter() - t
        assert len(ks) == N
        print(f"  (b) KeySpace.load             {_rate(N, load)}  {raw / load:.2f}x of (a)")

        t = time.perf_counter()
        async with asyncio.TaskGroup() as tg:
            task = tg.create_task(empty.watch(client))
            await empty.wait_for_revision(first, timeout=120)
            task.cancel()
        catch_up = time.perf_counter() - t
        assert len(empty) == N
        print(f"  (c) watch catch-up            {_rate(N, catch_up)}")

        inserts = await _watch_messages(client, before + 1, first)
        fresh = keyspace.KeySpace(ROOT, _decode)
        fresh.load_snapshot(
            empty.header.__class__(revision=before, cluster_id=empty.header.cluster_id), []
        )
        t = time.perf_counter()
        fresh.apply(*inserts)
        print(f"  (d) apply 1 batch, inserts    {_rate(N, time.perf_counter() - t)}")

        second = await _put_all(client)
        updates = await _watch_messages(client, first + 1, second)
        t = time.perf_counter()
        fresh.apply(*updates)
        print(f"  (d) apply 1 batch, updates    {_rate(N, time.perf_counter() - t)}")
        assert len(fresh) == N and fresh.revision == second
    finally:
        await client.close()


def main() -> None:
    with testing.EtcdServer() as server:
        asyncio.run(_run(server))


if __name__ == "__main__":
    main()
