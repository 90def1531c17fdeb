"""Recorder and Player against a real broker: files recorded, replayed elsewhere, handed off."""

from __future__ import annotations

import asyncio
import contextlib
import pathlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gazette.broker import client
from gazette.consumer import recoverylog as rl
from gazette.consumer import testing as consumer_testing
from gazette.consumer.recoverylog.recorded_op_pb2 import FSMHints
from gazette.keyspace import testing as ks_testing

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

LOG = "recovery/shard-000"


@pytest.fixture
async def jc(
    etcd: Any, etcd_server: ks_testing.EtcdServer, tmp_path: pathlib.Path
) -> AsyncIterator[client.JournalClient]:
    async with consumer_testing.recovery_logs(etcd_server.endpoint, tmp_path / "b", LOG) as jc:
        yield jc


async def record_files(recorder: rl.Recorder, d: pathlib.Path) -> None:
    """A small store's life: files written, renamed over, removed."""
    a = recorder.record_create(d / "a.txt")
    recorder.record_write_at(a, b"hello ", 0)
    recorder.record_write_at(a, b"world", 6)
    tmp = recorder.record_create(d / "next.json")
    recorder.record_write_at(tmp, b'{"v": 1}', 0)
    recorder.record_rename(d / "next.json", d / "state.json")
    gone = recorder.record_create(d / "gone")
    recorder.record_write_at(gone, b"x" * 1000, 0)
    recorder.record_remove(d / "gone")
    recorder.record_link(d / "a.txt", d / "sub" / "a-link.txt")
    await recorder.barrier()


async def test_recorded_files_replay_into_another_directory(
    jc: client.JournalClient, tmp_path: pathlib.Path
) -> None:
    src = tmp_path / "primary"
    src.mkdir()
    async with client.AppendService(jc) as appends:
        recorder = rl.Recorder(rl.FSM(FSMHints(log="other/log")), 1234, src, appends, LOG)
        await recorder.start()  # Takes the log over (author register).
        await record_files(recorder, src)
        hints = await recorder.build_hints()
    assert [n.fnode for n in hints.live_nodes] == sorted(n.fnode for n in hints.live_nodes)

    # A player from the hints (as a new primary would) rebuilds the live files only.
    dst = tmp_path / "replica"
    player = rl.Player(jc, rl.hints_from_value(rl.hints_to_json(hints)), dst)
    fsm = await player.play(handoff_author=5678)
    assert (dst / "a.txt").read_bytes() == b"hello world"
    assert (dst / "sub" / "a-link.txt").read_bytes() == b"hello world"
    assert (dst / "state.json").read_bytes() == b'{"v": 1}'
    assert not (dst / "gone").exists() and not (dst / "next.json").exists()
    assert not (dst / ".fnodes").exists()

    # The hand-off fenced the old author: its appends never land (they retry until its
    # shard is cancelled)...
    async def zombie() -> None:
        async with client.AppendService(jc) as appends:
            late = rl.Recorder(recorder.fsm, 1234, src, appends, LOG)
            late.record_create(src / "late")
            await late.barrier()

    zombie_task = asyncio.create_task(zombie())
    await asyncio.sleep(1.5)
    assert not zombie_task.done()
    zombie_task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await zombie_task

    # ...while the new author records on from the player's FSM.
    async with client.AppendService(jc) as appends2:
        heir = rl.Recorder(fsm, 5678, dst, appends2, LOG)
        await heir.start()
        f = heir.record_create(dst / "after.txt")
        heir.record_write_at(f, b"new primary", 0)
        hints2 = await heir.build_hints()

    again = tmp_path / "third"
    await rl.Player(jc, hints2, again).play()
    assert (again / "after.txt").read_bytes() == b"new primary"
    assert (again / "a.txt").read_bytes() == b"hello world"
    assert not (again / "late").exists()


async def test_play_without_hints_reads_the_whole_log(
    jc: client.JournalClient, tmp_path: pathlib.Path
) -> None:
    src = tmp_path / "p"
    src.mkdir()
    async with client.AppendService(jc) as appends:
        recorder = rl.Recorder(rl.FSM(FSMHints(log="none/yet")), 42, src, appends, LOG)
        await recorder.start()
        await record_files(recorder, src)
    out = tmp_path / "r"
    fsm = await rl.Player(jc, FSMHints(log=LOG), out).play()
    assert (out / "a.txt").read_bytes() == b"hello world"
    assert sorted(fsm.links) == ["/a.txt", "/state.json", "/sub/a-link.txt"]
