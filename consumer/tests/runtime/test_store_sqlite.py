"""SQLiteStore against a real broker: commits recorded, replayed at every point, compacted."""

from __future__ import annotations

import asyncio
import pathlib
import random
import shutil
import threading
from collections.abc import AsyncIterator
from typing import Any

import apsw
import pytest

from gazette.broker import client
from gazette.broker.client import AsyncOperation
from gazette.consumer import protocol as pc
from gazette.consumer import recoverylog as rl
from gazette.consumer import testing as consumer_testing
from gazette.consumer.recoverylog.recorded_op_pb2 import FSMHints
from gazette.consumer.runtime import checkpoints, store_sqlite
from gazette.consumer.testing import TaskShard
from gazette.keyspace import testing as ks_testing

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

LOG = "recovery/sqlite-000"
DDL = "CREATE TABLE IF NOT EXISTS kv (k INTEGER PRIMARY KEY, v BLOB NOT NULL)"


@pytest.fixture
async def jc(
    etcd: Any, etcd_server: ks_testing.EtcdServer, tmp_path: pathlib.Path
) -> AsyncIterator[client.JournalClient]:
    async with consumer_testing.recovery_logs(etcd_server.endpoint, tmp_path / "b", LOG) as jc:
        yield jc


def checkpoint(n: int) -> pc.Checkpoint:
    """Commit ``n``'s checkpoint (offsets start at 1: a zero offset is not kept)."""
    return checkpoints.build_checkpoint({"src/j": n + 1}, [], [])


def rows(db: apsw.Connection) -> dict[int, bytes]:
    return {int(k): bytes(v) for k, v in db.execute("SELECT k, v FROM kv")}


async def head(jc: client.JournalClient) -> int:
    return int((await client.append(jc, LOG, b"")).commit.end)


async def replay(
    jc: client.JournalClient, hints: FSMHints, d: pathlib.Path, end_offset: int | None = None
) -> tuple[dict[int, bytes], int]:
    """The rows and checkpointed offset of the database played back into ``d``."""
    await rl.Player(jc, hints, d).play(end_offset=end_offset)
    current = d / store_sqlite.CURRENT
    name = current.read_text().strip() if current.exists() else store_sqlite.FIRST_DB
    if not (d / name).exists():
        return {}, -1
    db = apsw.Connection(str(d / name))
    try:
        db.execute("PRAGMA locking_mode=EXCLUSIVE").fetchall()
        got = (
            rows(db) if db.execute("SELECT 1 FROM sqlite_master WHERE name='kv'").fetchone() else {}
        )
        row = db.execute("SELECT checkpoint FROM gazette_checkpoint").fetchone()
        cp = pc.Checkpoint()
        cp.ParseFromString(bytes(row[0]) if row and row[0] else b"")
        at = checkpoints.flatten_read_through(cp).get("src/j", 0) - 1
        return got, at
    finally:
        db.close()


async def test_commits_replay_at_every_point_and_compaction_frees_the_log(
    jc: client.JournalClient, tmp_path: pathlib.Path
) -> None:
    src = tmp_path / "primary"
    src.mkdir()
    rng = random.Random(7)
    model: dict[int, bytes] = {}
    states: list[tuple[int, dict[int, bytes]]] = []  # (log head after commit n, rows)
    compacted_after: list[int] = []  # Commits followed by a compaction.
    config = store_sqlite.SQLiteStoreConfig(compact_ratio=3.0, compact_min_bytes=256 << 10)
    async with asyncio.TaskGroup() as tg, client.AppendService(jc) as appends:
        shard = TaskShard("/app/items/s", tg)
        recorder = rl.Recorder(rl.FSM(FSMHints(log="none")), 11, src, appends, LOG)
        await recorder.start()
        store = store_sqlite.SQLiteStore(recorder, DDL, config)
        assert await store.restore_checkpoint(shard) == pc.Checkpoint()  # type: ignore[arg-type]
        states.append((await head(jc), {}))
        for n in range(60):
            for _ in range(rng.randrange(1, 40)):
                k = rng.randrange(300)
                if rng.random() < 0.15:
                    store.db.execute("DELETE FROM kv WHERE k = ?", (k,))
                    model.pop(k, None)
                else:
                    v = rng.randbytes(rng.randrange(10, 3000))
                    store.db.execute(
                        "INSERT INTO kv(k, v) VALUES(?, ?) ON CONFLICT(k) DO UPDATE SET v = ?",
                        (k, v, v),
                    )
                    model[k] = v
            before = store.compactions
            await store.start_commit(shard, checkpoint(n), ())  # type: ignore[arg-type]
            states.append((await head(jc), dict(model)))
            if store.compactions != before:
                compacted_after.append(n)
        # An open transaction that never commits.
        store.db.execute("INSERT INTO kv(k, v) VALUES(100000, x'00')")
        hints = await recorder.build_hints()
        assert rows(store.db) == {**model, 100000: b"\x00"}
        await store.destroy()

    # The log played to each commit's end gives exactly that commit; played to any
    # point inside the next commit's ops, that commit or the one before.
    for i, (end, want) in enumerate(states[1:], start=1):
        got, at = await replay(jc, FSMHints(log=LOG), tmp_path / f"at{i}", end)
        assert (got, at) == (want, i - 1), f"replayed to the end of commit {i - 1}"
        shutil.rmtree(tmp_path / f"at{i}")
    cuts = [(i, rng.randrange(states[i][0], states[i + 1][0])) for i in rng.sample(range(1, 59), 8)]
    # Compactions record at the start of the next commit's range: sweep those densely.
    assert compacted_after, "the policy should have compacted by now"
    for n in [n for n in compacted_after if n + 2 < len(states)][:2]:
        lo, hi = states[n + 1][0], states[n + 2][0]
        cuts += [(n + 1, lo + (hi - lo) * k // 16) for k in range(16)]
    for i, cut in cuts:
        got, at = await replay(jc, FSMHints(log=LOG), tmp_path / "cut", cut)
        assert at in (i - 1, i) and got == states[at + 1][1], f"cut at {cut} in commit {i}"

    # Compaction made the early log dead: the hints start after it, and replaying from
    # them (as a new primary would) gives the last commit.
    _, segments = rl.live_log_segments(hints)
    first = min(seg.first_offset for seg in segments)
    assert first > states[len(states) // 4][0], f"the live log starts at {first}"
    got, at = await replay(jc, hints, tmp_path / "from-hints")
    assert (got, at) == (model, 59)


async def test_a_new_primary_opens_the_played_log_and_records_on(
    jc: client.JournalClient, tmp_path: pathlib.Path
) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    async with asyncio.TaskGroup() as tg, client.AppendService(jc) as appends:
        shard = TaskShard("/app/items/s", tg)
        rec = rl.Recorder(rl.FSM(FSMHints(log="none")), 1, one, appends, LOG)
        await rec.start()
        store = store_sqlite.SQLiteStore(rec, DDL)
        store.db.execute("INSERT INTO kv VALUES (1, x'01')")
        await store.start_commit(shard, checkpoint(1), ())  # type: ignore[arg-type]
        hints = await rec.build_hints()
        await store.destroy()

    fsm = await rl.Player(jc, hints, two).play(handoff_author=2)
    async with asyncio.TaskGroup() as tg, client.AppendService(jc) as appends:
        shard = TaskShard("/app/items/s", tg)
        rec = rl.Recorder(fsm, 2, two, appends, LOG)
        await rec.start()
        store = store_sqlite.SQLiteStore(rec, DDL)
        cp = await store.restore_checkpoint(shard)  # type: ignore[arg-type]
        assert checkpoints.flatten_read_through(cp) == {"src/j": 2}
        assert rows(store.db) == {1: b"\x01"}
        store.db.execute("INSERT INTO kv VALUES (2, x'02')")
        # Temporary files (no name) pass through unrecorded.
        store.db.execute("CREATE TEMP TABLE scratch(x)")
        store.db.executemany("INSERT INTO scratch VALUES (?)", [(b"y" * 5000,)] * 500)
        assert store.db.execute("SELECT count(*) FROM scratch").fetchone() == (500,)
        await store.start_commit(shard, checkpoint(2), ())  # type: ignore[arg-type]
        hints2 = await rec.build_hints()

        # Writing from another thread is refused (the recorder appends on the loop).
        err: list[BaseException] = []

        def other() -> None:
            try:
                store.db.execute("INSERT INTO kv VALUES (3, zeroblob(100000))")
                store.db.execute("COMMIT")
            except BaseException as e:  # noqa: BLE001 - collected for the assertion.
                err.append(e)

        t = threading.Thread(target=other)
        t.start()
        t.join()
        assert err, "a write from another thread must fail"
        await store.destroy()

    got, at = await replay(jc, hints2, tmp_path / "three")
    assert (got, at) == ({1: b"\x01", 2: b"\x02"}, 2)


async def test_a_failed_dependency_fails_the_commit(
    jc: client.JournalClient, tmp_path: pathlib.Path
) -> None:
    d = tmp_path / "p"
    d.mkdir()
    async with asyncio.TaskGroup() as tg, client.AppendService(jc) as appends:
        shard = TaskShard("/app/items/s", tg)
        rec = rl.Recorder(rl.FSM(FSMHints(log="none")), 1, d, appends, LOG)
        await rec.start()
        store = store_sqlite.SQLiteStore(rec, DDL)
        store.db.execute("INSERT INTO kv VALUES (1, x'01')")
        dep = AsyncOperation.finished(RuntimeError("append failed"))
        op = store.start_commit(shard, checkpoint(1), [dep])  # type: ignore[arg-type]
        await asyncio.wait_for(op.wait(), 30)
        assert op.error is not None
        await store.destroy()
