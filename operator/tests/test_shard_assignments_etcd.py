"""AssignmentViews against a real etcd: the replicas of shards, through outages and compaction.

Assignments are written as the consumer runtime writes them: keys of
:func:`gazette.allocator.assignment_key`, values a serialized ``ReplicaStatus``
(empty for IDLE, as the allocator creates them), decoded here by the runtime's own
:class:`~gazette.consumer.runtime.shards.ShardDecoder` first, to prove the keys real.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import pathlib
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from gazette import allocator, keyspace
from gazette.consumer import protocol as pc
from gazette.consumer.runtime import shards
from gazette.keyspace import testing as etcd_testing
from gazette.operator import assignments, status

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

Code = pc.ReplicaStatus.Code
PREFIX = "/gazette/consumers/word-count"
SHARD = "word-count/part-000"
FAST = assignments.ViewConfig(keyspace=keyspace.KeySpaceConfig(watch_delay=0.01))


def assignment(zone: str, suffix: str, slot: int, code: int = Code.IDLE) -> tuple[bytes, bytes]:
    key = allocator.assignment_key(PREFIX, allocator.Assignment(SHARD, zone, suffix, slot))
    value = b"" if code == Code.IDLE else pc.ReplicaStatus(code=code).SerializeToString()  # type: ignore[arg-type]
    # What the runtime's own decoder makes of it (it raises on anything else).
    decode = allocator.key_value_decoder(PREFIX, shards.ShardDecoder())
    decoded = decode(key, value)
    assert isinstance(decoded, allocator.Assignment)
    assert decoded.value.code == code
    return key.encode(), value


async def eventually(check: Callable[[], bool | Awaitable[bool]], within: float, what: str) -> None:
    async with asyncio.timeout(within):
        while True:
            got = check()
            if not isinstance(got, bool):
                got = await got
            if got:
                return
            await asyncio.sleep(0.05)
    raise AssertionError(what)  # pragma: no cover


def members(views: assignments.AssignmentViews) -> list[tuple[str, int, str]] | None:
    got = views.replicas(PREFIX, SHARD)
    if got is None:
        return None
    return [(r.member, r.slot, r.code_name) for r in sorted(got, key=lambda r: r.slot)]


async def test_replicas_follow_etcd(etcd: Any) -> None:
    views = assignments.AssignmentViews(etcd, FAST)
    assert views.replicas(PREFIX, SHARD) is None  # asked: now followed
    async with asyncio.TaskGroup() as tg:
        task = tg.create_task(views.run())
        await eventually(lambda: views.replicas(PREFIX, SHARD) == [], 10, "the first load")

        await etcd.put(*assignment("a", "c1", 0, Code.PRIMARY))
        await etcd.put(*assignment("b", "c2", 1, Code.STANDBY))
        # Another shard's, and a key under the range that is no assignment: not ours.
        other = allocator.Assignment("word-count/part-001", "a", "c1", 0)
        await etcd.put(allocator.assignment_key(PREFIX, other).encode(), b"")
        await etcd.put(f"{PREFIX}/assignments-not".encode(), b"x")
        want = [("a/c1", 0, "PRIMARY"), ("b/c2", 1, "STANDBY")]
        await eventually(lambda: members(views) == want, 10, f"replicas {want}")

        await etcd.delete(assignment("a", "c1", 0)[0])
        await eventually(lambda: members(views) == [("b/c2", 1, "STANDBY")], 10, "the primary gone")
        got = views.replicas(PREFIX, SHARD)
        assert got is not None
        assert (
            status.shard_status_for(
                {"status": {"conditions": [{"type": "Applied", "reason": "Applied"}]}},
                got,
                datetime.datetime.now(datetime.UTC),
            )
            is not None
        )
        task.cancel()


async def test_an_outage_and_a_compaction_are_survived(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Each watch restart waits 8s: long enough to restart etcd, change the assignments and
    # compact them away before the watch resumes from the revision it had reached.
    config = assignments.ViewConfig(
        keyspace=keyspace.KeySpaceConfig(watch_delay=0.01, backoff=(8.0,)),
        reload_backoff=(0.2,),
    )
    with etcd_testing.EtcdServer(work_dir=tmp_path / "etcd") as server:
        client = await keyspace.connect(server.endpoint, call_timeout=5)
        try:
            views = assignments.AssignmentViews(client, config)
            views.replicas(PREFIX, SHARD)
            async with asyncio.TaskGroup() as tg:
                task = tg.create_task(views.run())
                await client.put(*assignment("a", "c1", 0, Code.PRIMARY))
                await eventually(
                    lambda: members(views) == [("a/c1", 0, "PRIMARY")], 10, "the primary"
                )

                await asyncio.to_thread(server.kill)
                await asyncio.sleep(0.5)
                await asyncio.to_thread(server.restart)

                async def changed_and_compacted() -> bool:
                    try:
                        await client.delete(assignment("a", "c1", 0)[0])
                        put = await client.put(*assignment("b", "c2", 0, Code.PRIMARY))
                        await client.compact(put.header.revision)
                    except Exception:  # noqa: BLE001 - the client reconnects; try again
                        return False
                    return True

                with caplog.at_level(logging.WARNING, logger=assignments.__name__):
                    await eventually(changed_and_compacted, 10, "writes after the restart")
                    await eventually(
                        lambda: members(views) == [("b/c2", 0, "PRIMARY")],
                        40,
                        "the new primary after the compaction",
                    )
                assert any("compacted" in r.getMessage() for r in caplog.records), [
                    r.getMessage() for r in caplog.records
                ]
                task.cancel()
        finally:
            await client.close()
