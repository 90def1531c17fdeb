"""KeySpace and apply_changes against a real etcd (the session's test server)."""

from __future__ import annotations

import asyncio
import contextlib
import pathlib
from collections.abc import AsyncIterator

import aetcd
import aetcd.rpc
import grpc
import pytest

from gazette import keyspace
from gazette.broker.protocol import protocol_pb2
from gazette.keyspace import errors, testing
from gazette.keyspace import etcd as etcd_mod

pytestmark = pytest.mark.integration

WAIT = 10.0


def journal(name: str, replication: int = 1) -> bytes:
    spec = protocol_pb2.JournalSpec(name=name, replication=replication)
    spec.fragment.length = 1 << 20
    spec.fragment.stores.append("file:///")
    return spec.SerializeToString()


def decode_journal(key: str, value: bytes) -> protocol_pb2.JournalSpec:
    spec = protocol_pb2.JournalSpec.FromString(value)
    if not key.endswith("/items/" + spec.name):
        raise ValueError(f"spec name {spec.name!r} doesn't match its key")
    return spec


@contextlib.asynccontextmanager
async def watching(
    ks: keyspace.KeySpace, client: aetcd.Client
) -> AsyncIterator[asyncio.Task[None]]:
    """Run ks.watch() in a task group; cancel it when the block ends."""
    async with asyncio.TaskGroup() as tg:
        task = tg.create_task(ks.watch(client))
        try:
            yield task
        finally:
            task.cancel()


async def put_raw(client: aetcd.Client, key: str, value: bytes, lease: int = 0) -> int:
    stub = await etcd_mod.kv_stub(client)
    resp = await stub.Put(aetcd.rpc.PutRequest(key=key.encode(), value=value, lease=lease))
    return int(resp.header.revision)


async def delete_raw(client: aetcd.Client, key: str) -> int:
    stub = await etcd_mod.kv_stub(client)
    resp = await stub.DeleteRange(aetcd.rpc.DeleteRangeRequest(key=key.encode()))
    return int(resp.header.revision)


def names(ks: keyspace.KeySpace, root: str) -> list[str]:
    return [e.decoded.name for e in ks.prefixed(root + "/items/")]  # type: ignore[attr-defined]


async def test_journal_specs_arrive_in_the_mirror_and_go(
    etcd: aetcd.Client, etcd_root: str
) -> None:
    ks = keyspace.KeySpace(etcd_root, decode_journal)
    await ks.load(etcd)
    assert len(ks) == 0
    start = ks.revision

    async with watching(ks, etcd):
        for name in ["examples/foobar", "examples/a/b", "other/x"]:
            rev = await put_raw(etcd, f"{etcd_root}/items/{name}", journal(name, 2))
        await ks.wait_for_revision(rev, timeout=WAIT)
        assert names(ks, etcd_root) == ["examples/a/b", "examples/foobar", "other/x"]
        entry = ks.search(f"{etcd_root}/items/examples/foobar")
        assert entry is not None
        assert entry.decoded.replication == 2  # type: ignore[attr-defined]
        assert entry.create_revision == entry.mod_revision > start
        assert ks.header.revision == rev
        assert ks.header.cluster_id != 0

        for name in ["examples/foobar", "other/x"]:
            rev = await delete_raw(etcd, f"{etcd_root}/items/{name}")
        await ks.wait_for_revision(rev, timeout=WAIT)
        assert names(ks, etcd_root) == ["examples/a/b"]


async def test_load_reads_pages_at_one_revision(etcd: aetcd.Client, etcd_root: str) -> None:
    for i in range(7):
        rev = await put_raw(etcd, f"{etcd_root}/items/j/{i}", journal(f"j/{i}"))
    await put_raw(etcd, "/elsewhere/items/x", journal("x"))
    await put_raw(etcd, f"{etcd_root}/items/bad", b"\xff not a spec")
    later = await put_raw(etcd, f"{etcd_root}/items/j/late", journal("j/late"))

    ks = keyspace.KeySpace(etcd_root, decode_journal, keyspace.KeySpaceConfig(load_page_size=2))
    await ks.load(etcd)
    assert names(ks, etcd_root) == [f"j/{i}" for i in range(7)] + ["j/late"]
    assert ks.revision == later

    await ks.load(etcd, revision=rev)
    assert names(ks, etcd_root) == [f"j/{i}" for i in range(7)]
    assert ks.revision == rev


async def test_wait_for_revision_after_a_write(etcd: aetcd.Client, etcd_root: str) -> None:
    ks = keyspace.KeySpace(etcd_root, decode_journal)
    await ks.load(etcd)
    async with watching(ks, etcd):
        rev = await put_raw(etcd, f"{etcd_root}/items/a", journal("a"))
        await ks.wait_for_revision(rev, timeout=WAIT)
        assert ks.search(f"{etcd_root}/items/a") is not None
        # Writes outside the root don't move the mirror's revision.
        other = await put_raw(etcd, "/not/the/root", b"x")
        with pytest.raises(TimeoutError):
            await ks.wait_for_revision(other, timeout=0.3)
        assert ks.revision == rev


async def test_apply_changes_checks_expected_mod_revisions(
    etcd: aetcd.Client, etcd_root: str
) -> None:
    ks = keyspace.KeySpace(etcd_root, decode_journal)
    await ks.load(etcd)
    async with watching(ks, etcd):
        # 0: must not exist.
        created = await keyspace.apply_changes(
            etcd, etcd_root, [("a", journal("a"), 0), ("b", journal("b"), 0)]
        )
        assert created.succeeded and created.status == protocol_pb2.OK
        await ks.wait_for_revision(created.revision, timeout=WAIT)
        assert names(ks, etcd_root) == ["a", "b"]
        a = ks.search(f"{etcd_root}/items/a")
        assert a is not None and a.mod_revision == created.revision

        again = await keyspace.apply_changes(etcd, etcd_root, [("a", journal("a", 3), 0)])
        assert not again.succeeded
        assert again.status == protocol_pb2.ETCD_TRANSACTION_FAILED
        assert again.revision == created.revision  # Nothing was written.

        # > 0: the mod revision must match. All or nothing across changes.
        mixed = await keyspace.apply_changes(
            etcd,
            etcd_root,
            [
                ("a", journal("a", 3), created.revision),
                ("b", journal("b", 3), created.revision - 1),
            ],
        )
        assert not mixed.succeeded
        updated = await keyspace.apply_changes(
            etcd, etcd_root, [("a", journal("a", 3), created.revision)]
        )
        assert updated.succeeded
        await ks.wait_for_revision(updated.revision, timeout=WAIT)
        assert ks.search(f"{etcd_root}/items/a").decoded.replication == 3  # type: ignore[union-attr]
        assert ks.search(f"{etcd_root}/items/b").decoded.replication == 1  # type: ignore[union-attr]

        # -1: unconditional, whatever the current revision.
        forced = await keyspace.apply_changes(etcd, etcd_root, [("a", journal("a", 4), -1)])
        assert forced.succeeded

        # Deletes need the current mod revision (or -1).
        stale = await keyspace.apply_changes(etcd, etcd_root, [("a", None, updated.revision)])
        assert not stale.succeeded
        gone = await keyspace.apply_changes(
            etcd, etcd_root, [("a", None, forced.revision), keyspace.Change("b", None, -1)]
        )
        assert gone.succeeded
        await ks.wait_for_revision(gone.revision, timeout=WAIT)
        assert names(ks, etcd_root) == []

        # A delete of a missing key with a positive expectation fails.
        missing = await keyspace.apply_changes(etcd, etcd_root, [("a", None, gone.revision)])
        assert not missing.succeeded


async def test_apply_changes_wraps_etcd_refusals(etcd: aetcd.Client, etcd_root: str) -> None:
    # etcd refuses one transaction touching the same key twice.
    with pytest.raises(errors.EtcdError, match="duplicate key") as info:
        await keyspace.apply_changes(etcd, etcd_root, [("a", b"1", -1), ("a", b"2", -1)])
    assert info.value.code == "INVALID_ARGUMENT"
    assert info.value.__cause__ is not None


async def test_lease_keys_vanish_when_the_lease_is_revoked(
    etcd: aetcd.Client, etcd_root: str
) -> None:
    ks = keyspace.KeySpace(etcd_root, lambda key, value: value)
    await ks.load(etcd)
    lease = await etcd.lease(60)
    async with watching(ks, etcd):
        member = f"{etcd_root}/members/local#broker-1"
        await put_raw(etcd, f"{etcd_root}/items/j", b"spec")
        rev = await put_raw(etcd, member, b"member", lease=lease.id)
        await ks.wait_for_revision(rev, timeout=WAIT)
        entry = ks.search(member)
        assert entry is not None and entry.lease == lease.id

        await lease.revoke()
        for _ in range(100):
            if ks.search(member) is None:
                break
            await asyncio.wait_for(ks.wait_for_update(), WAIT)
        assert ks.search(member) is None
        assert ks.search(f"{etcd_root}/items/j") is not None


async def test_bad_value_then_fix_reaches_the_mirror(etcd: aetcd.Client, etcd_root: str) -> None:
    ks = keyspace.KeySpace(etcd_root, decode_journal)
    await ks.load(etcd)
    async with watching(ks, etcd):
        rev = await put_raw(etcd, f"{etcd_root}/items/a", journal("wrong-name"))
        await ks.wait_for_revision(rev, timeout=WAIT)
        assert names(ks, etcd_root) == []
        rev = await put_raw(etcd, f"{etcd_root}/items/a", journal("a"))
        await ks.wait_for_revision(rev, timeout=WAIT)
        assert names(ks, etcd_root) == ["a"]


async def test_watch_from_a_compacted_revision_fails(etcd: aetcd.Client, etcd_root: str) -> None:
    ks = keyspace.KeySpace(etcd_root, decode_journal)
    await ks.load(etcd)
    await put_raw(etcd, f"{etcd_root}/items/a", journal("a"))
    rev = await put_raw(etcd, f"{etcd_root}/items/b", journal("b"))
    await etcd.compact(rev)
    with pytest.raises(errors.WatchCompactedError) as info:
        await asyncio.wait_for(ks.watch(etcd), WAIT)
    assert info.value.resume_revision == ks.revision + 1


async def test_watch_restarts_when_etcd_restarts(tmp_path: pathlib.Path) -> None:
    """The watch outlives its etcd going away: it restarts with back-off and catches up."""
    first = testing.EtcdServer(work_dir=tmp_path)
    first.start()
    ports = (first.client_port, first.peer_port)
    second: testing.EtcdServer | None = None
    client = await etcd_mod.connect(first.endpoint)
    try:
        root = "/gazette/cluster"
        ks = keyspace.KeySpace(
            root, decode_journal, keyspace.KeySpaceConfig(backoff=(0.0, 0.05, 0.1, 0.2))
        )
        await ks.load(client)
        async with watching(ks, client) as task:
            rev = await put_raw(client, f"{root}/items/a", journal("a"))
            await ks.wait_for_revision(rev, timeout=WAIT)

            # Stop etcd (its data stays in tmp_path), and bring it back on the same ports.
            first._terminate()
            await asyncio.sleep(0.3)
            assert not task.done()
            second = testing.EtcdServer(work_dir=tmp_path, client_port=ports[0], peer_port=ports[1])
            await asyncio.to_thread(second.start)

            # The client's channel may still be backing off from the outage (seen
            # under load in CI): a put retries UNAVAILABLE, as any etcd user does.
            async with asyncio.timeout(WAIT):
                while True:
                    try:
                        rev = await put_raw(client, f"{root}/items/b", journal("b"))
                        break
                    except grpc.aio.AioRpcError as e:
                        if e.code() != grpc.StatusCode.UNAVAILABLE:
                            raise
                        await asyncio.sleep(0.1)
            await ks.wait_for_revision(rev, timeout=WAIT)
            assert names(ks, root) == ["a", "b"]
            assert not task.done()
    finally:
        await client.close()
        if second is not None:
            second.stop()
        first.stop()
