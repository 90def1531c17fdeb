"""BatchedTxn against a real etcd: batching limits, shared comparisons, transactions in flight."""

from __future__ import annotations

import aetcd
import pytest

from gazette.allocator import errors, metrics, txn

pytestmark = pytest.mark.integration


async def _put(client: aetcd.Client, key: str) -> int:
    resp = await txn.commit(client, [], [txn.put(key, b"v")])
    return int(resp.header.revision)


async def _count(client: aetcd.Client, prefix: str) -> int:
    resp = await client.get_prefix(prefix.encode(), keys_only=True)
    return len(resp)


def _succeeded() -> float:
    return metrics.leader_txns.labels(metrics.TXN_SUCCEEDED)._value.get()


@pytest.mark.parametrize("in_flight", [1, 4])
async def test_checkpoints_batch_within_limits(etcd: aetcd.Client, in_flight: int) -> None:
    fixed_rev = await _put(etcd, "/t/leader")
    member_revs = [await _put(etcd, f"/t/members/m{i}") for i in range(3)]
    before = _succeeded()
    config = txn.TxnConfig(max_ops=10, max_in_flight=in_flight)
    async with txn.BatchedTxn(
        etcd, txn.mod_revision_is("/t/leader", fixed_rev), config=config
    ) as t:
        for i in range(40):
            # Three puts per checkpoint, each comparing a member key: repeated
            # comparisons are sent once per transaction.
            for m in range(3):
                t.if_(txn.mod_revision_is(f"/t/members/m{m}", member_revs[m]))
                t.then(txn.put(f"/t/assign/i{i:02d}#m{m}", b""))
            await t.checkpoint()
    # 3 ops a checkpoint, at most 10 a transaction: 3 checkpoints (9 ops) each.
    assert t.txns == 14
    assert _succeeded() - before == 14
    assert await _count(etcd, "/t/assign/") == 120
    assert t.revision == max(member_revs) + 14
    await etcd.delete_prefix(b"/t/")


async def test_a_failed_check_stops_the_batch(etcd: aetcd.Client) -> None:
    rev = await _put(etcd, "/t/leader")
    # One at a time, so that "after" is well defined.
    config = txn.TxnConfig(max_ops=4, max_in_flight=1)
    t = txn.BatchedTxn(etcd, txn.mod_revision_is("/t/leader", rev), config=config)

    async def checkpoint(*keys: str) -> None:
        t.then(*(txn.put(k, b"") for k in keys))
        await t.checkpoint()

    with pytest.raises(errors.TxnFailed):
        async with t:
            await checkpoint("/t/a0", "/t/a1", "/t/a2", "/t/a3")
            await checkpoint("/t/a4", "/t/a5", "/t/a6", "/t/a7")
            # This checkpoint's comparison fails: its transaction is refused,
            # and nothing is sent after it.
            t.if_(txn.version_is("/t/leader", 99))
            await checkpoint("/t/never0", "/t/never1", "/t/never2")
            for i in range(3):
                await checkpoint(f"/t/later{i}", "/t/x", "/t/y", "/t/z")
    # The two transactions before the failing one applied; the revision to
    # read through is the later of theirs.
    assert t.txns == 2
    assert await _count(etcd, "/t/a") == 8
    assert await _count(etcd, "/t/never") == 0
    assert await _count(etcd, "/t/later") == 0
    assert t.revision == rev + 2
    await etcd.delete_prefix(b"/t/")


async def test_fixed_comparisons_guard_every_transaction(etcd: aetcd.Client) -> None:
    rev = await _put(etcd, "/t/leader")
    await _put(etcd, "/t/leader")  # the leader key changed: we no longer lead
    t = txn.BatchedTxn(etcd, txn.mod_revision_is("/t/leader", rev))
    with pytest.raises(errors.TxnFailed):
        async with t:
            t.then(txn.put("/t/x", b""))
            await t.checkpoint()
    assert t.revision == 0
    assert await _count(etcd, "/t/x") == 0
    await etcd.delete_prefix(b"/t/")


def test_too_many_fixed_comparisons() -> None:
    cmps = [txn.mod_revision_is(f"/k{i}", 1) for i in range(3)]
    with pytest.raises(ValueError, match="too many fixed"):
        txn.BatchedTxn(None, *cmps, config=txn.TxnConfig(max_ops=3))  # type: ignore[arg-type]
