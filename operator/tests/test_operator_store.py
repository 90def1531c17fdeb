"""EtcdSpecStore against a real etcd: concurrent reads and checked writes share transactions,
and every write keeps its own expected-mod-revision guard."""

from __future__ import annotations

import asyncio
from typing import Any

import aetcd
import pytest

from gazette import keyspace
from gazette.broker import protocol as pb
from gazette.operator import errors, reconcile, store

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

N = 300


def journal(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "gazette.dev/v1alpha1",
        "kind": "Journal",
        "metadata": {
            "name": f"j{i:04d}",
            "namespace": "ns",
            "uid": f"uid-{i}",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "generation": 1,
            "labels": {"gazette.dev/cluster": "default", "topic": "t"},
        },
        "spec": {
            "name": f"store/part-{i:04d}",
            "replication": 3,
            "labels": [{"name": "content-type", "value": "application/x-ndjson"}],
            "fragment": {"length": 1 << 20, "compressionCodec": "NONE", "refreshInterval": "1m"},
        },
    }


async def revision(client: aetcd.Client, root: str) -> int:
    # A put of a throwaway key: its revision is etcd's current one.
    return int((await client.put(f"{root}-rev".encode(), b"")).header.revision)


async def test_concurrent_reconciles_share_transactions(etcd: aetcd.Client, etcd_root: str) -> None:
    specs = store.EtcdSpecStore(etcd)
    config = reconcile.ReconcileConfig(broker_root=etcd_root)
    before = await revision(etcd, etcd_root)
    outcomes = await asyncio.gather(
        *(reconcile.reconcile(journal(i), reconcile.JOURNALS, config, specs) for i in range(N))
    )
    after = await revision(etcd, etcd_root)
    assert all(o.reason is reconcile.Reason.APPLIED and o.wrote for o in outcomes), outcomes[0]
    # Far fewer transactions than writes: one revision per transaction.
    assert after - before - 1 < N // 4, (before, after)
    for i, outcome in enumerate(outcomes):
        kv = await etcd.get(outcome.key.encode())
        assert kv is not None
        assert int(kv.mod_revision) == outcome.mod_revision
        assert pb.JournalSpec.FromString(kv.value).name == f"store/part-{i:04d}"
    # Again: etcd holds every spec, so nothing is written.
    again = await asyncio.gather(
        *(reconcile.reconcile(journal(i), reconcile.JOURNALS, config, specs) for i in range(N))
    )
    assert [o.mod_revision for o in again] == [o.mod_revision for o in outcomes]
    assert not any(o.wrote for o in again)
    assert await revision(etcd, etcd_root) == after + 1


async def test_each_write_keeps_its_guard(etcd: aetcd.Client, etcd_root: str) -> None:
    specs = store.EtcdSpecStore(etcd)
    taken = keyspace.item_key(etcd_root, "k-007")
    await etcd.put(taken.encode(), b"written by hand")
    results = await asyncio.gather(
        *(
            specs.apply(etcd_root, [keyspace.Change(f"k-{i:03d}", b"v", keyspace.MUST_NOT_EXIST)])
            for i in range(40)
        ),
        # The same key twice at once: one of them wins, neither is an error.
        specs.apply(etcd_root, [keyspace.Change("twice", b"a", keyspace.MUST_NOT_EXIST)]),
        specs.apply(etcd_root, [keyspace.Change("twice", b"b", keyspace.MUST_NOT_EXIST)]),
    )
    assert [r.succeeded for r in results[:40]] == [i != 7 for i in range(40)]
    assert sorted(r.succeeded for r in results[40:]) == [False, True]
    kv = await etcd.get(taken.encode())
    assert kv is not None and kv.value == b"written by hand"
    for i in range(40):
        if i != 7:
            got = await specs.get(etcd_root, f"k-{i:03d}")
            assert got is not None and got.value == b"v"
            assert got.mod_revision == results[i].revision
    # A delete guarded by a stale revision fails; by the right one, it succeeds.
    held, other = await specs.get(etcd_root, "k-001"), await specs.get(etcd_root, "k-002")
    assert held is not None and other is not None
    # Batching may have written k-001 and k-002 in one transaction or in two: guard each
    # by its own revision (k-002's one behind), never by its neighbour's.
    stale, right = await asyncio.gather(
        specs.apply(etcd_root, [keyspace.Change("k-002", None, other.mod_revision - 1)]),
        specs.apply(etcd_root, [keyspace.Change("k-001", None, held.mod_revision)]),
    )
    assert (stale.succeeded, right.succeeded) == (False, True)
    assert await specs.get(etcd_root, "k-001") is None
    assert await specs.get(etcd_root, "k-002") is not None


async def test_concurrent_reads(etcd: aetcd.Client, etcd_root: str) -> None:
    specs = store.EtcdSpecStore(etcd)
    for i in range(0, 250, 2):
        await etcd.put(keyspace.item_key(etcd_root, f"r{i}").encode(), f"value {i}".encode())
    got = await asyncio.gather(
        *(specs.get(etcd_root, f"r{i}") for i in range(250)),
        specs.get(etcd_root, "r4"),  # One key twice in a batch.
    )
    for i, stored in enumerate(got[:250]):
        if i % 2:
            assert stored is None
        else:
            assert stored is not None and stored.value == f"value {i}".encode()
            assert stored.mod_revision > 0
    assert got[250] == got[4]


async def test_a_malformed_apply_fails_alone(etcd: aetcd.Client, etcd_root: str) -> None:
    specs = store.EtcdSpecStore(etcd)
    results = await asyncio.gather(
        *(
            specs.apply(etcd_root, [keyspace.Change(f"m-{i}", b"v", keyspace.MUST_NOT_EXIST)])
            for i in range(10)
        ),
        specs.apply(etcd_root, [keyspace.Change("bad", b"v", -5)]),
        specs.apply(
            etcd_root, [keyspace.Change("dup", b"a", -1), keyspace.Change("dup", b"b", -1)]
        ),
        return_exceptions=True,
    )
    assert [getattr(r, "succeeded", None) for r in results[:10]] == [True] * 10
    assert isinstance(results[10], ValueError)
    assert isinstance(results[11], errors.SpecStoreError)
    assert await specs.get(etcd_root, "bad") is None
    assert await specs.get(etcd_root, "dup") is None
