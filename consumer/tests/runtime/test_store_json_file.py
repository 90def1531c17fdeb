"""JSONFileStore and the Go JSON of checkpoints."""

from __future__ import annotations

import asyncio
import json
import pathlib

import pytest

from gazette import message
from gazette.broker.client import AsyncOperation
from gazette.consumer import protocol as pc
from gazette.consumer.runtime import checkpoints, store_json_file
from gazette.consumer.testing import TaskShard


def Shard(tg: asyncio.TaskGroup) -> TaskShard:
    return TaskShard("/app/items/shard-a", tg)


def sample() -> pc.Checkpoint:
    return checkpoints.build_checkpoint(
        {"a/j": 120, "b/j": 0},
        [message.ProducerState("a/j", b"\x01\x02\x03\x04\x05\x06", 1 << 63, -1)],
        [message.AckIntent("out/j", b'{"UUID":"x"}\n')],
    )


def test_checkpoint_builds_and_flattens() -> None:
    cp = sample()
    assert checkpoints.flatten_read_through(cp) == {"a/j": 120}
    assert checkpoints.flatten_producer_states(cp) == [
        message.ProducerState("a/j", b"\x01\x02\x03\x04\x05\x06", 1 << 63, -1)
    ]
    assert cp.ack_intents == {"out/j": b'{"UUID":"x"}\n'}


def test_go_json_of_a_checkpoint() -> None:
    # Written by hand from Gazette's struct tags (consumer/protocol/protocol.pb.go).
    go = (
        '{"sources":{"a/j":{"read_through":120,"producers":[{"id":"AQIDBAUG",'
        '"state":{"last_ack":9223372036854775808,"begin":-1}}]},"b/j":{"producers":null}},'
        '"ack_intents":{"out/j":"eyJVVUlEIjoieCJ9Cg=="}}'
    )
    assert checkpoints.to_go_json(sample()) == json.loads(go)
    assert checkpoints.from_go_json(json.loads(go)) == sample()
    assert checkpoints.from_go_json(None) == pc.Checkpoint()


async def test_commit_then_reopen(tmp_path: pathlib.Path) -> None:
    async with asyncio.TaskGroup() as tg:
        shard = Shard(tg)
        store = store_json_file.JSONFileStore(tmp_path, {"count": 0})
        assert await store.restore_checkpoint(shard) == pc.Checkpoint()  # type: ignore[arg-type]
        store.state["count"] = 3
        await store.start_commit(shard, sample(), ())  # type: ignore[arg-type]
        store.state["count"] = 4  # The next transaction, never committed.
    again = store_json_file.JSONFileStore(tmp_path, {})
    assert again.state == {"count": 3}
    assert await again.restore_checkpoint(None) == sample()  # type: ignore[arg-type]
    lines = (tmp_path / "state.json").read_text().splitlines()
    assert json.loads(lines[0]) == {"a/j": 120}  # Gazette's legacy offsets first.
    assert not (tmp_path / "next.json").exists()


async def test_failed_dependency_commits_nothing(tmp_path: pathlib.Path) -> None:
    async with asyncio.TaskGroup() as tg:
        shard = Shard(tg)
        store = store_json_file.JSONFileStore(tmp_path, {"n": 1})
        dep = AsyncOperation.finished(RuntimeError("append failed"))
        op = store.start_commit(shard, sample(), [dep])  # type: ignore[arg-type]
        await op.wait()
    assert op.error is not None and "append failed" in str(op.error)
    assert not (tmp_path / "state.json").exists()


def test_legacy_offsets_override_and_garbage_is_an_error(tmp_path: pathlib.Path) -> None:
    (tmp_path / "state.json").write_text('{"a/j": 7}\n{"k": 1}\n')
    store = store_json_file.JSONFileStore(tmp_path, None)
    assert store.state == {"k": 1}
    assert checkpoints.flatten_read_through(store._checkpoint) == {"a/j": 7}
    (tmp_path / "state.json").write_text('{"a/j": 7}\n{"k": \n')
    with pytest.raises(Exception, match=r"state\.json: not valid JSON"):
        store_json_file.JSONFileStore(tmp_path, None)
